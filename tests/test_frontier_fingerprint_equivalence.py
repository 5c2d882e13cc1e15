"""The frontier's fast URL paths give exactly what w3lib / urllib / tldextract give.

A deterministic corpus of tricky URLs (every ASCII and some non-ASCII
characters in every position, odd hosts and ports, percent-escapes, dot
segments, queries, fragments) plus random mixes of those pieces is run
through the fast functions and through the libraries they stand in for; any
difference, including a different exception, fails.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import tldextract
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from w3lib.url import canonicalize_url

from scrapy_cluster.errors import InvalidRequestError
from scrapy_cluster.frontier import codec
from scrapy_cluster.frontier.urls import canonical_url, plain_canonical_url, url_host

SCHEMES = ["http", "https", "HTTP", "HtTpS", "ftp", "mailto", "file", "httpx", "h", ""]
SEPARATORS = ["://", ":/", ":", "//", ":///"]
USERINFO = ["", "user@", "User:Pa%41ss@", "u:@", "@", "a b@", "ü@"]
HOSTS = ["example.com", "WWW.Example.COM", "news.bbc.co.uk", "a.b.c.d.example.org",
         "localhost", "127.0.0.1", "10.0.0.1.", "[::1]", "[2001:DB8::0:1]", "[::ffff:1.2.3.4]",
         "bücher.de", "xn--bcher-kva.de", "xn--zz.de", "EXAMPLE.com.", "a..b", ".example.com",
         "-a-.com", "a_b.com", "x" * 64 + ".com", "ＥＸＡＭＰＬＥ.com", "exa%41mple.com",
         "exa mple.com", "exa\tmple.com", "", "1.2.3", "0x7f.1", "blogspot.com",
         "foo.blogspot.com", "s3.amazonaws.com", "co.uk"]
PORTS = ["", ":", ":80", ":080", ":443", ":8080", ":0", ":65535", ":65536", ":99999", ":abc",
         ":-1", ": 80"]
PATHS = ["", "/", "//", "/a/b/c", "/A/B.html", "/a//b", "/a/./b", "/a/../b", "/..", "/.",
         "/.hidden", "/a.", "/a/.b/c", "/%2e%2E/x", "/a%2Fb", "/a%2fb", "/%41%42", "/%zz",
         "/%", "/a;b", "/a;b/c", "/a;b=1;c", "/~user/", "/a+b", "/a b", "/a\tb", "/a\nb",
         "/é", "/☃", "/\u3000", "/a|b", "/[x]", "/a\\b", "\\a", "/a^b", "/a`b", "/a{b}",
         "/a\"b", "/a<b>", "/!$&'()*+,=:@", "/-._~", "/\x00", "/\x7f", "/a" * 40]
SUFFIXES = ["", "?", "?a=1", "?b=2&a=1", "?a", "?a=&b", "?a=1&a=0", "?q=a+b", "?q=a%20b",
            "?q=é", "?q=%zz", "#", "#frag", "?a=1#f", "#a?b", "?a=1;b=2", "?'",
            # the shapes the query and fragment fast paths take, and their near misses
            "?page=2", "?page=2&sort=asc", "?sort=asc&page=2", "?a-b=1&a=1", "?a=1&a-b=1",
            "?a=2&a=10", "?A=1&a=1", "?=1", "?=", "?a=", "?a==", "?a=b=c", "?a=1&&b=2",
            "?a=1&", "?&a=1", "?a=1&b", "?q=caf%C3%A9", "?q=caf%c3%a9", "?q=%41", "?q=%2B",
            "?q=a+b&p=1", "?q=%C3%A9&p=1", "?q=%20", "?q=~._-", "?a=1#", "?#x", "#top",
            "#top?x=1", "#a#b", "#a b", "#a\\b", "#é", "#%zz", "#\t", "?page=2#comments"]
SPECIAL_CHARACTERS = ([chr(code) for code in range(0, 256)]
                      + ["\u2024", "\ufe52", "\uff0e", "\u3002", "☃", "\U0001f600", "\ud7ff"])


def _tricky_urls() -> list[str]:
    urls: list[str] = []
    for char in SPECIAL_CHARACTERS:
        urls += [f"http://example.com/a{char}b", f"http://exa{char}mple.com/",
                 f"http://example.com:{char}/", f"http{char}://example.com/",
                 f"http://example.com/{char}", f"{char}http://example.com/a",
                 f"http://example.com/a{char}"]
    rng = random.Random(20240521)
    for _ in range(8_000):
        urls.append("".join((rng.choice(SCHEMES), rng.choice(SEPARATORS), rng.choice(USERINFO),
                             rng.choice(HOSTS), rng.choice(PORTS), _random_path(rng),
                             rng.choice(SUFFIXES))))
    for _ in range(12_000):  # near the plain shape: one odd piece at most, often none
        pieces = ["http" if rng.random() < 0.5 else rng.choice(SCHEMES[:4]), "://", "",
                  rng.choice(HOSTS[:10]), rng.choice([""] * 3 + PORTS[:6]), _random_path(rng), ""]
        odd = rng.randrange(len(pieces) * 3)
        if odd < len(pieces):
            pieces[odd] = rng.choice([SCHEMES, SEPARATORS, USERINFO, HOSTS, PORTS, PATHS,
                                      SUFFIXES][odd])
        urls.append("".join(pieces))
    return urls


def _random_path(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(PATHS)
    plain = "abcXYZ019-._~!$&'()*+,=:@/"
    if rng.random() < 0.2:  # percent-escapes, kept or re-written by w3lib
        plain += "%" * 4 + "C3A9202F2e2E41c3"
    pieces = [rng.choice(plain) if rng.random() < 0.97 else rng.choice(SPECIAL_CHARACTERS)
              for _ in range(rng.randint(0, 30))]
    return "/" + "".join(pieces)


CORPUS = _tricky_urls()


def _outcome(function: Callable[[str], Any], url: str) -> Any:
    try:
        return function(url)
    except Exception as exc:  # the exception itself is part of the behaviour
        return (type(exc), str(exc))


def _reference_fingerprint(request: dict[str, Any]) -> bytes:
    """The fingerprint's definition, written the slow and obvious way."""
    method = str(request.get("method") or "GET").upper().encode()
    url = canonicalize_url(request["url"]).encode()
    body = request.get("body_b64") or request.get("body") or ""
    digest = hashlib.blake2b(digest_size=16)
    for part in (method, url, body.encode() if isinstance(body, str) else bytes(body)):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


