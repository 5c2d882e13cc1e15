"""The Rest service's ASGI application and its runner (``scrapy-cluster rest``).

Endpoints (docs/rest.md): ``GET|POST /`` health, ``POST /feed``, ``POST /poll``,
``GET /metrics``, the dashboard under ``/ui``, ``/openapi.json`` and ``/docs`` (Swagger UI,
served from the package: ``api_docs``). Every JSON answer except ``/`` is the wrapper
``{status, data, error}``.

Cost of ``POST /feed``: no Redis round trip per request (a crawl request's ``warnings`` come
from the crawler heartbeats, read at most once per COVERAGE_MAX_AGE_S per process:
``feed_warnings``); one share of a group-committed bus flush (``sender.FeedSender``); a
request with a ``uuid`` then waits on a future the answer reader resolves. ``POST /poll``:
one GET.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson
import redis
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from scrapy_cluster import __version__, keys
from scrapy_cluster.errors import BusError, MessageTooLargeError, SettingsError
from scrapy_cluster.rest.api_docs import create_docs_router
from scrapy_cluster.rest.dashboard import create_router
from scrapy_cluster.rest.feed_warnings import feed_warnings
from scrapy_cluster.rest.gate import Gate
from scrapy_cluster.rest.head_limit import HeadLimits, RefusalLog, limited_protocol
from scrapy_cluster.rest.responses import (
    FAILURE,
    JSON_TYPE,
    MSG_INVALID_JSON,
    MSG_METHOD,
    MSG_NO_ENDPOINT,
    MSG_NO_KAFKA,
    MSG_NO_POLL,
    MSG_NO_REDIS,
    MSG_SCHEMA,
    MSG_TOO_LARGE,
    MSG_UNEXPECTED,
    SUCCESS,
    wrapped,
)
from scrapy_cluster.rest.responses import MSG_KEY as MSG_KEY
from scrapy_cluster.rest.responses import MSG_LOCKED_OUT as MSG_LOCKED_OUT
from scrapy_cluster.rest.security import parsed_proxies, warn_if_open
from scrapy_cluster.rest.service import Metrics, RequestCheck, RestService

POLL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"poll_id": {"type": "string", "minLength": 1, "maxLength": 100,
                               "description": "The poll id to retrieve"}},
    "required": ["poll_id"],
    "additionalProperties": False,
}
WRAPPER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": [SUCCESS, FAILURE]},
        "data": {},
        "error": {"anyOf": [{"type": "null"}, {
            "type": "object", "properties": {"message": {"type": "string"},
                                             "cause": {"type": "string"}},
            "required": ["message"]}]},
        "warnings": {"type": "array", "items": {"type": "string"},
                     "description": "Only when there is something to warn about, e.g. a crawl "
                                    "for a spider no live crawler runs (it is still queued)"},
    },
    "required": ["status", "data", "error"],
}
INDEX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kafka_connected": {"type": "boolean"}, "redis_connected": {"type": "boolean"},
                   "my_id": {"type": "string"},
                   "node_health": {"type": "string", "enum": ["GREEN", "YELLOW", "RED"]},
                   "uptime_sec": {"type": "integer"}},
    "required": ["kafka_connected", "redis_connected", "my_id", "node_health", "uptime_sec"],
}


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes even without a Content-Length."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _is_json(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    return media == JSON_TYPE or (media.startswith("application/") and media.endswith("+json"))


def _feed_openapi(service: RestService) -> dict[str, Any]:
    schemas = [definition for _, definition in service.schemas]
    return {"requestBody": {"required": True, "content": {JSON_TYPE: {"schema": {
        "oneOf": schemas} if len(schemas) > 1 else schemas[0]}}}}


_WRAPPER_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {JSON_TYPE: {"schema": WRAPPER_SCHEMA}}}
    for code, text in ((200, "SUCCESS, with the answer or a poll id in data"),
                       (400, "Invalid JSON or schema failure (error.cause says why)"),
                       (401, "API key missing or wrong (when REST_API_KEYS is set)"),
                       (404, "Not found"), (413, "Payload too large"),
                       (503, "Redis or the bus is unreachable"))}


def create_app(service: RestService) -> FastAPI:
    """The application; the caller starts and closes ``service``."""
    app = FastAPI(title="scrapy-cluster Rest service", version=__version__,
                  description="Submit crawls and API requests over HTTP; see docs/rest.md.",
                  docs_url=None, redoc_url=None)  # /docs is api_docs (offline); no ReDoc
    app.state.service = service

    index_responses: dict[int | str, dict[str, Any]] = {200: {
        "description": "Health of this Rest instance",
        "content": {JSON_TYPE: {"schema": INDEX_SCHEMA}}}}

    @app.get("/", operation_id="index", responses=index_responses)
    @app.post("/", operation_id="index_post", responses=index_responses)
    async def index() -> Response:
        health = service.health
        body = {"kafka_connected": health.kafka_connected,
                "my_id": service.my_id,
                "node_health": health.node_health,
                "redis_connected": health.redis_connected,
                "uptime_sec": int(time.time() - service.started_at)}
        return Response(orjson.dumps(body), media_type=JSON_TYPE)

    @app.post("/feed", openapi_extra=_feed_openapi(service), responses=_WRAPPER_RESPONSES)
    async def feed(request: Request) -> Response:
        parsed = await _parse_json(request, service.max_body_bytes)
        if isinstance(parsed, Response):
            _observe_feed(service, "unknown", "invalid")
            return parsed
        result = service.check(parsed)
        reason = getattr(result, "reason", None)
        if reason is not None:
            _observe_feed(service, getattr(result, "closest", None) or "unknown", "invalid")
            return wrapped(code=400, message=MSG_SCHEMA, cause=str(reason))
        plugin = str(result.plugin)
        warnings = await feed_warnings(service.spider_coverage, result.message)
        if not service.health.kafka_connected:
            _observe_feed(service, plugin, "unavailable")
            return wrapped(code=503, message=MSG_NO_KAFKA)
        uuid = parsed.get("uuid") if isinstance(parsed.get("uuid"), str) else None
        waiter = service.router.register(uuid) if uuid is not None else None
        sent_at = time.monotonic()
        try:
            await service.sender.send(service.incoming_topic, parsed)
        except MessageTooLargeError as exc:
            _forget(service, uuid, waiter)
            _observe_feed(service, plugin, "invalid")
            return wrapped(code=413, message=MSG_TOO_LARGE, cause=str(exc))
        except TypeError:  # orjson reads 1,024 levels of nesting but writes only 254
            _forget(service, uuid, waiter)
            _observe_feed(service, plugin, "invalid")
            return wrapped(code=400, message=MSG_SCHEMA,
                           cause="request is nested too deeply to be sent on the bus")
        except BusError as exc:
            _forget(service, uuid, waiter)
            _observe_feed(service, plugin, "unavailable")
            service.logger.warning("feed refused, bus unreachable: %s", exc)
            return wrapped(code=503, message=MSG_NO_KAFKA)
        if uuid is None or waiter is None:
            _observe_feed(service, plugin, "accepted")
            return wrapped(None, warnings=warnings)
        try:
            answer = await asyncio.wait_for(asyncio.shield(waiter), service.wait_s)
        except TimeoutError:
            if service.router.forget(uuid, waiter):
                _observe_feed(service, plugin, "poll_id")
                return wrapped({"poll_id": uuid}, warnings=warnings)
            answer = await waiter  # the reader took it in the same instant: it is on its way
        if service.metrics is not None:
            service.metrics.observe_answer(time.monotonic() - sent_at)
        _observe_feed(service, plugin, "answered")
        return wrapped(answer, warnings=warnings)

    @app.post("/poll", openapi_extra={"requestBody": {"required": True, "content": {
        JSON_TYPE: {"schema": POLL_SCHEMA}}}}, responses=_WRAPPER_RESPONSES)
    async def poll(request: Request) -> Response:
        parsed = await _parse_json(request, service.max_body_bytes)
        if isinstance(parsed, Response):
            return parsed
        cause = _poll_problem(parsed)
        if cause is not None:
            return wrapped(code=400, message=MSG_SCHEMA, cause=cause)
        try:
            raw = await run_in_threadpool(service.redis.get, keys.rest_poll(parsed["poll_id"]))
        except redis.RedisError as exc:
            service.logger.warning("poll failed, Redis unreachable: %s", exc)
            return wrapped(code=503, message=MSG_NO_REDIS)
        if raw is None:
            return wrapped(code=404, message=MSG_NO_POLL)
        return wrapped(orjson.loads(raw))

    @app.get("/metrics", responses={200: {"description": "Prometheus text exposition",
                                          "content": {"text/plain": {}}}})
    async def metrics() -> Response:
        if service.metrics is None:
            return wrapped(code=404, message=MSG_NO_ENDPOINT)
        body, content_type = await run_in_threadpool(service.metrics.render)
        return Response(body, media_type=content_type)

    app.include_router(create_router(service), prefix="/ui")
    app.include_router(create_docs_router(title=app.title, openapi_url=str(app.openapi_url)),
                       prefix="/docs")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return wrapped(code=404, message=MSG_NO_ENDPOINT)
        if exc.status_code == 405:
            return wrapped(code=405, message=MSG_METHOD)
        return wrapped(code=exc.status_code, message=str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        service.logger.error("unexpected error on %s: %r", request.url.path, exc, exc_info=exc)
        return wrapped(code=500, message=MSG_UNEXPECTED)

    return app


def _observe_feed(service: RestService, plugin: str, outcome: str) -> None:
    if service.metrics is not None:
        service.metrics.observe_feed(plugin, outcome)


def _forget(service: RestService, uuid: str | None, waiter: asyncio.Future[Any] | None) -> None:
    if uuid is not None and waiter is not None:
        service.router.forget(uuid, waiter)


async def _parse_json(request: Request, limit: int) -> dict[str, Any] | Response:
    """The JSON object of the body, or the error answer to return."""
    if not _is_json(request):
        return wrapped(code=400, message=MSG_INVALID_JSON,
                       cause="Content-Type must be application/json")
    try:
        body = await read_body(request, limit)
    except BodyTooLarge:
        return wrapped(code=413, message=MSG_TOO_LARGE)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return wrapped(code=400, message=MSG_INVALID_JSON, cause=str(exc))
    if not isinstance(parsed, dict):
        return wrapped(code=400, message=MSG_SCHEMA,
                       cause=f"request must be a JSON object, not {type(parsed).__name__}")
    return parsed


def _poll_problem(message: dict[str, Any]) -> str | None:
    extra = sorted(set(message) - {"poll_id"})
    if extra:
        return f"Additional properties are not allowed ({', '.join(map(repr, extra))} " \
               f"{'was' if len(extra) == 1 else 'were'} unexpected)"
    poll_id = message.get("poll_id")
    if poll_id is None:
        return "'poll_id' is a required property"
    if not isinstance(poll_id, str):
        return "poll_id must be a string"
    if not 1 <= len(poll_id) <= 100:
        return "poll_id must be 1 to 100 characters long"
    return None


# --- running -------------------------------------------------------------------------------

class RestRunner:
    """Serves ``app`` with uvicorn until ``should_stop()`` or SIGINT/SIGTERM."""

    def __init__(self, service: RestService, app: FastAPI, *, host: str, port: int) -> None:
        import uvicorn

        self.service = service
        self.app = app
        self.host, self.port = host, port
        settings = service.settings
        proxies = parsed_proxies(settings)
        self.server = uvicorn.Server(uvicorn.Config(
            Gate(app, service), host=host, port=port, log_config=None, access_log=False,
            lifespan="off", server_header=False, timeout_graceful_shutdown=5,
            http=_http_protocol(settings, service.logger),
            h11_max_incomplete_event_size=int(settings["REST_MAX_HEADER_BYTES"]),
            proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None))

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def run(self, should_stop: Callable[[], bool]) -> None:
        warn_if_open(self.host, self.service.access.keys, self.service.logger)
        self.service.logger.info("Rest service listening on %s", self.url,
                                 extra={"url": self.url, "my_id": self.service.my_id})
        # Keep the start-up heap (modules, schemas, clients) out of the collector's full scans:
        # measured, it takes the p99 of /feed under load from ~80 ms to ~20 ms.
        gc.collect()
        gc.freeze()
        watcher = threading.Thread(target=self._watch, args=(should_stop,), daemon=True)
        watcher.start()
        self.server.run()

    def _watch(self, should_stop: Callable[[], bool]) -> None:
        while not self.server.should_exit:
            if should_stop():
                self.server.should_exit = True
                return
            time.sleep(0.2)

    def start_in_thread(self, timeout_s: float = 20.0) -> threading.Thread:
        """Serve from a background thread (tests, embedding); returns once it listens."""
        warn_if_open(self.host, self.service.access.keys, self.service.logger)
        thread = threading.Thread(target=self.server.run, name="rest-uvicorn", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"Rest service did not start on {self.url}")
            time.sleep(0.02)
        return thread

    def stop_thread(self, thread: threading.Thread, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        thread.join(timeout_s)


def _http_protocol(settings: Mapping[str, Any], logger: logging.Logger) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (REST_HTTP_PARSER) held to the head limits."""
    limits = HeadLimits(int(settings["REST_MAX_HEADER_BYTES"]), int(settings["REST_MAX_HEADERS"]),
                        on_refused=RefusalLog(logger, clock=time.monotonic).refused)
    try:
        return limited_protocol(str(settings["REST_HTTP_PARSER"]), limits)
    except ValueError as exc:
        raise SettingsError(f"REST_HTTP_PARSER: {exc}") from exc


@contextmanager
def open_rest(settings: Mapping[str, Any], logger: logging.Logger, *, check: RequestCheck,
              schemas: list[tuple[str, dict[str, Any]]],
              metrics_factory: Callable[[RestService], Metrics] | None = None,
              port: int | None = None) -> Iterator[RestRunner]:
    """A started service and its runner; threads and clients are closed on exit."""
    service = RestService(settings, logger, check=check, schemas=schemas,
                          metrics_factory=metrics_factory)
    try:
        service.start()
        app = create_app(service)
        yield RestRunner(service, app, host=str(settings["REST_HOST"]),
                         port=int(settings["FLASK_PORT"] if port is None else port))
    finally:
        service.close()
