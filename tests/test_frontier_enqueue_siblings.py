"""``FrontierCalls.enqueue_batch`` shares the work of sibling requests (the links of one page:
the same fields, the very same values but ``url``); its output must stay exactly what the
request-by-request path gives, which is kept here verbatim as the reference (no Redis)."""

from __future__ import annotations

import copy
import time
from typing import Any
from urllib.parse import urljoin

from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.link import Link

from scrapy_cluster import keys
from scrapy_cluster.crawler.fast.spiders import LinkSpider
from scrapy_cluster.errors import InvalidRequestError
from scrapy_cluster.frontier import codec
from scrapy_cluster.frontier.calls import EnqueueBatch, FrontierCalls, FrontierPolicy, _curdepth
from scrapy_cluster.frontier.seen import SeenCache
from scrapy_cluster.sitegen.relative_site import RelativeSite, RelativeSiteConfig

NOW_S = 1_000.0
NEW = FrontierCalls(FrontierPolicy(), codec.DomainExtractor())
OLD = FrontierCalls(FrontierPolicy(), codec.DomainExtractor())
"""The two paths' calls, each with its own extractor (they remember the last origin)."""


def reference_request_args(calls: FrontierCalls, request: dict[str, Any],
                           dedupe: bool) -> list[Any]:
    """``FrontierCalls._request_args`` before siblings shared anything."""
    codec.validate(request)
    deduped = dedupe and not request.get("dont_filter")
    try:
        domain = calls.extract_domain(request["url"])
        fingerprint = codec.fingerprint(request) if deduped else b""
    except ValueError as exc:
        raise InvalidRequestError(f"url cannot be parsed: {exc}") from exc
    bucket, record, depth = b"", b"", 0
    if deduped:
        bucket, record = codec.dupe_slot(fingerprint)
        curdepth = int(request.get("curdepth") or 0)
        at_limit = curdepth >= int(request.get("maxdepth") or 0)
        depth = 2 * min(curdepth, codec.MAX_DEPTH_RECORDED) + at_limit
    return [request["spiderid"], domain, int(request.get("priority", 1)), request["crawlid"],
            request["appid"], bucket, record, depth, codec.encode_item(request)]


def reference_enqueue_batch(calls: FrontierCalls, requests: list[Any], *, dedupe: bool,
                            seen: SeenCache | None) -> EnqueueBatch:
    """``FrontierCalls.enqueue_batch`` before siblings shared anything: request by request."""
    policy = calls.policy
    args: list[Any] = [calls._templates, "", "1" if policy.keep_blacklisted else "0",
                       policy.dupefilter_ttl_ms, policy.view_timeout_ms, "1"]
    batch = EnqueueBatch(([keys.domain_blacklist(), keys.frontier_spiders(),
                           keys.crawls_idle()], args))
    cached = seen is not None and dedupe
    for index, request in enumerate(requests):
        key = SeenCache.key(request) if cached else None
        if key is not None:
            depth = _curdepth(request)
            if seen.covers(key, depth):  # type: ignore[union-attr]
                crawl = (str(request["spiderid"]), str(request["crawlid"]))
                batch.skipped[crawl] = batch.skipped.get(crawl, 0) + 1
                continue
        try:
            args.extend(reference_request_args(calls, request, dedupe))
        except InvalidRequestError as exc:
            batch.invalid.append((index, str(exc)))
            continue
        if key is not None:
            batch.pending.append((key, min(depth, codec.MAX_DEPTH_RECORDED)))
    return batch


def typed(values: list[Any]) -> list[tuple[type, Any]]:
    """Equal and of the same types (1, 1.0 and True are equal; their encodings are not)."""
    return [(type(value), value) for value in values]


def seen_cache(learned: list[tuple[str, int]]) -> SeenCache:
    seen = SeenCache(60, 1_000, clock=lambda: NOW_S)
    seen.learn(learned)
    return seen


def outcome(run: Any) -> tuple[str, Any]:
    try:
        batch = run()
    except Exception as exc:  # the two paths must fail alike too
        return "raised", (type(exc), str(exc))
    return "batch", (batch.call[0], typed(batch.call[1]), batch.invalid, batch.pending,
                     batch.skipped)


