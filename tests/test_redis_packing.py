"""The asyncio client's hiredis packing writes redis-py's bytes, and works on a real server.

``HiredisPacking.pack_command`` must put on the wire exactly what redis-py's own asyncio
packer puts there, for every argument type (or raise what redis-py raises): compared on a
list of awkward commands and on generated ones. Then the client ``RedisConfig.async_client``
builds is checked over TCP, TLS and a unix socket against a real redis-server.
"""

from __future__ import annotations

import asyncio
import enum
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_cluster.redis_conn import (
    HiredisConnection,
    HiredisSSLConnection,
    HiredisUnixDomainSocketConnection,
    RedisConfig,
)
from tests.support.certificates import write_test_certificates
from tests.support.services import RedisServer, free_port

BUFFER_CUTOFF = 6000
"""redis-py's asyncio chunking threshold (``AbstractConnection._buffer_cutoff``)."""


class Level(enum.IntEnum):
    LOW = 1


def _wire(connection: Any, *args: Any) -> Any:
    """The bytes ``pack_command`` puts on the wire, or the error it raises."""
    try:
        return b"".join(bytes(chunk) for chunk in connection.pack_command(*args))
    except Exception as exc:  # the error is part of the behaviour
        return type(exc)


REFERENCE = redis.asyncio.Connection()
FAST = HiredisConnection()

COMMANDS: list[tuple[Any, ...]] = [
    ("SET", "key", "value"),
    ("SET", "clé", "café ☃ \U0001f600"),
    ("SET", "", ""),
    ("SET", "k", b""),
    ("SET", "k", b"\x00\xff\r\n"),
    ("SET", "k", b"x" * (BUFFER_CUTOFF + 1)),
    ("SET", "k", "é" * BUFFER_CUTOFF),
    ("MSET", *(["k", "v" * 100] * 200)),
    ("INCRBY", "k", 0), ("INCRBY", "k", -5), ("INCRBY", "k", 2**70), ("INCRBY", "k", -(2**63)),
    ("SET", "k", 0.1), ("SET", "k", -0.0), ("SET", "k", 1e300), ("SET", "k", float("inf")),
    ("SET", "k", float("nan")), ("SET", "k", 1e-7), ("SET", "k", 123456789.123),
    ("SET", "k", True), ("SET", "k", None), ("SET", "k", [1]),
    ("SET", "k", Level.LOW), ("SET", "k", bytearray(b"ba")), ("SET", "k", memoryview(b"mv")),
    ("SET", "k", memoryview(b"m" * (BUFFER_CUTOFF + 10))),
    ("SET", "k", "\ud800"),
    ("CLIENT SETNAME", "name"), ("CLIENT\tSETNAME", "x"), (" GET", "k"), ("GET ", "k"),
    ("ÉCHO", "x"), ("", "k"), (b"GET", "k"), (b"CLIENT SETNAME", "x"),
    ("EVALSHA", "0" * 40, 3, "a", "b", "c", "tmpl", "", "1", 600000, 3600000, "1",
     *(["link", "127.0.0.2", -90, "0123456789abcdef0123456789abcdef", "bench", b"a3f",
        b"\x01\x02\x03\x04\x05\x06\x07", 9, b'{"u":"http://127.0.0.2:8080/t/caf%C3%A9/"}'] * 24)),
]


@pytest.mark.parametrize("args", COMMANDS, ids=range(len(COMMANDS)))
def test_hiredis_packing_writes_what_redis_py_writes(args: tuple[Any, ...]) -> None:
    assert _wire(FAST, *args) == _wire(REFERENCE, *args)


def test_the_fast_path_is_taken_for_the_frontier_s_argument_types() -> None:
    """One buffer where redis-py's packer chunks a long command: hiredis packed it (so the
    comparisons above do compare two packers)."""
    args = ("EVALSHA", "0" * 40, 0, *(["link", -90, "é" * 30, b"\x00" * 7] * 100))
    assert len(FAST.pack_command(*args)) == 1
    assert len(REFERENCE.pack_command(*args)) > 1


def test_pack_commands_of_a_pipeline_writes_what_redis_py_writes() -> None:
    commands = [args for args in COMMANDS if _wire(REFERENCE, *args) is not type]
    commands = [args for args in commands if isinstance(_wire(REFERENCE, *args), bytes)]
    fast = b"".join(bytes(chunk) for chunk in FAST.pack_commands(commands))
    reference = b"".join(bytes(chunk) for chunk in REFERENCE.pack_commands(commands))
    assert fast == reference


def test_a_non_utf8_encoding_falls_back_to_redis_py() -> None:
    latin = HiredisConnection(encoding="latin-1")
    reference = redis.asyncio.Connection(encoding="latin-1")
    assert _wire(latin, "SET", "k", "é") == _wire(reference, "SET", "k", "é") == \
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n\xe9\r\n"


