"""Crawler pieces that need no server: request round trip, meta, link rules, items, SSRF, public IP."""

from __future__ import annotations

import base64
import ipaddress
import logging
from typing import Any

import orjson
import pytest
from scrapy import Request, Spider
from scrapy.exceptions import DownloadCancelledError, DownloadTimeoutError, IgnoreRequest
from scrapy.http import HtmlResponse, Response
from scrapy.link import Link

from scrapy_cluster.crawler import page_links, response_items
from scrapy_cluster.crawler.common import items, link_rules, meta
from scrapy_cluster.crawler.common.address_guard import first_forbidden, forbidden_reason
from scrapy_cluster.crawler.common.public_ip import UNKNOWN_IP, PublicIpLookup, PublicIpRefresher
from scrapy_cluster.crawler.serialization import request_from_dict, request_to_dict
from scrapy_cluster.errors import RequestSerializationError


class _Spider(Spider):
    name = "link"

    def parse(self, response: Response) -> None:
        return None

    def parse_detail(self, response: Response) -> None:
        return None

    def errback(self, failure: Any) -> None:
        return None


def _round_trip(request: Request) -> Request:
    spider = _Spider()
    return request_from_dict(orjson.loads(orjson.dumps(request_to_dict(request, spider))), spider)


# --- request <-> dict -------------------------------------------------------------------------

def test_round_trip_keeps_method_body_and_headers() -> None:
    original = Request("http://a.test/x", method="POST", body=b"k=v",
                       headers={"X-Multi": ["one", "two"], "Accept": "text/html"})
    copy = _round_trip(original)
    assert (copy.method, copy.body, copy.headers.getlist("X-Multi"), copy.headers["Accept"]) == \
        ("POST", b"k=v", [b"one", b"two"], b"text/html")


def test_round_trip_keeps_a_binary_body_via_base64() -> None:
    original = Request("http://a.test/x", method="PUT", body=b"\xff\x00\xfe")
    data = request_to_dict(original, _Spider())
    assert data["body_b64"] == base64.b64encode(b"\xff\x00\xfe").decode()
    assert _round_trip(original).body == b"\xff\x00\xfe"


def test_round_trip_keeps_cookies_priority_and_dont_filter() -> None:
    copy = _round_trip(Request("http://a.test/", cookies={"session": "s1"}, priority=-20,
                               dont_filter=True))
    assert (copy.cookies, copy.priority, copy.dont_filter) == ({"session": "s1"}, -20, True)


def test_round_trip_keeps_callback_and_errback_by_name() -> None:
    spider = _Spider()
    original = Request("http://a.test/", callback=spider.parse_detail, errback=spider.errback)
    copy = request_from_dict(request_to_dict(original, spider), spider)
    assert (copy.callback, copy.errback) == (spider.parse_detail, spider.errback)


def test_round_trip_keeps_cluster_fields_and_user_meta_only() -> None:
    original = Request("http://a.test/", meta={
        "appid": "app", "crawlid": "c1", "attrs": {"k": 1}, "maxdepth": 2, "curdepth": 1,
        "step": 3, "download_slot": "a.test", "depth": 4, "_private": object()})
    copy = _round_trip(original)
    assert {k: v for k, v in copy.meta.items() if k != "retry_times"} == {
        "appid": "app", "crawlid": "c1", "spiderid": "link", "attrs": {"k": 1}, "maxdepth": 2,
        "curdepth": 1, "step": 3, "priority": 0}


def test_meta_spiderid_hands_the_request_to_another_spider() -> None:
    data = request_to_dict(Request("http://a.test/", meta={"spiderid": "wandering"}), _Spider())
    assert data["spiderid"] == "wandering"


def test_lambda_callback_is_refused_with_a_clear_error() -> None:
    with pytest.raises(RequestSerializationError, match="not a method of spider"):
        request_to_dict(Request("http://a.test/", callback=lambda r: None), _Spider())


def test_meta_that_is_not_json_is_refused() -> None:
    with pytest.raises(RequestSerializationError, match="not JSON-serialisable"):
        request_to_dict(Request("http://a.test/", meta={"thing": object()}), _Spider())


