"""Unit tests of request encoding, fingerprints and domain extraction (no Redis)."""

from __future__ import annotations

import pytest

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
