"""SCHEDULER_PERSIST = False is not supported: the crawler says so and keeps the shared queues."""

from __future__ import annotations

import logging

import pytest
from scrapy.utils.test import get_crawler

from scrapy_cluster.crawler.common.resolution import HANDOVER_SETTING
from scrapy_cluster.crawler.scheduler import DistributedScheduler
from scrapy_cluster.crawler.spiders.link import LinkSpider
from scrapy_cluster.settings import load_settings


def _scheduler_log(caplog: pytest.LogCaptureFixture, persist: bool) -> list[str]:
    cluster = load_settings("crawler", environ={}, overrides={"SCHEDULER_PERSIST": persist})
    crawler = get_crawler(LinkSpider, {HANDOVER_SETTING: cluster})
    with caplog.at_level(logging.WARNING, logger="scrapy_cluster.crawler.scheduler"):
        DistributedScheduler.from_crawler(crawler)
    return [record.getMessage() for record in caplog.records]


def test_scheduler_persist_false_is_reported_as_ignored(caplog: pytest.LogCaptureFixture) -> None:
    messages = _scheduler_log(caplog, persist=False)
    assert any(m.startswith("SCHEDULER_PERSIST = False is not supported and is ignored")
               for m in messages)


def test_scheduler_persist_true_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert _scheduler_log(caplog, persist=True) == []