def test_stored_request_naming_a_missing_method_is_refused() -> None:
    with pytest.raises(RequestSerializationError, match="no method 'parse_gone'"):
        request_from_dict({"url": "http://a.test/", "callback": "parse_gone"}, _Spider())


def test_useragent_field_becomes_the_user_agent_header() -> None:
    request = request_from_dict({"url": "http://a.test/", "useragent": "bot/1"}, _Spider())
    assert request.headers["User-Agent"] == b"bot/1"


# --- meta inheritance -------------------------------------------------------------------------

def test_inherit_copies_crawl_fields_and_increments_depth() -> None:
    parent = {"appid": "a", "crawlid": "c", "spiderid": "link", "maxdepth": 2, "curdepth": 1,
              "download_slot": "x"}
    assert meta.inherit(parent, {}) == {"appid": "a", "crawlid": "c", "spiderid": "link",
                                        "maxdepth": 2, "curdepth": 2}


def test_inherit_keeps_a_child_spiderid() -> None:
    assert meta.inherit({"spiderid": "link"}, {"spiderid": "wandering"})["spiderid"] == "wandering"


def test_child_priority_is_ten_below_the_parent() -> None:
    assert meta.child_priority({"priority": 5}) == -5


# --- link rules -------------------------------------------------------------------------------

def _links(*urls: str) -> list[Link]:
    return [Link(url) for url in urls]


def test_links_beyond_maxdepth_are_not_followed() -> None:
    assert link_rules.links_to_follow(_links("http://a.test/1"), {"curdepth": 2, "maxdepth": 2}, 0) == []


def test_links_within_maxdepth_are_followed() -> None:
    found = link_rules.links_to_follow(_links("http://a.test/1"), {"curdepth": 1, "maxdepth": 2}, 0)
    assert [link.url for link in found] == ["http://a.test/1"]


def test_allowed_domains_keep_subdomains_and_drop_others() -> None:
    rules = link_rules.LinkRules.from_meta({"allowed_domains": ["a.test"]})
    assert [rules.allows(u) for u in ("http://www.a.test/", "http://b.test/")] == [True, False]


def test_deny_regex_wins_over_allow_regex() -> None:
    rules = link_rules.LinkRules.from_meta({"allow_regex": ["/p/"], "deny_regex": ["/p/1"]})
    assert [rules.allows(u) for u in ("http://a.test/p/2", "http://a.test/p/1", "http://a.test/q")] \
        == [True, False, False]


def test_default_deny_extensions_drop_documents() -> None:
    rules = link_rules.LinkRules.from_meta({})
    assert [rules.allows(u) for u in ("http://a.test/x.pdf", "http://a.test/x.html")] == [False, True]


def test_explicit_empty_deny_extensions_allow_everything() -> None:
    assert link_rules.LinkRules.from_meta({"deny_extensions": []}).allows("http://a.test/x.pdf")


def test_expired_crawl_follows_no_links() -> None:
    found = link_rules.links_to_follow(_links("http://a.test/1"),
                                  {"curdepth": 0, "maxdepth": 3, "expires": 100}, now_s=100.0)
    assert found == []


def test_extract_links_returns_url_and_text() -> None:
    response = HtmlResponse("http://a.test/", body=b'<a href="/x">the x</a><a href="mailto:m">m</a>')
    assert [(link.url, link.text) for link in page_links.extract_links(response)] == \
        [("http://a.test/x", "the x")]


# --- items ------------------------------------------------------------------------------------

def _response(body: bytes, status: int = 200, content_type: bytes = b"text/html") -> Response:
    request = Request("http://a.test/p", meta={"appid": "app", "crawlid": "c", "spiderid": "link",
                                                "attrs": {"k": "v"}})
    return HtmlResponse("http://a.test/p", status=status, body=body, request=request,
                        headers={"Content-Type": content_type, "Set-Cookie": ["a=1", "b=2"]})


