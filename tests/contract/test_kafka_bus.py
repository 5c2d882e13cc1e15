"""Case 1 of the crawl contract (a generated site: every page fetched once, one item per
page) with the Kafka bus instead of Redis Streams, for both engines: the private tansu broker
of the session (``kafka_bootstrap``), a real crawler process, the same site and assertions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.bus_fixtures import KAFKA_TEST_SESSION_TIMEOUT_MS
from tests.support.contract_checks import GRAPH_HOSTS, crawl_generated_site
from tests.support.contract_crawl import CrawlRig
from tests.support.contract_site import ContractSite

pytestmark = pytest.mark.integration


def test_generated_site_over_the_kafka_bus(
        kafka_bootstrap: str, make_rig: Callable[..., CrawlRig],
        make_site: Callable[..., ContractSite]) -> None:
    rig = make_rig(bus={"BUS_BACKEND": "kafka", "KAFKA_HOSTS": kafka_bootstrap,
                        "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": KAFKA_TEST_SESSION_TIMEOUT_MS})
    crawl_generated_site(make_site(GRAPH_HOSTS), rig)
