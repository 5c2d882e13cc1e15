"""Shared by the crawl benchmark: the generated site (nginx, or Python as a fallback; over HTTPS
with a self-signed certificate made at run time), process CPU time, the measured window, and
counting the commands Redis receives from clients vs the commands run inside Lua scripts
(MONITOR).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis

from scrapy_cluster.sitegen.relative_site import SEED_PATH, RelativeSite, RelativeSiteConfig
from scrapy_cluster.sitegen.site import GeneratedSite, SiteConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.support

from tests.support.nginx import NginxSite, find_nginx, nginx_version  # noqa: E402

PY = sys.executable
MONITOR_END = "crawl-bench-monitor-end"
LOOPBACK = ("http://127.", "https://127.")


@dataclass
class Site:
    """A running generated site: ``hits()`` counts requests answered; ``stop()``."""

    port: int
    description: str
    hits: Callable[[], int]
    stop: Callable[[], None]
    pids: Callable[[], list[int]]
    scheme: str = "http"
    cert_file: Path | None = None
    shape: str = "absolute"
    """``absolute``: ``sitegen.site``'s graph, absolute links, a finite page space;
    ``relative``: ``sitegen.relative_site``, relative links, no end of new pages."""
    """With ``scheme`` https: the site's self-signed certificate (PEM), for clients that can
    only be told to trust it rather than not to verify."""

    def url(self, host: str, path: str) -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def seed(self, host: str) -> str:
        """The URL a crawl of this site starts from."""
        return self.url(host, SEED_PATH if self.shape == "relative" else "/p/0.html")


class HttpsGeneratedSite(GeneratedSite):
    """The same generated site (same graph, same page sizes) with ``https://`` links."""

    def url(self, host: str, path: str) -> str:
        return f"https://{host}:{self.port}{path}"