def test_response_item_carries_the_crawl_response_fields() -> None:
    item = response_items.response_item(_response(b"<html>hi</html>", 404), [Link("http://a.test/x", "x")],
                               now_s=0.0, base64_body=False)
    assert {k: item[k] for k in ("url", "status_code", "status_msg", "body", "encoding_base64",
                                 "links", "appid", "crawlid", "spiderid", "attrs", "timestamp")} \
        == {"url": "http://a.test/p", "status_code": 404, "status_msg": "Not Found",
            "body": "<html>hi</html>", "encoding_base64": False,
            "links": [{"url": "http://a.test/x", "text": "x"}], "appid": "app", "crawlid": "c",
            "spiderid": "link", "attrs": {"k": "v"}, "timestamp": "1970-01-01T00:00:00+00:00"}


def test_a_depth_upgrade_is_marked_on_its_item_and_not_inherited_by_its_links() -> None:
    from scrapy_cluster.frontier import codec

    stored = codec.decode_item(b'{"du":true,"u":"http://a.test/p","a":"app","cd":2}',
                               spiderid="link", crawlid="c", priority=-20)
    request = request_from_dict(stored, _Spider())
    response = HtmlResponse("http://a.test/p", body=b"<html></html>", request=request)
    item = response_items.response_item(response, [], now_s=0.0, base64_body=False)
    assert (request.meta["depth_upgrade"], item["depth_upgrade"]) == (True, True)
    assert "depth_upgrade" not in meta.inherit(request.meta, {})
    plain = response_items.response_item(_response(b"x"), [], now_s=0.0, base64_body=False)
    assert "depth_upgrade" not in plain


def test_response_headers_keep_every_value() -> None:
    item = response_items.response_item(_response(b"x"), [], now_s=0.0, base64_body=False)
    assert item["response_headers"]["Set-Cookie"] == ["a=1", "b=2"]


def test_body_that_is_not_utf8_is_sent_base64_with_the_flag() -> None:
    item = response_items.response_item(_response(b"caf\xe9"), [], now_s=0.0, base64_body=False)
    assert (item["encoding_base64"], base64.b64decode(item["body"])) == (True, b"caf\xe9")


def test_base64_setting_encodes_every_body() -> None:
    item = response_items.response_item(_response(b"plain"), [], now_s=0.0, base64_body=True)
    assert (item["encoding_base64"], item["body"]) == (True, base64.b64encode(b"plain").decode())


def test_oversized_item_is_cut_to_the_limit_and_says_so() -> None:
    item = response_items.response_item(_response(b"y" * 50_000), [], now_s=0.0, base64_body=False)
    fitted = items.fit_to_limit(item, 10_000)
    assert (len(orjson.dumps(fitted)) <= 10_000, fitted["body_truncated"], fitted["body_length"],
            fitted["body"] == "y" * len(fitted["body"])) == (True, True, 50_000, True)


def test_item_within_the_limit_is_unchanged() -> None:
    item = response_items.response_item(_response(b"small"), [], now_s=0.0, base64_body=False)
    assert items.fit_to_limit(item, 100_000) is item


def test_oversized_base64_body_stays_valid_base64() -> None:
    item = response_items.response_item(_response(b"\xff" * 30_000), [], now_s=0.0, base64_body=False)
    fitted = items.fit_to_limit(item, 8_000)
    assert set(base64.b64decode(fitted["body"])) == {0xFF}


def test_error_item_names_the_error_and_keeps_the_crawl_identity() -> None:
    request = Request("http://a.test/p", meta={"appid": "app", "crawlid": "c", "retry_times": 2})
    item = response_items.error_item(request, ConnectionRefusedError("refused"), now_s=0.0, status=None)
    assert (item["error"], item["retry_times"], item["appid"], item["status_code"]) == \
        ({"type": "ConnectionRefusedError", "message": "refused", "reason": "download_failed"},
         2, "app", None)


# --- SSRF guard -------------------------------------------------------------------------------

