"""Unit tests of request encoding, fingerprints and domain extraction (no Redis)."""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_cluster.errors import InvalidRequestError
from scrapy_cluster.frontier import codec

EXTRACT = codec.DomainExtractor()


def test_registered_domain_groups_subdomains() -> None:
    assert EXTRACT("http://news.bbc.co.uk/a") == "bbc.co.uk"
    assert EXTRACT("https://www.bbc.co.uk:8443/b") == "bbc.co.uk"


def test_ip_address_is_its_own_domain() -> None:
    assert EXTRACT("http://127.0.0.5:8080/x") == "127.0.0.5"


def test_host_without_public_suffix_is_its_own_domain() -> None:
    assert EXTRACT("http://localhost/x") == "localhost"


def test_url_without_host_is_invalid() -> None:
    with pytest.raises(InvalidRequestError, match="no host"):
        EXTRACT("not a url")


def test_round_trip_restores_request_with_defaults() -> None:
    request = {"url": "http://a.com/", "appid": "app", "crawlid": "c", "spiderid": "link",
               "priority": 3, "maxdepth": 2, "attrs": {"k": [1]}, "headers": {"A": ["b"]},
               "meta": {"x": 1}, "custom": "kept", "useragent": None}
    data = codec.encode_item(request)
    decoded = codec.decode_item(data, spiderid="link", crawlid="c", priority=3)
    expected = {**codec.DEFAULTS, **{k: v for k, v in request.items() if v is not None}}
    assert decoded == expected


def test_encoding_omits_implied_and_default_fields() -> None:
    request = {"url": "http://a.com/", "appid": "app", "crawlid": "c", "spiderid": "link",
               "priority": 1, "curdepth": 0, "expires": 0, "method": "GET"}
    assert codec.encode_item(request) == b'{"u":"http://a.com/","a":"app"}'


def test_fingerprint_ignores_query_argument_order() -> None:
    first = codec.fingerprint({"url": "http://a.com/p?b=2&a=1"})
    second = codec.fingerprint({"url": "http://a.com/p?a=1&b=2"})
    assert first == second and len(first) == 16


def test_fingerprint_differs_by_method_and_body() -> None:
    get = codec.fingerprint({"url": "http://a.com/"})
    post = codec.fingerprint({"url": "http://a.com/", "method": "POST", "body": "x"})
    post_other = codec.fingerprint({"url": "http://a.com/", "method": "POST", "body": "y"})
    assert len({get, post, post_other}) == 3


def test_dupe_slot_is_three_hex_bucket_and_seven_fingerprint_bytes() -> None:
    bucket, record = codec.dupe_slot(bytes([0x12, 0x34, *range(14)]))
    assert bucket == b"123" and record == bytes(range(7))


def test_an_item_starts_with_its_url() -> None:
    item = codec.encode_item({"appid": "app", "crawlid": "c", "spiderid": "link",
                              "url": "http://a.com/p?q=\"1\""})
    assert item.startswith(b'{"u":"http://a.com/p?q=\\"1\\"","a":"app"')


@settings(max_examples=500, deadline=None)
@given(st.text(), st.dictionaries(
    st.sampled_from(["appid", "maxdepth", "curdepth", "priority", "meta", "custom", "expires",
                     "method", "spiderid"]),
    st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=4),
              st.booleans(), st.dictionaries(st.text(max_size=3), st.integers()))),
       st.text())
def test_an_item_is_its_url_spliced_into_its_tail(url: str, fields: dict[str, object],
                                                  other: str) -> None:
    """``item_tail`` of one request's item and ``item_with_tail`` of another url give the
    ``encode_item`` of that url with the same other fields (an empty tail included); a url
    orjson refuses raises, where ``encode_item`` says it is invalid."""
    request: dict[str, object] = {"url": url, **fields}
    try:
        tail = codec.item_tail(codec.encode_item(request), url)
    except InvalidRequestError:
        return  # a lone surrogate in the url or a field
    try:
        spliced = codec.item_with_tail(other, tail)
    except orjson.JSONEncodeError:
        with pytest.raises(InvalidRequestError):
            codec.encode_item({**request, "url": other})
        return
    assert spliced == codec.encode_item({**request, "url": other})


@given(st.text(min_size=1), st.sampled_from([None, "GET", "POST"]),
       st.sampled_from([None, "", "x"]))
