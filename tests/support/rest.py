"""Running the Rest service in tests: in this process (a uvicorn thread) or as a real
``scrapy-cluster rest`` process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from scrapy_cluster.cli.rest_cmd import open_rest_service
from scrapy_cluster.rest.server import RestRunner
from scrapy_cluster.settings import load_settings
from tests.support.processes import stop_processes
from tests.support.services import free_port


@contextmanager
def running_rest(overrides: Mapping[str, Any]) -> Iterator[RestRunner]:
    """A Rest service serving on a free loopback port from a thread of this process."""
    settings = load_settings("rest", overrides={
        "REST_HOST": "127.0.0.1", "FLASK_PORT": free_port(), "LOG_LEVEL": "WARNING",
        "STATS_DUMP": 0, **overrides})
    logger = logging.getLogger("test-rest")
    with open_rest_service(settings, logger) as runner:
        thread = runner.start_in_thread()
        try:
            yield runner
        finally:
            runner.stop_thread(thread)


@contextmanager
def rest_process(env: Mapping[str, str], log_path: Path,
                 timeout_s: float = 30.0) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``scrapy-cluster rest`` process (settings from ``env``); yields its base URL and
    the process once ``/`` answers."""
    port = free_port()
    full_env = {**os.environ, "REST_HOST": "127.0.0.1", "FLASK_PORT": str(port),
                "STATS_DUMP": "0", **env}
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "scrapy_cluster", "rest"],
                                   env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(url + "/", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Rest service did not start; see {log_path}")
            time.sleep(0.1)
        yield url, process
    finally:
        stop_processes([process])