@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "a loopback address"), ("10.1.2.3", "a private address"),
    ("169.254.169.254", "a cloud metadata address"), ("169.254.1.1", "a link-local address"),
    ("::1", "a loopback address"), ("::ffff:192.168.0.1", "a private address"),
    ("100.64.0.1", "a shared (carrier-grade NAT) address"), ("0.0.0.0", "the unspecified address"),
])
def test_internal_addresses_are_refused_with_the_reason(address: str, reason: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


def test_public_address_is_allowed() -> None:
    assert forbidden_reason(ipaddress.ip_address("93.184.216.34")) is None


def test_any_internal_address_among_several_is_refused() -> None:
    assert first_forbidden(["93.184.216.34", "10.0.0.1"]) == ("10.0.0.1", "a private address")


# --- public IP --------------------------------------------------------------------------------

def _refresher(answers: list[Any]) -> PublicIpRefresher:
    def fetch(url: str, timeout_s: float) -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)
    return PublicIpRefresher(
        PublicIpLookup("http://ip.test/", r"(\d+\.\d+\.\d+\.\d+)", refresh_s=60, timeout_s=1),
        logger=logging.getLogger("t"), fetch=fetch)


def test_public_ip_is_taken_from_the_regex_match() -> None:
    assert _refresher(["your ip: 203.0.113.7\n"]).refresh_once() == "203.0.113.7"


def test_failed_lookup_keeps_the_last_ip() -> None:
    refresher = _refresher(["203.0.113.7", TimeoutError("slow")])
    refresher.refresh_once()
    assert refresher.refresh_once() == "203.0.113.7"


def test_lookup_without_match_keeps_the_fallback() -> None:
    assert _refresher(["no address here"]).refresh_once() == UNKNOWN_IP


def test_allowed_domains_ignore_the_port() -> None:
    assert link_rules.LinkRules.from_meta({"allowed_domains": ["127.0.0.2"]}).allows(
        "http://127.0.0.2:8080/p/1.html")


def test_ssrf_guard_refuses_a_loopback_url_with_the_reason() -> None:
    import asyncio

    from scrapy_cluster.crawler.ssrf import ForbiddenAddress, SsrfGuardMiddleware

    with pytest.raises(ForbiddenAddress, match="127.0.0.1 is a loopback address"):
        asyncio.run(SsrfGuardMiddleware().process_request(Request("http://127.0.0.1:8080/x")))


def test_ssrf_guard_is_off_when_private_networks_are_allowed() -> None:
    from scrapy.exceptions import NotConfigured
    from scrapy.utils.test import get_crawler

    from scrapy_cluster.crawler.ssrf import SsrfGuardMiddleware

    crawler = get_crawler(settings_dict={"CRAWLER_ALLOW_PRIVATE_NETWORKS": True})
    with pytest.raises(NotConfigured):
        SsrfGuardMiddleware.from_crawler(crawler)


def test_ssrf_guard_lets_an_allowed_private_network_through() -> None:
    import asyncio

    from scrapy_cluster.crawler.ssrf import SsrfGuardMiddleware

    guard = SsrfGuardMiddleware([ipaddress.ip_network("127.0.0.50/32")])
    assert asyncio.run(guard.process_request(Request("http://127.0.0.50:8080/x"))) is None


def test_ssrf_guard_still_refuses_internal_addresses_outside_the_allowed_networks() -> None:
    import asyncio

    from scrapy_cluster.crawler.ssrf import ForbiddenAddress, SsrfGuardMiddleware

    guard = SsrfGuardMiddleware([ipaddress.ip_network("127.0.0.50/32")])
    with pytest.raises(ForbiddenAddress, match="127.0.0.1 is a loopback address"):
        asyncio.run(guard.process_request(Request("http://127.0.0.1:8080/x")))


def test_metadata_address_is_refused_even_inside_an_allowed_network() -> None:
    allowed = [ipaddress.ip_network("169.254.0.0/16")]
    assert (forbidden_reason(ipaddress.ip_address("169.254.169.254"), allowed),
            forbidden_reason(ipaddress.ip_address("169.254.1.1"), allowed)) == \
        ("a cloud metadata address", None)