ARGUMENTS = st.one_of(
    st.text(), st.binary(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.binary(min_size=BUFFER_CUTOFF - 2, max_size=BUFFER_CUTOFF + 2),
    st.binary().map(memoryview), st.binary().map(bytearray))


@settings(max_examples=1500, deadline=None)
@given(name=st.sampled_from(["SET", "EVALSHA", "CLIENT SETNAME", " X", "é"]),
       args=st.lists(ARGUMENTS, max_size=40))
def test_hiredis_packing_equals_redis_py_on_generated_commands(name: str, args: list[Any]) -> None:
    assert _wire(FAST, name, *args) == _wire(REFERENCE, name, *args)


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://localhost:6379/3", HiredisConnection),
    ("rediss://localhost:6380/0?ssl_cert_reqs=none", HiredisSSLConnection),
    ("unix:///tmp/redis.sock?db=2", HiredisUnixDomainSocketConnection),
])
def test_async_client_uses_the_hiredis_twin_of_the_url_s_connection_class(
        url: str, expected: type[Any]) -> None:
    client = RedisConfig(url, socket_timeout_s=3.0).async_client(health_check_interval=7)
    pool = client.connection_pool
    assert pool.connection_class is expected
    kwargs = pool.connection_kwargs
    assert kwargs["socket_timeout"] == 3.0 and kwargs["health_check_interval"] == 7
    assert kwargs.get("db", 0) == redis.asyncio.ConnectionPool.from_url(url).connection_kwargs.get(
        "db", 0)
    asyncio.run(client.aclose())


class TcpTlsUnixRedis(RedisServer):
    """One redis-server listening on TCP, TLS (no client certificate) and a unix socket."""

    def __init__(self, workdir: Path, certificates: dict[str, Path]) -> None:
        super().__init__(workdir)
        self.tls_port = free_port()
        self.socket = workdir / "redis.sock"
        self.argv += ["--tls-port", str(self.tls_port),
                      "--tls-cert-file", str(certificates["server_cert"]),
                      "--tls-key-file", str(certificates["server_key"]),
                      "--tls-ca-cert-file", str(certificates["ca"]), "--tls-auth-clients", "no",
                      "--unixsocket", str(self.socket), "--unixsocketperm", "700"]


def _tls_supported() -> bool:
    try:
        output = subprocess.run(["redis-server", "--tls-port", "1", "--port", "0"],
                                capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "tls-cert-file" in output or "tls-key-file" in output


@pytest.fixture(scope="module")
def tls_unix_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TcpTlsUnixRedis,
                                                                               dict[str, Path]]]:
    if not _tls_supported():
        pytest.skip("redis-server built without TLS")
    workdir = tmp_path_factory.mktemp("redis-tls-unix")
    certificates = write_test_certificates(workdir / "certs")
    server = TcpTlsUnixRedis(workdir / "server", certificates)
    server.start()
    try:
        yield server, certificates
    finally:
        server.stop()


async def _round_trip(client: redis.asyncio.Redis) -> None:
    """SET/GET of awkward values and an EVALSHA of a few hundred arguments."""
    try:
        await client.set("packing:k", "café ☃")
        assert await client.get("packing:k") == "café ☃".encode()
        await client.set("packing:big", b"x" * (BUFFER_CUTOFF * 3))
        assert await client.strlen("packing:big") == BUFFER_CUTOFF * 3
        script = client.register_script("return {#ARGV, ARGV[2], ARGV[#ARGV]}")
        args: list[Any] = ["é", -90, 2**40, 0.5, b"\x00\xff"] * 60 + ["end"]
        assert await script(keys=["packing:k"], args=args) == [301, b"-90", b"end"]
        async with client.pipeline(transaction=False) as pipe:
            pipe.incrby("packing:n", 5).incrby("packing:n", -2).get("packing:n")
            assert (await pipe.execute())[-1] == b"3"
        connection = await client.connection_pool.get_connection()
        try:
            assert type(connection).__name__.startswith("Hiredis")
        finally:
            await client.connection_pool.release(connection)
        await client.delete("packing:k", "packing:big", "packing:n")
    finally:
        await client.aclose()


@pytest.mark.integration
def test_async_client_round_trips_over_tcp(redis_url: str) -> None:
    asyncio.run(_round_trip(RedisConfig(redis_url).async_client()))


@pytest.mark.integration
def test_async_client_round_trips_over_tls_and_a_unix_socket(
        tls_unix_redis: tuple[TcpTlsUnixRedis, dict[str, Path]]) -> None:
    server, certificates = tls_unix_redis
    for url in (f"rediss://127.0.0.1:{server.tls_port}/1?ssl_ca_certs={certificates['ca']}",
                f"unix://{server.socket}?db=2"):
        asyncio.run(_round_trip(RedisConfig(url).async_client()))