def test_corpus_takes_the_fast_path_for_a_large_share_of_urls() -> None:
    plain = [url for url in CORPUS if _outcome(plain_canonical_url, url) is not None]
    assert len(plain) > 3_000


def test_canonical_url_equals_w3lib_canonicalize_url_on_every_corpus_url() -> None:
    differences = [url for url in CORPUS
                   if _outcome(canonical_url, url) != _outcome(canonicalize_url, url)]
    assert differences == []


def test_plain_canonical_url_is_none_or_equal_to_w3lib() -> None:
    differences = [url for url in CORPUS if plain_canonical_url(url) is not None
                   and plain_canonical_url(url) != canonicalize_url(url)]
    assert differences == []


def test_url_host_equals_urlsplit_hostname_on_every_corpus_url() -> None:
    differences = [url for url in CORPUS if _outcome(url_host, url)
                   != _outcome(lambda text: urlsplit(text).hostname, url)]
    assert differences == []


def test_fingerprint_equals_reference_for_every_corpus_url_and_request_shape() -> None:
    rng = random.Random(7)
    differences = []
    for url in CORPUS:
        request: dict[str, Any] = {"url": url}
        if rng.random() < 0.3:
            request["method"] = rng.choice(["get", "POST", "GET", "Put", None, ""])
        if rng.random() < 0.3:
            request["body"] = rng.choice(["", "a=1", "é", b"\x00\xff"])
        if rng.random() < 0.1:
            request["body_b64"] = "aGk="
        if _outcome(codec.fingerprint, request) != _outcome(_reference_fingerprint, request):
            differences.append(request)
    assert differences == []