@pytest.mark.parametrize(("error", "reason"), [
    (DownloadTimeoutError("slow"), "timeout"),
    (DownloadCancelledError(""), "too_large"),
    (IgnoreRequest("... exceeded DOWNLOAD_MAXSIZE (1 B) during decompression."), "too_large"),
    (IgnoreRequest("max redirections reached"), "too_many_redirects"),
    (IgnoreRequest("Forbidden by robots.txt"), "robots"),
    (ConnectionRefusedError("refused"), "download_failed"),
])
def test_error_item_names_a_stable_reason(error: BaseException, reason: str) -> None:
    assert response_items.failure_reason(error) == reason


def test_body_cancelled_without_a_message_is_explained_as_too_large() -> None:
    item = response_items.error_item(Request("http://a.test/big"), DownloadCancelledError(""), now_s=0.0,
                            download_maxsize=1024)
    assert item["error"]["message"] == \
        "download cancelled: the body grew past DOWNLOAD_MAXSIZE (1024 bytes) with no Content-Length"


def test_redirect_times_survive_the_frontier() -> None:
    spider = Spider(name="link")
    data = {"url": "http://a.test/b", "appid": "a", "crawlid": "c", "redirect_times": 3}
    assert request_from_dict(data, spider).meta["redirect_times"] == 3


def test_an_offline_lookup_warns_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    refresher = _refresher([OSError("offline")] * 3 + ["203.0.113.7", OSError("offline")])
    with caplog.at_level(logging.DEBUG, logger="t"):
        for _ in range(5):
            refresher.refresh_once()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "public IP lookup failed; keeping 0.0.0.0"),
        ("DEBUG", "public IP lookup failed; keeping 0.0.0.0"),
        ("DEBUG", "public IP lookup failed; keeping 0.0.0.0"),
        ("INFO", "public IP lookup works again: 203.0.113.7"),
        ("WARNING", "public IP lookup failed; keeping 203.0.113.7")]


def test_an_empty_lookup_url_makes_no_lookup_and_keeps_the_fixed_ip() -> None:
    def fetch(url: str, timeout_s: float) -> str:
        raise AssertionError("no lookup expected")

    refresher = PublicIpRefresher(
        PublicIpLookup("", r"(\d+\.\d+\.\d+\.\d+)", refresh_s=60, timeout_s=1,
                       fallback_ip="198.51.100.4"),
        logger=logging.getLogger("t"), fetch=fetch)
    refresher.start()
    assert refresher.refresh_once() == "198.51.100.4"
    assert refresher._thread is None


# --- re-crawls in the Scrapy engine -----------------------------------------------------------

RECRAWL_SEED = {"url": "http://a.test/p.html", "appid": "app", "crawlid": "c1",
                "spiderid": "link", "curdepth": 0, "priority": 1, "recrawl": {"interval": 60}}


_SPIDERS: list[Any] = []


def _recrawl_spider() -> Any:
    """One ``link`` spider for these tests (a request names its callbacks on one instance)."""
    from scrapy_cluster.crawler.spiders.link import LinkSpider
    if not _SPIDERS:
        _SPIDERS.append(LinkSpider())
    return _SPIDERS[0]


def _popped(state: str | None, **fields: Any) -> Any:
    """A request as the scheduler hands it to Scrapy: rebuilt, then its re-crawl prepared."""
    from scrapy_cluster.crawler import scheduler as scheduler_module
    from scrapy_cluster.frontier.model import LeasedRequest
    stored = {**RECRAWL_SEED, **fields}
    leased = LeasedRequest(request=stored, lease_id="l1", domain="a.test", dispatched_at_ms=0,
                           revisit=state)
    request = request_from_dict(stored, _recrawl_spider(), lease_id="l1")
    scheduler_module._conditional(request, leased)
    return request


def _judged(request: Request, status: int, body: bytes = b"",
            headers: dict[str, str] | None = None) -> Response:
    from types import SimpleNamespace

    from scrapy_cluster.crawler.middlewares import RecrawlMiddleware
    response = HtmlResponse(request.url, status=status, body=body, headers=headers or {},
                            request=request)
    no_engine: Any = SimpleNamespace(engine=None)  # Scrapy's crawler before its engine starts
    return RecrawlMiddleware(no_engine).process_response(request, response)


