"""Hypothesis strategies for crawl requests, valid under the crawl schema and broken on
purpose, and for arbitrary JSON: the Rest service's fuzzing (``tests/test_rest_fuzz.py``) sends
them to ``/feed``, the bad-input reliability test (``tests/reliability/test_bad_input.py``) puts
them on the incoming topic.

A drawn crawl request carries the crawlid ``PLACEHOLDER``, replaced by a unique one when sent.
A quarter of them have a body near ``MAX_BODY_BYTES`` (the REST_MAX_BODY_BYTES of the fuzzing).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MAX_BODY_BYTES = 4096
# orjson reads up to 1,024 levels but writes at most 254, so a valid crawl request whose
# ``attrs`` nest deeper is accepted and then cannot be produced (a 500, see
# test_deeply_nested_valid_crawl_request_is_refused in tests/test_rest_fuzz.py). Valid requests
# stay below that here.
DEEPEST_VALID_NESTING = 200
CRAWL_FIELDS = ("url", "appid", "crawlid", "spiderid", "maxdepth", "priority",
                "allowed_domains", "allow_regex", "deny_regex", "deny_extensions", "expires",
                "useragent", "cookie", "attrs", "domain_max_pages")
OTHER_FIELDS = ("uuid", "action", "stats", "domain", "poll_id", "hits", "window", "scale")
PLACEHOLDER = "@crawlid@"  # replaced by a unique crawlid when sent

PLAIN_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=60)
URL_SAFE = st.characters(blacklist_categories=("Cs", "Z", "Cc"), blacklist_characters="/?#@")
PATH_SAFE = st.characters(blacklist_categories=("Cs", "Z", "Cc"))
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | PLAIN_TEXT)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.sampled_from(CRAWL_FIELDS + OTHER_FIELDS) | PLAIN_TEXT, children,
                      max_size=5),
    max_leaves=20)


def nested(depth: int, leaf: Any, as_objects: bool) -> Any:
    """``leaf`` inside ``depth`` objects (``{"n": ...}``) or lists."""
    value = leaf
    for _ in range(depth):
        value = {"n": value} if as_objects else [value]
    return value


@st.composite
def urls(draw: st.DrawFn, filler: int = 0) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTps"]))
    host = draw(st.text(URL_SAFE, min_size=1, max_size=30))
    path = draw(st.text(PATH_SAFE, max_size=40))
    return f"{scheme}://{host}/{path}{'p' * filler}"


@st.composite
def crawl_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A crawl request valid under the crawl schema (its crawlid is replaced when sent)."""
    near_limit = draw(st.integers(0, 3)) == 0  # a quarter of them: bodies around the limit
    filler = MAX_BODY_BYTES - 200 + draw(st.integers(-100, 150)) if near_limit else 0
    request: dict[str, Any] = {"url": draw(urls(filler)),
                               "appid": draw(st.text(PATH_SAFE, min_size=3, max_size=40)),
                               "crawlid": PLACEHOLDER}
    optional: dict[str, st.SearchStrategy[Any]] = {
        "spiderid": st.text(min_size=1, max_size=100),
        "maxdepth": st.integers(0, 3),
        "priority": st.integers(1, 100),
        "allowed_domains": st.lists(PLAIN_TEXT, max_size=4, unique=True),
        "allow_regex": st.lists(PLAIN_TEXT, max_size=3, unique=True),
        "deny_regex": st.lists(PLAIN_TEXT, max_size=3, unique=True),
        "deny_extensions": st.lists(PLAIN_TEXT, max_size=3, unique=True),
        "expires": st.integers(0, 2 ** 63 - 1),
        "useragent": st.text(min_size=3, max_size=300),
        "cookie": st.text(min_size=3, max_size=300),
        "attrs": st.dictionaries(PLAIN_TEXT, JSON_VALUES, max_size=4)
        | st.integers(1, DEEPEST_VALID_NESTING).map(lambda depth: {"deep": nested(depth, 1,
                                                                                  depth % 2 == 0)}),
        "domain_max_pages": st.integers(0, 2000),
    }
    for name in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=6)):
        request[name] = draw(optional[name])
    return request


WRONG_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "url": st.sampled_from(["", "ftp://a.com/", "http://", "http://a b.com/", "a.com",
                            "http://a.com/ x", 7, None, ["http://a.com/"]]),
    "appid": st.sampled_from(["", "ab", "x" * 41, 123, None, {"a": 1}]),
    "crawlid": st.sampled_from(["", "x" * 41, 5, None, True]),
    "spiderid": st.sampled_from(["", "s" * 101, 1, []]),
    "maxdepth": st.sampled_from([-1, 4, 1.5, "1", None, True]),
    "priority": st.sampled_from([0, 101, -5, 2.5, "7", None, False]),
    "allowed_domains": st.sampled_from(["a.com", ["a.com", "a.com"], [1], {"a": 1}]),
    "expires": st.sampled_from([-1, "soon", 1.5, None]),
    "useragent": st.sampled_from(["ab", "u" * 1001, 3]),
    "attrs": st.sampled_from([[], "x", 1, None]),
    "domain_max_pages": st.sampled_from([-1, 2001, "10"]),
}


@st.composite
def broken_crawl_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid crawl request broken in one way no schema accepts."""
    request = draw(crawl_requests())
    how = draw(st.sampled_from(["wrong", "unknown", "missing"]))
    if how == "wrong":
        name = draw(st.sampled_from(sorted(WRONG_VALUES)))
        request[name] = draw(WRONG_VALUES[name])
    elif how == "unknown":
        name = draw(PLAIN_TEXT.filter(lambda text: text not in CRAWL_FIELDS))
        request[name] = draw(JSON_SCALARS)
    else:
        del request[draw(st.sampled_from(["url", "appid", "crawlid"]))]
    return request
