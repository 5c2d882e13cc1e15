"""The Rest service's ASGI application: its endpoints (docs/rest.md).

``GET|POST /`` health, ``POST /feed``, ``POST /poll``, ``GET /metrics``, the dashboard under
``/ui``, ``/openapi.json`` and ``/docs`` (Swagger UI, served from the package: ``api_docs``).
Every JSON answer except ``/`` is the wrapper ``{status, data, error}`` (``wire``).

Cost of ``POST /feed``: no Redis round trip per request (a crawl request's ``warnings`` come
from the crawler heartbeats, read at most once per COVERAGE_MAX_AGE_S per process:
``feed_warnings``); one share of a group-committed bus flush (``feed_sender.FeedSender``); a
request with a ``uuid`` then waits on a future the answer reader resolves
(``answer_router``). ``POST /poll``: one GET. ``GET /``: none (the health thread's last result).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import redis
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from scrapy_cluster import __version__, keys
from scrapy_cluster.errors import BusError, MessageTooLargeError
from scrapy_cluster.rest.api_docs import create_docs_router
from scrapy_cluster.rest.dashboard import create_router
from scrapy_cluster.rest.feed_warnings import feed_warnings
from scrapy_cluster.rest.openapi import (
    INDEX_RESPONSES,
    METRICS_RESPONSES,
    WRAPPER_RESPONSES,
    feed_body,
    poll_body,
)
from scrapy_cluster.rest.poll_schema import PollSchema
from scrapy_cluster.rest.service import RestService
from scrapy_cluster.rest.wire import (
    JSON_TYPE,
    MSG_METHOD,
    MSG_NO_ENDPOINT,
    MSG_NO_KAFKA,
    MSG_NO_POLL,
    MSG_NO_REDIS,
    MSG_SCHEMA,
    MSG_TOO_LARGE,
    MSG_UNEXPECTED,
    parse_json,
    wrapped,
)


def create_app(service: RestService) -> FastAPI:
    """The application; the caller starts and closes ``service``."""
    app = FastAPI(title="scrapy-cluster Rest service", version=__version__,
                  description="Submit crawls and API requests over HTTP; see docs/rest.md.",
                  docs_url=None, redoc_url=None)  # /docs is api_docs (offline); no ReDoc
    app.state.service = service
    _add_api(app, service, PollSchema.load())
    app.include_router(create_router(service), prefix="/ui")
    app.include_router(create_docs_router(title=app.title, openapi_url=str(app.openapi_url)),
                       prefix="/docs")
    _add_error_handlers(app, service)
    return app


def _add_api(app: FastAPI, service: RestService, poll_schema: PollSchema) -> None:
    @app.get("/", operation_id="index", responses=INDEX_RESPONSES)
    @app.post("/", operation_id="index_post", responses=INDEX_RESPONSES)
    async def index() -> Response:
        health = service.health
        body = {"kafka_connected": health.kafka_connected,
                "my_id": service.my_id,
                "node_health": health.node_health,
                "redis_connected": health.redis_connected,
                "uptime_sec": int(time.time() - service.started_at)}
        return Response(orjson.dumps(body), media_type=JSON_TYPE)

    @app.post("/feed", openapi_extra=feed_body(service.schemas), responses=WRAPPER_RESPONSES)
    async def feed(request: Request) -> Response:
        return await _feed(service, request)

    @app.post("/poll", openapi_extra=poll_body(poll_schema.definition),
              responses=WRAPPER_RESPONSES)
    async def poll(request: Request) -> Response:
        return await _poll(service, poll_schema, request)

    @app.get("/metrics", responses=METRICS_RESPONSES)
    async def metrics() -> Response:
        if service.metrics is None:
            return wrapped(code=404, message=MSG_NO_ENDPOINT)
        body, content_type = await run_in_threadpool(service.metrics.render)
        return Response(body, media_type=content_type)


def _add_error_handlers(app: FastAPI, service: RestService) -> None:
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


async def _feed(service: RestService, request: Request) -> Response:
    """``POST /feed``: validate, produce (group commit), then wait for the answer when the
    request has a ``uuid`` (module docstring for the cost)."""
    parsed = await parse_json(request, service.max_body_bytes)
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
    refused = await _produce(service, parsed, plugin, uuid, waiter)
    if refused is not None:
        return refused
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


async def _produce(service: RestService, parsed: dict[str, Any], plugin: str, uuid: str | None,
                   waiter: asyncio.Future[Any] | None) -> Response | None:
    """Put the request on the bus; the answer to return when it could not be, else None."""
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
    return None


async def _poll(service: RestService, poll_schema: PollSchema, request: Request) -> Response:
    """``POST /poll``: the stored answer to a ``poll_id`` (one GET)."""
    parsed = await parse_json(request, service.max_body_bytes)
    if isinstance(parsed, Response):
        return parsed
    cause = poll_schema.problem(parsed)
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


def _observe_feed(service: RestService, plugin: str, outcome: str) -> None:
    if service.metrics is not None:
        service.metrics.observe_feed(plugin, outcome)


def _forget(service: RestService, uuid: str | None, waiter: asyncio.Future[Any] | None) -> None:
    if uuid is not None and waiter is not None:
        service.router.forget(uuid, waiter)