def test_fingerprint_of_a_plain_get_is_pinned() -> None:
    digest = codec.fingerprint({"url": "HTTP://Example.COM:080/a/b"})
    assert digest.hex() == _reference_fingerprint({"url": "http://example.com:80/a/b"}).hex()
    assert digest == codec.fingerprint({"url": "http://example.com:80/a/b", "method": "get"})


def test_domain_extractor_equals_uncached_tldextract_on_every_corpus_url() -> None:
    extractor = codec.DomainExtractor(cache_size=64)
    reference = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    def uncached(url: str) -> str:
        host = urlsplit(url).hostname
        if not host:
            raise InvalidRequestError(f"url has no host: {url!r}")
        return reference.extract_str(host).top_domain_under_public_suffix or host

    differences = [url for url in CORPUS if _outcome(extractor, url) != _outcome(uncached, url)]
    assert differences == []


@pytest.mark.parametrize("url", ["http://example.com", "HTTP://EXAMPLE.COM:", "https://a.b:443"])
def test_url_without_path_gets_the_root_path(url: str) -> None:
    assert canonical_url(url) == canonicalize_url(url)
    assert canonical_url(url).endswith("/")


def _escape_kept(template: str, byte: int) -> bool:
    url = template.format(f"%{byte:02X}")
    return canonicalize_url(url) == url


@pytest.mark.parametrize("template", ["http://a.com/x{}y", "http://a.com/?k=x{}y",
                                      "http://a.com/?x{}y=1"])
def test_fast_path_keeps_exactly_the_escapes_w3lib_keeps(template: str) -> None:
    """Every upper-case escape of every byte, in a path, a query value and a query key: the
    fast path answers for it exactly when w3lib writes it back unchanged."""
    wrong = [byte for byte in range(256)
             if (plain_canonical_url(template.format(f"%{byte:02X}")) is not None)
             != _escape_kept(template, byte)]
    assert wrong == []


def test_relative_site_links_take_the_fast_path() -> None:
    """The link forms of ``sitegen/relative_site.py`` never reach w3lib."""
    page = "http://127.0.0.2:8080/t/3/7/12/"
    for url in [page, f"{page}?page=2", f"{page}?page=2&sort=asc", f"{page}caf%C3%A9/",
                f"{page}a%20b.html", f"{page}#top", f"{page}item-1.html",
                "http://127.0.0.2:8080/products/?sort=price",
                "http://127.0.0.2:8080/help/faq.html#shipping"]:
        assert plain_canonical_url(url) == canonicalize_url(url), url


_URL_ALPHABET = st.sampled_from(list("?&=#%+;/.~-_:@!$'()*,aAbBzZ09 é\\\t") + [
    "%20", "%C3", "%a9", "%2F", "%3D", "%26", "%25", "%41", "%2e", "%2E", "%7E", "%FF", "%0"])


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(origin=st.sampled_from(["http://a.com", "HTTPS://Example.COM:443", "http://127.0.0.2:8080",
                               "http://a.com:080", "https://x-y.b.co.uk"]),
       tail=st.lists(_URL_ALPHABET, max_size=24).map("".join))
@example(origin="http://a.com", tail="/?a=1&a-b=1")
@example(origin="http://a.com", tail="/x?b=&a=#f")
@example(origin="http://a.com", tail="/caf%C3%A9/?q=%C3%A9#%")
def test_canonical_url_equals_w3lib_on_generated_query_and_fragment_forms(
        origin: str, tail: str) -> None:
    for url in (origin + tail, f"{origin}/{tail}", f"{origin}/p?{tail}", f"{origin}/p#{tail}"):
        assert _outcome(canonical_url, url) == _outcome(canonicalize_url, url), url
