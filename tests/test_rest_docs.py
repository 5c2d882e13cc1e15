"""``/docs`` works without internet access (docs/rest.md, docs/security.md claim 7): the page
loads Swagger UI from the service, not a CDN; every asset it names is served with its type and
``nosniff``; the page has no inline script and carries the dashboard's strict policy; the key
guards the page and its assets as it guards the rest of the API.

The application runs in this process on a real Redis, behind its Gate, called through ASGI.
The page in a real browser with the network cut is ``tests/test_rest_browser.py``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from scrapy_cluster.kafka_monitor.loader import build_validator, plugin_classes
from scrapy_cluster.rest.api_docs import STATIC_DIR, SWAGGER_UI_VERSION
from scrapy_cluster.rest.endpoints import create_app
from scrapy_cluster.rest.gate import Gate
from scrapy_cluster.rest.service import RestService
from scrapy_cluster.rest.sessions import COOKIE
from scrapy_cluster.rest.wire import MSG_KEY
from scrapy_cluster.settings import load_settings

pytestmark = pytest.mark.integration

KEY = "key-docs-5b0e8c1f7d2a"
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


class Assets(HTMLParser):
    """What a browser would load for the page: scripts (and whether any is inline), style
    sheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts = 0
        self._in_script_without_src = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            if values.get("src"):
                self.urls.append(str(values["src"]))
            else:
                self._in_script_without_src = True
        elif tag == "link" and values.get("href"):
            self.urls.append(str(values["href"]))
        elif tag == "img" and values.get("src"):
            self.urls.append(str(values["src"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script_without_src = False

    def handle_data(self, data: str) -> None:
        if self._in_script_without_src and data.strip():
            self.inline_scripts += 1


def assets_of(page: str) -> Assets:
    parser = Assets()
    parser.feed(page)
    return parser


class InProcess:
    """The Rest application behind its Gate, called through ASGI."""

    def __init__(self, app: Gate) -> None:
        self.app = app

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        cookies = kwargs.pop("cookies", None)

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=("203.0.113.20", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://rest.test",
                                         cookies=cookies) as http:
                return await http.request(method, path, **kwargs)

        return asyncio.run(send())


@pytest.fixture
def make_rest(redis_url: str) -> Iterator[Callable[..., InProcess]]:
    services: list[RestService] = []

    def make(**overrides: Any) -> InProcess:
        prefix = f"docs-{uuid.uuid4().hex[:8]}"
        settings = dict(load_settings("rest", environ={}, overrides={
            "REDIS_URL": redis_url, "BUS_BACKEND": "redis", "LOG_LEVEL": "WARNING",
            "KAFKA_TOPIC_PREFIX": prefix, "KAFKA_INCOMING_TOPIC": f"{prefix}.incoming",
            "REST_API_KEYS": [], **overrides}))
        validator = build_validator(plugin_classes(settings), settings)
        service = RestService(settings, logging.getLogger("test-rest-docs"),
                              check=validator.match,
                              schemas=[(schema.plugin, schema.definition)
                                       for schema in validator.schemas])
        services.append(service)
        return InProcess(Gate(create_app(service), service))

    yield make
    for service in services:
        service.close(join_timeout_s=1)


def test_the_docs_page_names_no_remote_asset(make_rest: Callable[..., InProcess]) -> None:
    page = make_rest().get("/docs")
    assert page.status_code == 200
    urls = assets_of(page.text).urls
    assert any(url.endswith("swagger-ui-bundle.js") for url in urls)
    assert any(url.endswith("swagger-ui.css") for url in urls)
    assert [url for url in urls if not url.startswith("/")] == []
    assert re.findall(r"(?:https?:)?//[\w.-]+", page.text) == []


def test_every_asset_of_the_docs_page_is_served_with_its_type_and_nosniff(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest()
    urls = assets_of(rest.get("/docs").text).urls
    assert len(urls) == 4  # style sheet, icon, Swagger UI, our start-up script
    for url in urls:
        answer = rest.get(url)
        assert answer.status_code == 200, url
        extension = url[url.rindex("."):]
        assert answer.headers["content-type"].split(";")[0] == CONTENT_TYPES[extension], url
        assert answer.headers["x-content-type-options"] == "nosniff", url
        assert answer.content == (STATIC_DIR / url.rsplit("/", 1)[1]).read_bytes(), url


def test_the_docs_page_has_the_strict_policy_and_no_inline_script(
        make_rest: Callable[..., InProcess]) -> None:
    page = make_rest().get("/docs")
    policy = {directive.split()[0]: directive.split()[1:]
              for directive in page.headers["content-security-policy"].split("; ")}
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert page.headers.get_list("content-security-policy") == [
        page.headers["content-security-policy"]]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert assets_of(page.text).inline_scripts == 0


def test_the_key_guards_the_docs_page_and_its_assets(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest(REST_API_KEYS=[KEY])
    paths = ["/docs", "/openapi.json", *assets_of(rest.get(
        "/docs", headers={"X-API-Key": KEY}).text).urls]
    for path in paths:
        refused = rest.get(path)
        assert (refused.status_code, refused.json()["error"]) == (401, {"message": MSG_KEY})
        assert rest.get(path, headers={"X-API-Key": KEY}).status_code == 200, path
    signed_in = rest.request("POST", "/ui/login", data={"key": KEY})
    session = signed_in.headers["set-cookie"].split(";", 1)[0].split("=", 1)[1]
    for path in paths:  # what a browser signed in at /ui/login loads
        assert rest.get(path, cookies={COOKIE: session}).status_code == 200, path


def test_redoc_and_the_oauth_redirect_are_not_served(
        make_rest: Callable[..., InProcess]) -> None:
    rest = make_rest()
    assert rest.get("/redoc").status_code == 404
    assert rest.get("/docs/oauth2-redirect").status_code == 404
    assert rest.get("/docs/static/nothing.js").status_code == 404


def test_the_vendored_swagger_ui_is_the_documented_version_with_its_licence() -> None:
    bundle = (STATIC_DIR / "swagger-ui-bundle.js").read_text()
    assert f'PACKAGE_VERSION:"{SWAGGER_UI_VERSION}"' in bundle
    assert "Apache License" in (STATIC_DIR / "swagger-ui.LICENSE").read_text()
    assert "SmartBear" in (STATIC_DIR / "swagger-ui.NOTICE").read_text()
    assert (STATIC_DIR / "swagger-ui-bundle.js.LICENSE.txt").is_file()
