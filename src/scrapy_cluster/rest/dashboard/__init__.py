"""The Rest service's live dashboard at ``/ui`` (docs/dashboard.md).

``create_router(service)`` returns the routes; the app mounts them under ``/ui``. The page is
static HTML and plain JavaScript (no build step) with the vendored uPlot chart library
(``static/uPlot.*``, MIT licence in ``static/uPlot.LICENSE``); it reads one shared snapshot
(``snapshot``, ``cache``) over server-sent events and acts only through ``POST /feed``.
"""

from __future__ import annotations

from scrapy_cluster.rest.dashboard.routes import create_router

__all__ = ["create_router"]
