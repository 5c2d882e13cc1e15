"""The reliability suite (`make test-reliability`): faults, bad input and hostile pages against
real servers and processes. Every test here is marked ``reliability`` (and ``integration``);
``make test`` leaves them out, see docs/reliability.md."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/reliability/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.reliability)
            item.add_marker(pytest.mark.integration)
