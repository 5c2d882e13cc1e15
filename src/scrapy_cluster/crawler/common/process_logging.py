"""Logging of a crawler process, for both engines (``docs/deploy.md``, "Shipping logs").

With ``SC_LOG_JSON`` the cluster's ``SC_LOG_*`` settings govern every record of the process:
the root logger writes the cluster's JSON lines (``scrapy_cluster.log.configure_root_logging``)
to ``SC_LOG_STDOUT`` or ``SC_LOG_DIR/SC_LOG_FILE`` at ``SC_LOG_LEVEL``, and Scrapy installs no
root handler of its own, so each record is written once and Scrapy's ``LOG_FILE``,
``LOG_ENABLED``, ``LOG_FORMAT``, ``LOG_DATEFORMAT``, ``LOG_SHORT_NAMES``, ``LOG_STDOUT`` and
``LOG_INSTALL_ROOT_HANDLER`` have no effect. Without it, the Scrapy engine logs as Scrapy does
(its root handler, Scrapy's ``LOG_*`` settings) and the fast engine in the same human format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scrapy_cluster.log import configure_root_logging

PREFIX = "SC_"
"""The crawler reads its logging settings as ``SC_LOG_*``."""


def start_crawler_logging(cluster: Mapping[str, Any]) -> bool:
    """Before anything else logs: with ``SC_LOG_JSON``, every logger of the process writes the
    cluster's JSON lines; returns whether it does. Calling it again replaces its handler."""
    return configure_root_logging(cluster, prefix=PREFIX)
