"""Let commands run next to ``scrapy-cluster up`` find its Redis and bus without flags.

While ``up`` runs it keeps ``<SC_DATA_DIR>/cluster.json`` with its pid and the settings its
children share (REDIS_URL, BUS_BACKEND, ...). ``load_settings`` (``loader.py``) applies them
as a layer just above the built-in defaults, only while that pid is alive, so ``scrapy-cluster
feed`` and ``dump`` in another terminal talk to the embedded cluster; anything set in
localsettings.py, the environment or on the command line still wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import orjson

CLUSTER_FILE = "cluster.json"
RUNNING_CLUSTER_SOURCE = "running cluster"  # how ``Settings.source`` names values found here


def write_running_cluster(data_dir: Path, env: Mapping[str, str]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    payload = {"pid": os.getpid(), "settings": dict(env)}
    path = data_dir / CLUSTER_FILE
    path.unlink(missing_ok=True)  # created afresh: owner-only, it may hold REDIS_URL's password
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(orjson.dumps(payload))


def clear_running_cluster(data_dir: Path) -> None:
    (data_dir / CLUSTER_FILE).unlink(missing_ok=True)


def read_running_cluster(data_dir: Path) -> dict[str, str]:
    """The shared settings of a live ``up`` in ``data_dir``, or {} when none runs."""
    path = data_dir / CLUSTER_FILE
    try:
        payload = orjson.loads(path.read_bytes())
        os.kill(int(payload["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return {}
    settings = payload.get("settings")
    return {str(k): str(v) for k, v in settings.items()} if isinstance(settings, dict) else {}