def _state(body: bytes, etag: str | None = '"v1"') -> str:
    from scrapy_cluster.crawler.common.revisit import RevisitState, digest
    return RevisitState(60, 2, digest(body), 1445412480, etag).encode()


def test_a_refetch_sends_the_validators_and_lets_a_304_through() -> None:
    request = _popped(_state(b"old"), headers={"If-Modified-Since": ["own"]})
    assert (request.headers["If-None-Match"], request.headers["If-Modified-Since"],
            request.meta["handle_httpstatus_list"]) == (b'"v1"', b"own", [304])
    assert b"If-None-Match" not in _popped(None).headers


def test_a_304_gives_the_small_item_and_reads_no_link() -> None:
    request = _popped(_state(b"old"))
    response = _judged(request, 304)
    (item,) = list(_recrawl_spider().parse(response))
    assert (item["status_code"], item["not_modified"], item["recrawl_fetch"], item["links"],
            "body" in item, item["crawlid"]) == (304, True, 3, [], False, "c1")


def test_an_unchanged_200_gives_no_item_when_the_policy_says_none() -> None:
    body = b'<html><a href="/q.html">q</a></html>'
    request = _popped(_state(body), recrawl={"interval": 60, "not_modified": "none"})
    assert list(_recrawl_spider().parse(_judged(request, 200, body))) == []


def test_a_changed_page_item_carries_its_fetch_number() -> None:
    request = _popped(_state(b"old"))
    response = _judged(request, 200, b"<html>new</html>", {"ETag": '"v2"'})
    item = _recrawl_spider().page_item(response, [])
    assert (item["recrawl_fetch"], "not_modified" in item, item["body"]) == \
        (3, False, "<html>new</html>")
    assert response.meta[meta.VERDICT_META_KEY].state.etag == '"v2"'


def test_a_redirect_target_of_a_refetch_loses_the_validators_and_the_304_pass() -> None:
    from scrapy_cluster.crawler import scheduler as scheduler_module
    request = _popped(_state(b"old"))
    data = request_to_dict(request.replace(url="http://a.test/moved"), _recrawl_spider())
    scheduler_module._forget_refetch(data, request.meta[meta.RECRAWL_META_KEY])
    assert ("headers" in data and "If-None-Match" in data["headers"], "meta" in data,
            data["recrawl"]) == (False, False, {"interval": 60})


@pytest.mark.integration
def test_the_scheduler_acks_a_judged_lease_with_its_revisit(
        redis_client: Any, redis_url: str) -> None:
    from types import SimpleNamespace

    from scrapy_cluster.crawler.middlewares import RecrawlMiddleware
    from scrapy_cluster.crawler.scheduler import DistributedScheduler, SchedulerPolicy
    from scrapy_cluster.frontier import DispatchView, Frontier
    from scrapy_cluster.settings import load_settings
    settings = load_settings("crawler", environ={}, overrides={"QUEUE_WINDOW": 0})
    frontier = Frontier.from_settings(settings, redis_client)
    scheduler = DistributedScheduler(frontier, _refresher([]), SchedulerPolicy(
        buffer_size=1, ack_flush_s=1.0, ip_enabled=False), view_type=DispatchView)
    scheduler.spider = _recrawl_spider()
    frontier.enqueue_many([RECRAWL_SEED], dedupe=True)
    request = scheduler.next_request()
    assert request is not None and meta.RECRAWL_META_KEY in request.meta
    crawler: Any = SimpleNamespace(engine=SimpleNamespace(scheduler=scheduler))
    RecrawlMiddleware(crawler).process_response(
        request, HtmlResponse(request.url, status=200, body=b"x", request=request))
    scheduler.outputs_done(request)
    assert scheduler.leases.flush() == 1
    info = frontier.crawl_info("link", "app", "c1")
    assert (info.scheduled, info.in_flight) == (1, 0)
