"""Re-crawl schedules through a Redis restart (issue 26): a scheduled crawl on Debian's nginx
(``tests/support/recrawl_rig.py``), Redis stopped for 3 s mid-schedule (SIGTERM, AOF on) and
restarted on the same data and port, with each crawler engine. Judged from nginx's access log
and the crawled topic: every page fetched in every cycle (no scheduled URL lost), the
complete notice once, no crawler restarted."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.recrawl_rig import (
    APPID,
    CRAWLER_ENV,
    ENGINES,
    INTERVAL_S,
    MONITOR_ENV,
    SCHEDULE_SITE,
    rig,
)

pytestmark = pytest.mark.integration

CYCLES = 4


@pytest.mark.parametrize("engine", ENGINES)
def test_a_redis_restart_mid_schedule_loses_no_scheduled_url(tmp_path: Path, engine: str) -> None:
    with rig(tmp_path, SCHEDULE_SITE, MONITOR_ENV, redis_persist=True) as running:
        crawler = running.cluster.start(engine, **CRAWLER_ENV)
        crawlid = running.feed({"interval": INTERVAL_S, "max_cycles": CYCLES})
        running.wait_fetched(running.site.urls(), 2)
        scheduled = running.cluster.frontier.crawl_info("link", APPID, crawlid).scheduled
        running.redis.restart(down_s=3.0)
        notices = running.completed(crawlid)
        fetched = Counter({url: len(records) for url, records in running.fetches().items()})
        items = Counter(item["url"] for _, item in running.watch.items(crawlid))
        alive = crawler.poll() is None
        urls = running.site.urls()
    assert scheduled > 0  # the restart came while URLs waited in the schedule
    assert len(notices) == 1
    assert alive
    assert {url: min(fetched[url], 1 + CYCLES) for url in urls} == \
        {url: 1 + CYCLES for url in urls}
    assert {url: min(items[url], 1 + CYCLES) for url in urls} == {url: 1 + CYCLES for url in urls}
