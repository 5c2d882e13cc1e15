"""The dashboard's routes, relative to where the app mounts them (``/ui``).

``GET ""`` the page; ``GET /static/<name>`` its script, style and vendored uPlot;
``GET /events`` server-sent events: the overview every DASHBOARD_REFRESH_S (``snapshot``
events); ``GET /api/overview``; ``GET /api/domains?page=&size=&spider=`` and
``GET /api/crawls?page=&size=&spider=`` (busiest first, pages of the cached snapshot: no Redis
read); ``GET /api/crawl/<spiderid>/<crawlid>`` one crawl's funnel (one round trip);
``GET|POST /login`` the API-key form (REST_API_KEYS), which sets the signed session cookie.
Every action of the page is a POST to ``/feed``, like any other client. JSON answers use the
API's ``{status, data, error}`` wrapper.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.concurrency import run_in_threadpool

from scrapy_cluster.rest.dashboard.cache import SnapshotCache
from scrapy_cluster.rest.dashboard.snapshot import SnapshotBuilder
from scrapy_cluster.rest.security import Access
from scrapy_cluster.rest.sessions import COOKIE as SESSION_COOKIE
from scrapy_cluster.rest.wire import PAGE_HEADERS
from scrapy_cluster.text import as_text

STATIC_DIR = Path(__file__).parent / "static"
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html",
               ".LICENSE": "text/plain"}
STREAM_MAX_S = 600.0
"""An event stream is closed after this long; the browser reconnects at once (fresh auth)."""
LOGIN_BODY_LIMIT = 4096
MAX_PAGE_SIZE = 500


def _wrapped(data: Any, *, code: int = 200, message: str | None = None) -> Response:
    body = {"status": "FAILURE" if message else "SUCCESS", "data": data,
            "error": {"message": message} if message else None}
    return Response(orjson.dumps(body), status_code=code, media_type="application/json",
                    headers={"Cache-Control": "no-store"})


def _page(rows: list[dict[str, Any]], page: int, size: int, generated_at_ms: int) -> Response:
    start = (page - 1) * size
    return _wrapped({"page": page, "size": size, "total": len(rows),
                     "generated_at_ms": generated_at_ms, "rows": rows[start:start + size]})


def create_router(service: Any) -> APIRouter:
    """The dashboard router (module docstring) for ``service`` (``settings``, ``logger``,
    ``redis``, ``frontier``)."""
    settings = service.settings
    refresh_s = max(0.2, float(settings.get("DASHBOARD_REFRESH_S", 2.0)))
    builder = SnapshotBuilder(service.redis, service.frontier, settings)
    cache = SnapshotCache(builder.build, max_age_s=refresh_s)
    router = APIRouter(include_in_schema=False)

    async def overview_or_error() -> tuple[dict[str, Any] | None, str | None]:
        try:
            snapshot = await cache.get()
        except Exception as exc:
            service.logger.warning("dashboard snapshot failed: %s", exc)
            return None, f"Redis unreachable: {exc}"
        return {**snapshot.overview, "refresh_s": refresh_s}, None

    _page_routes(router)
    _data_routes(router, builder, cache, overview_or_error)

    @router.get("/events")
    async def events(request: Request) -> Response:
        return _event_stream(request, overview_or_error, cache, refresh_s)

    _login_routes(router, service.access)
    return router


def _page_routes(router: APIRouter) -> None:
    """The page itself and its static files."""
    static_files = {path.name: path for path in STATIC_DIR.iterdir() if path.is_file()}
    page = (STATIC_DIR / "index.html").read_text()

    @router.get("")
    @router.get("/")
    async def index(request: Request) -> Response:
        base = html.escape(request.url.path.rstrip("/") or "/ui", quote=True)
        return HTMLResponse(page.replace("{{BASE}}", base), headers=PAGE_HEADERS)

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        path = static_files.get(name)
        if path is None:
            return _wrapped(None, code=404, message="The desired endpoint does not exist")
        return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix, "text/plain"),
                            headers={"Cache-Control": "no-cache"})


def _data_routes(router: APIRouter, builder: SnapshotBuilder, cache: SnapshotCache,
                 overview_or_error: Any) -> None:
    """The JSON the page reads: all but the crawl funnel come from the shared snapshot."""
    @router.get("/api/overview")
    async def overview() -> Response:
        data, error = await overview_or_error()
        return _wrapped(data, code=503 if error else 200, message=error)

    @router.get("/api/domains")
    async def domains(page: int = Query(1, ge=1), size: int = Query(25, ge=1, le=MAX_PAGE_SIZE),
                      spider: str | None = None) -> Response:
        try:
            snapshot = await cache.get()
        except Exception as exc:
            return _wrapped(None, code=503, message=f"Redis unreachable: {exc}")
        rows = [row for row in snapshot.domains if spider is None or spider in row["spiders"]]
        return _page(rows, page, size, snapshot.generated_at_ms)

    @router.get("/api/crawls")
    async def crawls(page: int = Query(1, ge=1), size: int = Query(25, ge=1, le=MAX_PAGE_SIZE),
                     spider: str | None = None) -> Response:
        try:
            snapshot = await cache.get()
        except Exception as exc:
            return _wrapped(None, code=503, message=f"Redis unreachable: {exc}")
        rows = [row for row in snapshot.crawls if spider is None or row["spiderid"] == spider]
        return _page(rows, page, size, snapshot.generated_at_ms)

    @router.get("/api/crawl/{spiderid}/{crawlid}")
    async def crawl(spiderid: str, crawlid: str) -> Response:
        try:
            return _wrapped(await run_in_threadpool(builder.funnel, spiderid, crawlid))
        except Exception as exc:
            return _wrapped(None, code=503, message=f"Redis unreachable: {exc}")


def _login_routes(router: APIRouter, access: Access) -> None:
    """The sign-in form (only while REST_API_KEYS asks for a key)."""
    @router.get("/login")
    async def login_form() -> Response:
        if not access.required:
            return RedirectResponse("/ui", status_code=303)
        return HTMLResponse(_login_page(None), headers=PAGE_HEADERS)

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not access.required:
            return RedirectResponse("/ui", status_code=303)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > LOGIN_BODY_LIMIT:
                return HTMLResponse(_login_page("The form is too large."), status_code=413,
                                    headers=PAGE_HEADERS)
        key = (parse_qs(as_text(body)).get("key") or [""])[0]
        return _signed_in(access, key, request)


def _signed_in(access: Access, key: str, request: Request) -> Response:
    """The answer to the login form: the session cookie and a redirect to the page, or the
    form again (401, or 429 while the address is locked out)."""
    decision = access.check_key(key, request.client.host if request.client else None)
    if decision.retry_after_s:
        return HTMLResponse(_login_page("Too many wrong keys; retry later."), status_code=429,
                            headers={**PAGE_HEADERS, "Retry-After": str(decision.retry_after_s)})
    if not decision.allowed:
        return HTMLResponse(_login_page("That key is not valid."), status_code=401,
                            headers=PAGE_HEADERS)
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(SESSION_COOKIE, access.sessions.issue(key),
                        max_age=access.sessions.ttl_s, httponly=True, samesite="strict",
                        path="/", secure=access.cookie_secure or request.url.scheme == "https")
    return response


def _event_stream(request: Request, overview_or_error: Any, cache: SnapshotCache,
                  refresh_s: float) -> Response:
    """``snapshot`` events (the overview JSON) each time the shared snapshot is renewed, or
    ``failure`` events while Redis is unreachable; closed after STREAM_MAX_S."""
    async def stream() -> AsyncIterator[bytes]:
        yield f"retry: {int(refresh_s * 1000)}\n\n".encode()
        ends_at = time.monotonic() + STREAM_MAX_S
        last_sent = None
        while time.monotonic() < ends_at and not await request.is_disconnected():
            data, error = await overview_or_error()
            if error is not None:
                yield b"event: failure\ndata: " + orjson.dumps({"message": error}) + b"\n\n"
            elif data is not None and data["generated_at_ms"] != last_sent:
                last_sent = data["generated_at_ms"]
                yield b"event: snapshot\ndata: " + orjson.dumps(data) + b"\n\n"
            await asyncio.sleep(max(0.05, cache.stale_in_s()))

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _login_page(error: str | None) -> str:
    message = f'<p class="error">{html.escape(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>scrapy-cluster — sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:15px system-ui,sans-serif;max-width:24rem;margin:4rem auto;color:#222}}
input{{font:inherit;padding:.4rem;width:100%;box-sizing:border-box;margin:.4rem 0}}
button{{font:inherit;padding:.4rem 1rem}}.error{{color:#b00020}}</style></head>
<body><h1>scrapy-cluster</h1><p>This dashboard needs an API key (REST_API_KEYS).</p>{message}
<form method="post" action="/ui/login"><label for="key">API key</label>
<input id="key" name="key" type="password" autocomplete="current-password" autofocus required>
<button type="submit">Sign in</button></form></body></html>"""
