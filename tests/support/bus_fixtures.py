"""Bus fixtures (registered through ``pytest_plugins`` in ``tests/conftest.py``).

``bus_backend`` runs a test once per backend and yields
``(backend_name, settings_overrides)``; pass the overrides to
``load_settings(..., overrides=...)``. Topic names are shared by the whole
session, so tests should use topic names of their own (e.g. with a uuid).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka_broker import KafkaBroker, external_kafka
from tests.support.starting import external_or_started

# A short session timeout makes group joins and dead-member detection quick on the test broker.
KAFKA_TEST_SESSION_TIMEOUT_MS = 3000
# Entries left pending by a dead Redis Streams consumer are claimed after this idle time.
REDIS_TEST_CLAIM_IDLE_MS = 1000


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """"127.0.0.1:<port>" of a private tansu broker for the session (or SC_TEST_KAFKA)."""
    for broker in external_or_started(
            external_kafka(), lambda: KafkaBroker(Path(tmp_path_factory.mktemp("kafka")))):
        yield broker if isinstance(broker, str) else broker.bootstrap


@pytest.fixture(params=["kafka", "redis"])
def bus_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Each backend in turn: ``("kafka", {...})`` then ``("redis", {...})``."""
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        return "kafka", {"BUS_BACKEND": "kafka", "KAFKA_HOSTS": bootstrap,
                         "KAFKA_CONSUMER_SESSION_TIMEOUT_MS": KAFKA_TEST_SESSION_TIMEOUT_MS}
    redis_url = request.getfixturevalue("redis_url")
    return "redis", {"BUS_BACKEND": "redis", "REDIS_URL": redis_url,
                     "REDIS_STREAM_CLAIM_IDLE_MS": REDIS_TEST_CLAIM_IDLE_MS}
