"""`dump` follows the cluster across an `up` restart (issue: clients kept retrying the old Redis
port and missed every new page): with the old port free `up` takes it again and `dump`
reconnects; with it taken `up` chooses another and `dump` finds it in cluster.json. A restart
story, so it runs in `make test-reliability`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from scrapy_cluster.sitegen.site import SiteConfig, SiteServer
from tests.support.addresses import UP
from tests.support.services import free_port
from tests.support.up_process import (
    Up,
    cluster_env,
    run_cli,
    wait_until,
)

# --- 4. clients follow the cluster ----------------------------------------------------------

class Dump:
    """`scrapy-cluster dump` of the crawled firehose, found through SC_DATA_DIR."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scrapy_cluster", "dump", "-t", "demo.crawled_firehose"],
            cwd=data_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        self.readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                        for stream, lines in ((self.process.stdout, self.lines),
                                              (self.process.stderr, self.errors))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        lines.extend(line.rstrip("\n") for line in stream)

    def crawlids(self) -> set[str]:
        return {json.loads(line).get("crawlid", "") for line in list(self.lines)
                if line.startswith("{")}

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for reader, stream in zip(self.readers, (self.process.stdout, self.process.stderr),
                                  strict=True):
            reader.join(5)
            if stream is not None and not reader.is_alive():  # never under a blocked reader
                stream.close()


@pytest.fixture
def site() -> Iterator[SiteServer]:
    config = SiteConfig(hosts=(UP.host(33),), pages_per_host=3, links_per_page=1)
    with SiteServer(config, free_port()) as server:
        yield server


@pytest.mark.parametrize("old_port", ["free", "taken"])
def test_dump_prints_pages_crawled_after_up_restarted(
        tmp_path: Path, start_up: Callable[..., Up], site: SiteServer, old_port: str) -> None:
    """The port is free: `up` takes it again (the TIME_WAIT connections of the old server do
    not count) and `dump` reconnects. It is taken: `up` chooses another and `dump` finds it in
    cluster.json."""
    data_dir = tmp_path / "data"
    env = cluster_env(data_dir)
    first = start_up(env)
    first.wait_ready()
    port = first.redis_port()
    dump = Dump(data_dir, env)
    squatter = socket.socket()
    try:
        wait_until(lambda: any(e.startswith("dumping ") for e in dump.errors), 30, "dump reads")
        first.process.send_signal(signal.SIGINT)
        assert first.process.wait(40) == 0, first.output()
        if old_port == "taken":
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        second = start_up(env)
        second.wait_ready()
        assert (second.redis_port() == port) == (old_port == "free")
        if old_port == "taken":
            wait_until(lambda: any("the cluster moved to" in e for e in dump.errors), 30,
                       "dump follows the cluster", lambda: "\n".join(dump.errors))
        crawlid = uuid.uuid4().hex[:10]
        request = {"url": site.site.url(UP.host(33), "/p/0.html"), "appid": "follow",
                   "crawlid": crawlid, "maxdepth": 0}
        fed = run_cli(data_dir, env, "feed", json.dumps(request))
        assert fed.returncode == 0, fed.stdout + fed.stderr
        wait_until(lambda: crawlid in dump.crawlids(), 60, "dump prints the new page",
                   lambda: "dump stderr:\n" + "\n".join(dump.errors[-20:]))
    finally:
        squatter.close()
        dump.close()
