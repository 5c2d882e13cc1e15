"""The API's interactive documentation, served without internet access.

``GET /docs`` is Swagger UI's page; ``GET /docs/static/<name>`` its files. Swagger UI
(``SWAGGER_UI_VERSION``, npm's ``swagger-ui-dist``) is vendored in ``docs_static/``:
``swagger-ui-bundle.js``, ``swagger-ui.css`` and ``favicon-32x32.png`` as published, its
Apache-2.0 licence and notice (``swagger-ui.LICENSE``, ``swagger-ui.NOTICE``) and the licences
of the libraries in the bundle (``swagger-ui-bundle.js.LICENSE.txt``). ``docs-init.js`` is ours.

The page is FastAPI's Swagger UI page (same parameters, ``swagger_ui_default_parameters``)
without its inline script: ``docs-init.js`` reads the configuration from the page's
``data-config`` attribute, so the page carries the dashboard's strict Content-Security-Policy
(``wire.PAGE_HEADERS``, ``script-src 'self'``). ReDoc is not served.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.openapi.docs import swagger_ui_default_parameters
from fastapi.responses import FileResponse, HTMLResponse, Response

from scrapy_cluster.rest.wire import MSG_NO_ENDPOINT, PAGE_HEADERS, wrapped

STATIC_DIR = Path(__file__).parent / "docs_static"
SWAGGER_UI_VERSION = "5.35.0"
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png",
               ".txt": "text/plain", ".LICENSE": "text/plain", ".NOTICE": "text/plain"}


def swagger_config(openapi_url: str) -> dict[str, Any]:
    """Swagger UI's configuration: FastAPI's defaults, the document's URL, and no validator
    badge (it would call validator.swagger.io)."""
    return {**swagger_ui_default_parameters, "url": openapi_url, "validatorUrl": None}


def docs_page(*, title: str, openapi_url: str, static_url: str) -> str:
    """The HTML of ``/docs``: every asset from ``static_url``, no inline script or style."""
    config = html.escape(orjson.dumps(swagger_config(openapi_url)).decode(), quote=True)
    static = html.escape(static_url, quote=True)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="{static}/swagger-ui.css">
<link rel="icon" type="image/png" href="{static}/favicon-32x32.png">
</head><body>
<div id="swagger-ui" data-config="{config}"></div>
<script src="{static}/swagger-ui-bundle.js"></script>
<script src="{static}/docs-init.js"></script>
</body></html>
"""


def create_docs_router(*, title: str, openapi_url: str) -> APIRouter:
    """The router of ``/docs`` (module docstring), to be mounted with the prefix ``/docs``."""
    static_files = {path.name: path for path in STATIC_DIR.iterdir() if path.is_file()}
    router = APIRouter(include_in_schema=False)

    @router.get("")
    async def page(request: Request) -> Response:
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return HTMLResponse(docs_page(title=f"{title} - Swagger UI",
                                      openapi_url=root + openapi_url,
                                      static_url=f"{root}/docs/static"),
                            headers=PAGE_HEADERS)

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        path = static_files.get(name)
        if path is None:
            return wrapped(code=404, message=MSG_NO_ENDPOINT)
        return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix, "text/plain"),
                            headers={"Cache-Control": "no-cache"})

    return router