def test_a_plain_get_fingerprint_is_the_fingerprint(url: str, method: str | None,
                                                    body: str | None) -> None:
    request = {"url": f"http://a.com/{url}", "method": method, "body": body}
    assert codec.is_plain_get(request) == (method in (None, "GET") and not body)
    if codec.is_plain_get(request):
        assert codec.plain_get_fingerprint(request["url"]) == codec.fingerprint(request)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("url", "", "'url' must be a non-empty string"),
    ("priority", "high", "'priority' must be an integer"),
    ("priority", True, "'priority' must be an integer"),
    ("priority", 20000, "within"),
    ("curdepth", -1, "'curdepth' must be a non-negative integer"),
    ("spiderid", "a:b", "must not contain ':'"),
])
def test_invalid_request_says_what_is_wrong(field: str, value: object, message: str) -> None:
    request = {"url": "http://a.com/", "appid": "app", "crawlid": "c", "spiderid": "link"}
    request[field] = value
    with pytest.raises(InvalidRequestError, match=message):
        codec.validate(request)


# --- fast paths against their reference ------------------------------------------------------

def _reference_dupe_slot(digest: bytes) -> tuple[bytes, bytes]:
    bucket = int.from_bytes(digest[:2], "big") >> (16 - codec.DUPE_BUCKET_BITS)
    return f"{bucket:03x}".encode(), digest[2:9]


@given(st.binary(min_size=16, max_size=16))
def test_dupe_slot_equals_its_definition(digest: bytes) -> None:
    assert codec.dupe_slot(digest) == _reference_dupe_slot(digest)


def _validation(request: object) -> str | None:
    """What ``codec._validate`` (the full checks) says of ``request``: None when valid."""
    try:
        codec._validate(request)
    except InvalidRequestError as exc:
        return str(exc)
    return None


def _memo_validation(request: object) -> str | None:
    try:
        codec.validate(request)
    except InvalidRequestError as exc:
        return str(exc)
    return None


_ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-20_000, 20_000), st.floats(),
                        st.sampled_from(["", "a", "link", "c:1", "x\x00", "\n", "1"]),
                        st.lists(st.integers(), max_size=1))


@settings(max_examples=2000, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["url", "appid", "crawlid", "spiderid",
                                               "priority", "curdepth"]), _ODD_VALUES),
       same_ids=st.booleans())
def test_validate_with_its_memo_answers_as_the_full_checks(fields: dict[str, object],
                                                           same_ids: bool) -> None:
    """A request whose crawl identity was validated before (the memo is warm) is judged as
    the full checks judge it, whatever its other fields."""
    codec.validate({"url": "http://a.com/", "appid": "app", "crawlid": "c", "spiderid": "link"})
    request = {"url": "http://a.com/x", "appid": "app", "crawlid": "c", "spiderid": "link",
               **({} if same_ids else fields), **{key: value for key, value in fields.items()
                                                   if key in ("url", "priority", "curdepth")}}
    assert _memo_validation(request) == _validation(request)


def test_validate_memo_is_bounded() -> None:
    for index in range(codec.VALID_IDS_MEMO + 10):
        codec.validate({"url": "http://a.com/", "appid": "a", "crawlid": f"c{index}",
                        "spiderid": "link"})
    assert len(codec._valid_ids) <= codec.VALID_IDS_MEMO


_URLS = st.one_of(
    st.sampled_from(["http://a.com", "http://a.com/x", "http://a.com:80/x", "http://a.com:8/x",
                     "http://a.com.evil/x", "http://a.coma/", "http://A.com/?q", "http://a.com#f",
                     "https://a.com/", "http://news.bbc.co.uk/", "http://bbc.co.uk:1/",
                     "ftp://a.com/", "http://a.com@b.com/", "http://[::1]/", "/relative",
                     "http://a.com\\x", "http://a.com:/", "http://a.com:x/", ""]),
    st.builds("{}{}".format, st.sampled_from(["http://a.com", "http://b.a.com:80", "HTTP://A.COM"]),
              st.text(alphabet="/?#:@.a1-\\ é", max_size=6)))


def _reference_domain(url: str) -> str:
    """``DomainExtractor``'s answer without its caches and memo."""
    host = urlsplit(url).hostname
    if not host:
        raise InvalidRequestError(f"url has no host: {url!r}")
    return EXTRACT._domain_of_host(host)


@settings(max_examples=1000, deadline=None)
@given(urls=st.lists(_URLS, min_size=1, max_size=6))
def test_domain_extractor_with_its_last_origin_memo_equals_the_reference(urls: list[str]) -> None:
    """Any sequence of URLs: the memo of the last origin never answers for another host."""
    EXTRACT._last = ("", "")
    for url in urls:
        outcomes = []
        for function in (EXTRACT, _reference_domain):
            try:
                outcomes.append(function(url))
            except (InvalidRequestError, ValueError) as exc:
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1], url