def assert_same_as_reference(requests: list[Any], *, dedupe: bool,
                             learned: list[tuple[str, int]] | None) -> None:
    """The new path and the reference, each with its own seen cache."""
    new_seen = None if learned is None else seen_cache(learned)
    old_seen = None if learned is None else seen_cache(learned)
    new, old = NEW, OLD
    got = outcome(lambda: new.enqueue_batch(requests, dedupe=dedupe, now_ms=None,
                                            seen=new_seen))
    want = outcome(lambda: reference_enqueue_batch(old, requests, dedupe=dedupe,
                                                   seen=old_seen))
    assert got == want
    if new_seen is not None and old_seen is not None:
        assert (new_seen.hits, new_seen.misses) == (old_seen.hits, old_seen.misses)


class Url(str):
    """A str subclass: valid, but not the exact ``str`` the shared path takes."""


FOUR = 4
URLS = ["http://a.example/x", "http://a.example/x/../y", "https://www.b.co.uk/caf%C3%A9/",
        "http://a.example/a%20b.html", "http://a.example/?page=2&sort=asc",
        "http://a.example/t/#top", "HTTP://A.example:80/x"]
ODD_URLS = ["http://[::1/", "http://h:port/", "no host", "", "http://a.example/\ud800", None, 5,
            Url("http://a.example/sub")]
VALUES: dict[str, tuple[list[Any], list[Any]]] = {
    # name: (usual values, odd ones: invalid, or equal to a usual one but of another type)
    "appid": (["app"], ["", 7]),
    "crawlid": (["c1"], ["c\x01", None]),
    "spiderid": (["link", "None"], ["a:b"]),
    "priority": ([1, 90, FOUR], [True, 1.0, 20_000, "3"]),
    "curdepth": ([0, FOUR], [300, True, -1]),
    "maxdepth": ([0, FOUR, 50], [1.0, None, "x"]),
    "expires": ([0, 12], [0.0]),
    "method": ([None, "GET"], ["POST", "get"]),
    "dont_filter": ([False], [True, 0]),
    "body": ([None], ["", "data"]),
    "meta": ([{"a": 1}], [{"a": 1.0}, {"s": {1, 2}}]),
    "custom": (["kept", FOUR], [[1, "x"]]),
    "other": (["kept"], [FOUR]),
}
OPTIONAL = [name for name in VALUES if name not in ("appid", "crawlid", "spiderid")]


def usually(usual: list[Any], odd: list[Any]) -> st.SearchStrategy[Any]:
    """One of ``usual`` nine times in ten: most runs of siblings must be valid."""
    return st.integers(0, 9).flatmap(
        lambda n: st.sampled_from(usual if n or not odd else odd))


@st.composite
def bases(draw: st.DrawFn) -> dict[str, Any]:
    """A page's shared fields: the identity fields, then some others in any order."""
    names = ["appid", "crawlid", "spiderid"] + draw(
        st.lists(st.sampled_from(OPTIONAL), unique=True, max_size=8))
    names = draw(st.permutations(names))
    return {name: draw(usually(*VALUES[name])) for name in names}


def fresh_equal(value: Any) -> Any:
    """An equal value that is another object where CPython makes one (not a small int, a
    one-character str, True or None: those are the same object, a sibling still)."""
    if type(value) is str:
        return value[:1] + value[1:]
    if type(value) is int:
        return int(str(value))
    if type(value) is float:
        return float(repr(value))
    return copy.deepcopy(value)


def other_type(value: Any) -> Any:
    """An equal value of another type where there is one (1, 1.0 and True), else True."""
    if value is True:
        return 1
    if type(value) is int:
        return float(value)
    if type(value) is float:
        return int(value)
    return True