class TlsNginxSite(NginxSite):
    """``NginxSite`` with TLS on the site's port (HTTP/1.1, keep-alive as the plain site's: up
    to 1,000,000 requests a connection), the status page staying plain HTTP."""

    def __init__(self, *args: Any, cert: Path, key: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cert, self.key = cert, key

    def config_text(self) -> str:
        text = super().config_text()
        for host in self.site.config.hosts:
            text = text.replace(f"listen {host}:{self.site.port};",
                                f"listen {host}:{self.site.port} ssl;")
        tls = (f"  ssl_certificate {self.cert};\n  ssl_certificate_key {self.key};\n"
               "  ssl_protocols TLSv1.2 TLSv1.3;\n  ssl_session_cache shared:TLS:10m;\n"
               "  keepalive_timeout 75s;\n")
        return text.replace("  sendfile on;\n", "  sendfile on;\n" + tls, 1)


def make_certificate(directory: Path, hosts: tuple[str, ...]) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for ``hosts`` (IP subjectAltNames), valid one
    day, written to ``directory`` as cert.pem and key.pem: ``openssl`` when installed, else
    the ``cryptography`` package."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    openssl = shutil.which("openssl")
    if openssl is not None:
        san = ",".join(f"IP:{host}" for host in hosts)
        subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=crawl-bench", "-addext", f"subjectAltName={san}", "-keyout",
                        str(key), "-out", str(cert)], check=True, capture_output=True)
        return cert, key
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawl-bench")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(private.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(host)) for host in hosts]), critical=False)
        .sign(private, hashes.SHA256()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert, key


def start_site(workdir: Path, port: int, status_port: int, *, pages: int, links: int,
               page_bytes: int, hosts: tuple[str, ...], python_only: bool,
               tls: bool = False, shape: str = "absolute") -> Site:
    """nginx serving the site's static pages, or the Python server when nginx is absent. With
    ``tls``: nginx over HTTPS with a self-signed certificate made in ``workdir`` (nginx
    needed). ``shape``: see ``Site.shape`` (``pages`` and ``links`` apply to ``absolute``)."""
    scheme = "https" if tls else "http"
    static: GeneratedSite | RelativeSite
    if shape == "relative":
        static = RelativeSite(RelativeSiteConfig(hosts=hosts, page_bytes=page_bytes), port,
                              scheme=scheme)
    else:
        config = SiteConfig(hosts=hosts, pages_per_host=pages, links_per_page=links,
                            page_bytes=page_bytes)
        static = HttpsGeneratedSite(config, port) if tls else GeneratedSite(config, port)
    binary = None if python_only else find_nginx()
    where = workdir / f"nginx-{scheme}-{shape}"
    if tls:
        if binary is None:
            raise SystemExit("the HTTPS site needs nginx (apt-get install nginx-light)")
        cert, key = make_certificate(workdir / "tls", hosts)
        tls_site = TlsNginxSite(static, where, binary=binary, status_port=status_port, cert=cert,
                                key=key).start()
        return Site(port, f"{nginx_version(binary)}, 1 worker process, HTTPS (TLS 1.2/1.3, "
                    "self-signed ECDSA P-256)", tls_site.hits, tls_site.stop, tls_site.pids,
                    scheme="https", cert_file=cert, shape=shape)
    if binary is not None:
        nginx = NginxSite(static, where, binary=binary, status_port=status_port).start()
        return Site(port, f"{nginx_version(binary)}, 1 worker process", nginx.hits, nginx.stop,
                    nginx.pids, shape=shape)
    sizes = ["--pages", str(pages), "--links", str(links)] if shape != "relative" else []
    module = "relative_site" if shape == "relative" else "site"
    process = subprocess.Popen(
        [PY, "-m", f"scrapy_cluster.sitegen.{module}", "--port", str(port), *sizes,
         "--page-bytes", str(page_bytes), "--hosts", ",".join(hosts)],
        start_new_session=True)
    time.sleep(1.5)

    def hits() -> int:
        with urllib.request.urlopen(f"http://{hosts[0]}:{port}/__hits", timeout=5) as answer:
            return int(answer.read())

    return Site(port, "Python ThreadingHTTPServer (nginx not used)", hits,
                lambda: stop_processes([process]), lambda: [process.pid], shape=shape)


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` (from /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for_hits(site: Site, target: int, pids: list[int], deadline: float) -> None:
    while site.hits() < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {site.hits()} of {target} pages within the time limit")
        if any(not Path(f"/proc/{pid}").exists() for pid in pids):
            raise RuntimeError("a crawler process exited")
        time.sleep(0.05)


def script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval"))


def measure(site: Site, client: redis.Redis, pids: list[int], *, redis_pid: int, warmup: int,
            pages: int, timeout_s: float = 180,
            extra_groups: dict[str, list[int]] | None = None,
            started: tuple[float, int] | None = None) -> dict[str, Any]:
    """pages/s, CPU ms/page (crawler, Redis, site server; machine busy %), each crawler
    process's cores used (CPU s / s), server-side Redis commands/page and script calls/page
    over ``pages`` pages served after ``warmup`` more; and ``pages_s_from_start``: every page
    served from the start of the crawl to the end of the window, ramp-up included.
    ``started``: ``(time.monotonic(), site.hits())`` when the crawl was handed to the crawler
    (the seed enqueued); None: the crawl starts with the first request the site sees (a
    process that crawls from its own start URL, its start-up not counted).
    ``extra_groups``: more processes whose CPU ms/page to report under the given keys (the
    Kafka broker)."""
    deadline = time.monotonic() + timeout_s
    if started is None:
        before = site.hits()
        while site.hits() == before:
            if time.monotonic() > deadline:
                raise RuntimeError("the site saw no request within the time limit")
            time.sleep(0.005)
        started = (time.monotonic(), before)
    wait_for_hits(site, site.hits() + warmup, pids, deadline)
    groups = {"cpu_ms_page": pids, "redis_cpu_ms_page": [redis_pid], "site_cpu_ms_page": site.pids(),
              **(extra_groups or {})}
    start_hits, start_t = site.hits(), time.monotonic()
    start_cmds = int(client.info("stats")["total_commands_processed"])
    start_scripts = script_calls(client)
    start_usec = command_usec(client)
    start_cpu = {name: cpu_s(group) for name, group in groups.items()}
    start_busy = machine_busy_s()
    start_each = [cpu_s([pid]) for pid in pids]
    wait_for_hits(site, start_hits + pages, pids, deadline)
    done, elapsed = site.hits() - start_hits, time.monotonic() - start_t
    # minus this function's own INFO calls inside the window (3 + 1)
    commands = int(client.info("stats")["total_commands_processed"]) - start_cmds - 4
    result: dict[str, Any] = {name: (cpu_s(group) - start_cpu[name]) * 1000 / done
                              for name, group in groups.items()}
    result["process_cores"] = [(cpu_s([pid]) - before) / elapsed
                               for pid, before in zip(pids, start_each, strict=True)]
    usec = command_usec(client)
    top = sorted(((name, value - start_usec.get(name, 0)) for name, value in usec.items()),
                 key=lambda pair: -pair[1])[:5]
    result["redis_usec_top"] = ", ".join(f"{name} {value / done:.0f}" for name, value in top
                                         if value > 0)
    end_hits, end_t = site.hits(), time.monotonic()
    result["pages_s_from_start"] = (end_hits - started[1]) / (end_t - started[0])
    result.update(pages_s=done / elapsed, server_cmds_page=commands / done,
                  scripts_page=(script_calls(client) - start_scripts) / done,
                  machine_busy_pct=(machine_busy_s() - start_busy) * 100 / elapsed
                  / (os.cpu_count() or 1))
    return result


def command_usec(client: redis.Redis) -> dict[str, int]:
    """INFO commandstats ``usec`` per command (a script's includes the commands it runs, which
    are counted under their own names too)."""
    return {name.removeprefix("cmdstat_").upper(): int(value.get("usec", 0))
            for name, value in client.info("commandstats").items()}


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CommandCounter:
    """MONITOR in a thread: commands sent by clients vs commands run inside Lua scripts."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.from_clients = 0
        self.inside_scripts = 0
        self.by_command: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def __enter__(self) -> CommandCounter:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.echo(MONITOR_END)
        self._thread.join(10)

    def _run(self) -> None:
        with self.client.monitor() as monitor:
            self._ready.set()
            for entry in monitor.listen():
                command = str(entry.get("command", ""))
                if MONITOR_END in command:
                    return
                if entry.get("client_type") == "lua":
                    self.inside_scripts += 1
                else:
                    self.from_clients += 1
                    name = command.split(" ", 1)[0].upper()
                    self.by_command[name] = self.by_command.get(name, 0) + 1


def count_commands(site: Site, client: redis.Redis, pids: list[int],
                   pages: int) -> dict[str, Any]:
    """Commands per page from clients and inside scripts, over ``pages`` more pages (MONITOR
    slows Redis, so this runs after the timed window)."""
    with CommandCounter(client) as counter:
        start = site.hits()
        wait_for_hits(site, start + pages, pids, time.monotonic() + 120)
        done = site.hits() - start
    top = sorted(counter.by_command.items(), key=lambda pair: -pair[1])[:6]
    return {"client_cmds_page": counter.from_clients / done,
            "lua_cmds_page": counter.inside_scripts / done,
            "client_top": ", ".join(f"{name} {count / done:.2f}" for name, count in top)}


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


COMPONENT_STOP_TIMEOUT_S = 30.0


class Component:
    """``python -m scrapy_cluster <command>`` in ``workdir`` (no localsettings.py there),
    logging to a file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, workdir: Path, env: dict[str, str], *command: str,
                 profile: Path | None = None) -> None:
        self.name = "-".join(command)
        self.log_path = workdir / f"{self.name}-{uuid.uuid4().hex[:6]}.log"
        full_env = {k: v for k, v in os.environ.items() if k != "SC_SETTINGS"}
        full_env.update(env)
        profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, *profiler, "-m", "scrapy_cluster", *command], cwd=workdir,
                env=full_env, stdout=log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.process.pid)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{self.name} exited with code {self.process.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(COMPONENT_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(COMPONENT_STOP_TIMEOUT_S)


async def _bare_loop(seed: str, *, concurrency: int, max_pages: int, max_seconds: float) -> int:
    """Fetch and extract only: aiohttp (one session, ``concurrency`` keep-alive sockets), lxml
    links as ``links.links_in_tree`` reads them, an in-memory set for dedupe, FIFO order. No
    Redis, no bus, no robots.txt, no items. Stops after ``max_pages`` fetches or
    ``max_seconds``, whichever comes first; returns the pages fetched. An ``https://`` seed is
    fetched without certificate verification (``ssl=False``: the benchmark's self-signed
    site)."""
    import asyncio

    import aiohttp
    from lxml import etree

    from scrapy_cluster.crawler.common.link_rules import links_in_tree

    parser = etree.HTMLParser(encoding="utf-8")
    queue: asyncio.Queue[str] = asyncio.Queue()
    seen = {seed}
    queue.put_nowait(seed)
    fetched = 0
    deadline = asyncio.get_running_loop().time() + max_seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal fetched
        loop = asyncio.get_running_loop()
        while fetched < max_pages and loop.time() < deadline:
            try:
                url = await asyncio.wait_for(queue.get(), timeout=1.0)
            except TimeoutError:
                continue
            fetched += 1
            try:
                async with session.get(url, allow_redirects=False) as response:
                    body = await response.read()
                    charset = response.charset or "utf-8"
            except (aiohttp.ClientError, OSError, TimeoutError):
                continue
            if not body:
                continue
            root = etree.fromstring(body, parser if charset == "utf-8"
                                    else etree.HTMLParser(encoding=charset))
            if root is None:
                continue
            for link in links_in_tree(root, base_url=url, page_url=url, encoding=charset,
                                      max_links=0).links:
                if link.url not in seen and link.url.startswith(LOOPBACK):  # loopback only
                    seen.add(link.url)
                    queue.put_nowait(link.url)

    connector = aiohttp.TCPConnector(limit=concurrency,
                                     ssl=False if seed.startswith("https:") else True)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return fetched


def bare_loop_main(argv: list[str]) -> None:
    """``python crawl_support.py bare-loop SEED CONCURRENCY MAX_PAGES MAX_SECONDS``."""
    import asyncio

    seed, concurrency, max_pages, max_seconds = argv
    if not seed.startswith((*LOOPBACK, "http://[::1]", "https://[::1]")):
        raise SystemExit(f"bare loop: loopback seeds only, not {seed!r}")
    fetched = asyncio.run(_bare_loop(seed, concurrency=int(concurrency),
                                     max_pages=int(max_pages), max_seconds=float(max_seconds)))
    print(f"bare loop: {fetched} pages fetched", file=sys.stderr)


def profiled_main(argv: list[str]) -> None:
    """``python crawl_support.py profiled OUT <scrapy-cluster arguments>``: the command in this
    process, cProfile on the main thread between SIGUSR1 and SIGUSR2 (which writes OUT)."""
    import cProfile

    from scrapy_cluster.cli import main

    out, *command = argv
    profiler = cProfile.Profile()

    def start(*_: Any) -> None:
        profiler.enable()

    def stop(*_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    main(args=command, prog_name="scrapy-cluster")


if __name__ == "__main__" and sys.argv[1:2] == ["bare-loop"]:
    bare_loop_main(sys.argv[2:])
elif __name__ == "__main__" and sys.argv[1:2] == ["profiled"]:
    profiled_main(sys.argv[2:])
