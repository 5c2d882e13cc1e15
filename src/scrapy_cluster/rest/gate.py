"""``Gate``: the ASGI middleware in front of every endpoint of the Rest service.

It checks credentials (``security.Access``: a key, guarded against guessing, or the
dashboard's session), refuses bodies over REST_MAX_BODY_BYTES by their Content-Length, adds
the security headers every answer carries, counts requests for ``/metrics`` and writes the
per-request log line (FLASK_LOGGING_ENABLED).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from fastapi.responses import Response
from starlette.requests import cookie_parser

from scrapy_cluster.rest.security import PUBLIC_PATHS
from scrapy_cluster.rest.service import RestService
from scrapy_cluster.rest.wire import MSG_KEY, MSG_LOCKED_OUT, MSG_TOO_LARGE, wrapped

SECURITY_HEADERS = ((b"x-content-type-options", b"nosniff"),
                    (b"content-security-policy", b"frame-ancestors 'none'"))
"""Added to every answer that does not set them: no MIME sniffing, never inside a frame. The
dashboard's pages and ``/docs`` set a full Content-Security-Policy of their own
(``wire.PAGE_HEADERS``, which also forbids frames)."""
QUIET_PREFIXES = ("/ui/api/", "/ui/events", "/ui/static/", "/docs/static/")
"""The pages' own refreshes and assets would drown the API's log lines: DEBUG for those."""


def endpoint_label(path: str) -> str:
    if path in ("/", "/feed", "/poll", "/metrics", "/openapi.json", "/docs"):
        return path
    if path.startswith("/docs/"):
        return "/docs"
    if path == "/ui" or path.startswith("/ui/"):
        return "/ui"
    return "other"


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    present = {name.lower() for name, _ in headers}
    return headers + [header for header in SECURITY_HEADERS if header[0] not in present]


class Gate:
    """ASGI middleware (module docstring)."""

    def __init__(self, app: Any, service: RestService) -> None:
        self.app = app
        self.service = service
        self.access = service.access
        self.log_requests = bool(service.settings.get("FLASK_LOGGING_ENABLED", True))

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[Any]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        headers = {name.decode("latin-1").lower(): value.decode("latin-1")
                   for name, value in scope.get("headers", [])}
        status = {"code": 500}

        async def guarded_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
                message["headers"] = with_security_headers(list(message.get("headers", [])))
            await send(message)

        try:
            client = scope.get("client")
            refusal = self._refusal(path, headers, client[0] if client else None)
            if refusal is not None:
                await refusal(scope, receive, guarded_send)
                return
            await self.app(scope, receive, guarded_send)
        finally:
            self._observe(scope, path, status["code"])

    def _observe(self, scope: Mapping[str, Any], path: str, code: int) -> None:
        metrics = self.service.metrics
        if metrics is not None:
            metrics.observe_request(endpoint_label(path), code)
        if self.log_requests:
            level = logging.DEBUG if path.startswith(QUIET_PREFIXES) else logging.INFO
            self.service.logger.log(level, "'%s' endpoint called", path.strip("/") or "index",
                                    extra={"method": scope.get("method"), "path": path,
                                           "status_code": code})

    def _refusal(self, path: str, headers: Mapping[str, str], host: str | None
                 ) -> Response | None:
        if self.access.required and path not in PUBLIC_PATHS:
            decision = self.access.check_request(
                headers, cookie_parser(headers.get("cookie", "")), host)
            if decision.retry_after_s:
                return wrapped(code=429, message=MSG_LOCKED_OUT,
                               headers={"Retry-After": str(decision.retry_after_s)})
            if not decision.allowed:
                if path in ("/ui", "/ui/") and "text/html" in headers.get("accept", ""):
                    return Response(status_code=303, headers={"location": "/ui/login"})
                return wrapped(code=401, message=MSG_KEY)
        length = headers.get("content-length")
        if length is not None:
            try:
                too_large = int(length) > self.service.max_body_bytes
            except ValueError:
                return wrapped(code=400, message="Invalid Content-Length header.")
            if too_large:
                return wrapped(code=413, message=MSG_TOO_LARGE)
        return None