def swapped(draw: st.DrawFn, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with two keys in the other order, two whose values are the same object
    when there are (``maxdepth`` and ``curdepth`` 4): each value is where it was."""
    items = list(request.items())
    pairs = [(i, j) for i in range(len(items)) for j in range(i + 1, len(items))
             if items[i][1] is items[j][1]] or [(0, len(items) - 1)]
    i, j = draw(st.sampled_from(pairs))
    items[i], items[j] = items[j], items[i]
    return dict(items)


NEAR = ["equal value", "other type", "swapped", "reordered", "extra key", "missing key",
        "no url", "url first", "not a dict", "same url object"]


def near_sibling(draw: st.DrawFn, kind: str, request: dict[str, Any],
                 before: list[Any]) -> Any:
    """``request`` made a near-sibling of its page's links (same fields but one, ...)."""
    name = draw(st.sampled_from(sorted(request)))
    if kind == "equal value":
        request[name] = fresh_equal(request[name])
    elif kind == "other type":
        request[name] = other_type(request[name])
    elif kind == "swapped":
        return swapped(draw, request)
    elif kind == "reordered":
        return dict(reversed(list(request.items())))
    elif kind == "extra key":
        extra = draw(st.sampled_from(OPTIONAL))
        request[extra] = draw(usually(*VALUES[extra]))
    elif kind in ("missing key", "no url"):
        del request["url" if kind == "no url" else name]
    elif kind == "url first":
        return {"url": request.pop("url"), **request}
    elif kind == "not a dict":
        return [request]
    elif before and isinstance(before[-1], dict):  # the same url object as the one before
        request["url"] = before[-1].get("url")
    return request


@st.composite
def batches(draw: st.DrawFn) -> list[Any]:
    """Requests of one or two pages, mostly siblings, with near-siblings in between."""
    pages = [draw(bases()) for _ in range(draw(st.integers(1, 2)))]
    requests: list[Any] = []
    for _ in range(draw(st.integers(1, 12))):
        base = draw(st.sampled_from(pages))
        request = {**base, "url": draw(usually(URLS, ODD_URLS))}
        if draw(st.integers(0, 3)) == 0:
            request = near_sibling(draw, draw(st.sampled_from(NEAR)), request, requests)
        requests.append(request)
    return requests


def learned_for(requests: list[Any], depth: int) -> list[tuple[str, int]]:
    keys = (SeenCache.key(request) for request in requests if isinstance(request, dict))
    return [(key, depth) for key in keys if key is not None][::2]


@settings(max_examples=1000, deadline=None)
@given(batches(), st.booleans(), st.sampled_from([None, 0, 4, 254]))
def test_sibling_sharing_gives_the_reference_output(requests: list[Any], dedupe: bool,
                                                    learned_depth: int | None) -> None:
    learned = None if learned_depth is None else learned_for(requests, learned_depth)
    assert_same_as_reference(requests, dedupe=dedupe, learned=learned)


def relative_site_page() -> list[dict[str, Any]]:
    """The link requests of one directory page of the relative-link site, as the fast crawler
    builds them: siblings of one base."""
    page = "http://127.0.0.2:8080/t/3/7/12/"
    seed = {"url": page, "appid": "a", "crawlid": "c" * 32, "spiderid": "link",
            "maxdepth": 50, "priority": 100, "curdepth": 3}
    stored = codec.decode_item(codec.encode_item(seed), spiderid="link", crawlid="c" * 32,
                               priority=100)
    hrefs = RelativeSite(RelativeSiteConfig(), 8080).hrefs("127.0.0.2")
    links = [Link(urljoin(page, href)) for href in hrefs
             if not href.startswith(("javascript:", "mailto:"))]
    return LinkSpider().follow(stored, url=page, response_url=page, response_headers=[],
                               links=links, dropped=0, now_s=time.time()).requests


def test_a_relative_site_page_gives_the_reference_output() -> None:
    requests = relative_site_page()
    assert len(requests) == 36
    navigation = [r for r in requests if "/t/3/7/12/" not in r["url"]]
    for learned in (None, [], learned_for(navigation, 4), learned_for(requests, 4)):
        assert_same_as_reference(requests, dedupe=True, learned=learned)
    assert_same_as_reference(requests, dedupe=False, learned=None)


def test_a_value_changed_between_two_calls_is_seen() -> None:
    """Nothing is kept across calls: a shared ``meta`` changed in between is encoded anew."""
    meta: dict[str, Any] = {"k": 1}
    base = {"appid": "a", "crawlid": "c", "spiderid": "link", "meta": meta}
    requests = [{**base, "url": f"http://a.example/{i}"} for i in range(3)]
    calls = FrontierCalls(FrontierPolicy(), codec.DomainExtractor())
    first = calls.enqueue_batch(requests, dedupe=True, now_ms=None).call[1][-1]
    meta["k"] = 2
    second = calls.enqueue_batch(requests, dedupe=True, now_ms=None).call[1][-1]
    assert first != second == codec.encode_item(requests[-1])
