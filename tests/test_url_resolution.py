"""An href resolves to the same URL, string for string and None for None, whether
``PlainJoin`` answers for it or the formula Scrapy's ``LinkExtractor`` applies
(``urljoin(page_url, safe_url_string(urljoin(base_url, href), encoding))``), kept here as it
was before ``PlainJoin``: the hrefs of a hand-written table, of a seeded random sample and of
hypothesis, on pages with plain and with awkward base URLs, page URLs and encodings."""

from __future__ import annotations

import random
import re
from urllib.parse import urljoin

import lxml.html
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

from scrapy_cluster.crawler.common.link_rules import _OTHER_SCHEME, _absolute_url, links_in_tree
from scrapy_cluster.crawler.common.url_join import PlainJoin, is_safe_url

_FROZEN_PLAIN_ABSOLUTE_URL = re.compile(
    r"https?://[a-z0-9\-._~:@!$&'()*+,;=]+(?:/[A-Za-z0-9\-._~:/?#@!$&'()*+,;=]*[A-Za-z0-9\-._~/])?\Z")


def reference(href: str, base_url: str, page_url: str, encoding: str) -> str | None:
    """``_absolute_url`` as it was before ``PlainJoin``."""
    href = strip_html5_whitespace(href)
    if _FROZEN_PLAIN_ABSOLUTE_URL.match(href):
        return href
    try:
        return urljoin(page_url, safe_url_string(urljoin(base_url, href), encoding=encoding))
    except ValueError:
        return None


def resolved(href: str, base_url: str, page_url: str, encoding: str) -> str | None:
    """What ``links_in_tree`` makes of ``href``: ``PlainJoin`` first, the formula after."""
    join = PlainJoin.for_page(base_url, page_url, encoding)
    return (join(href) if join else None) or _absolute_url(href, base_url, page_url, encoding)


PAGE = "http://127.0.0.2:8080/t/3/7/12/"
# (base URL, page URL): the page's <base href> (or its URL) and the page's URL.
CONTEXTS = [
    (PAGE, PAGE),
    ("http://example.com/dir/page.html", "http://example.com/dir/page.html"),
    ("http://example.com", "http://example.com"),
    ("http://example.com/", "http://example.com/"),
    ("http://example.com/a/b", "http://example.com/a/b"),
    ("https://example.com/a/b/", "http://example.com/a/b/"),
    ("http://example.com/a/b/", "https://example.com/a/b/"),
    ("http://example.com/a/b?x=1&y=2#frag", "http://example.com/a/b?x=1&y=2#frag"),
    ("http://example.com/a/?", "http://example.com/a/?"),
    ("http://example.com/a/#", "http://example.com/a/#"),
    ("http://example.com/a/#f\u00e9 g", "http://example.com/a/#f\u00e9 g"),
    ("http://example.com/a;p/b;q?x", "http://example.com/a;p/b;q?x"),
    ("http://base.example.org/x/", "http://example.com/dir/page.html"),
    ("http://example.com/sub/", "http://example.com/dir/page.html"),
    ("http://example.com//a//b/", "http://example.com//a//b/"),
    ("http://example.com/a/./b/../c/", "http://example.com/a/./b/../c/"),
    ("http://example.com/.hidden/x", "http://example.com/.hidden/x"),
    ("HTTP://EXAMPLE.COM/Dir/", "HTTP://EXAMPLE.COM/Dir/"),
    ("http://Example.com/dir/", "http://Example.com/dir/"),
    ("http://b\u00fccher.example/p/", "http://b\u00fccher.example/p/"),
    ("http://xn--bcher-kva.example/p/", "http://xn--bcher-kva.example/p/"),
    ("http://user:pw@example.com/p/", "http://user:pw@example.com/p/"),
    ("http://example.com:80/p/", "http://example.com:80/p/"),
    ("http://example.com:080/p/", "http://example.com:080/p/"),
    ("http://example.com:/p/", "http://example.com:/p/"),
    ("http://example.com:65536/p/", "http://example.com:65536/p/"),
    ("http://example.com:65535/p/", "http://example.com:65535/p/"),
    ("http://[::1]:8080/p/", "http://[::1]:8080/p/"),
    ("http://example.com/caf%C3%A9/", "http://example.com/caf%C3%A9/"),
    ("http://example.com/caf\u00e9/", "http://example.com/caf\u00e9/"),
    ("http://example.com/a'b/?q'=1", "http://example.com/a'b/?q'=1"),
    ("http://example.com/a b/", "http://example.com/a b/"),
    ("http://example.com/p/", "http://[bad/"),
    ("http://example.com/p/", ""),
    ("http://a..b/p/", "http://a..b/p/"),
    ("ftp://example.com/p/", "ftp://example.com/p/"),
    ("", "http://example.com/p/"),
]
ENCODINGS = ["utf-8", "latin-1", "cp1251", "shift_jis", "cp1252", "utf-16", "utf-16-le",
             "utf-32", "ascii"]
HREFS = [
    "a.html", "k/", "sub/dir/x.html", "/section/x.html", "/", "/a/b/", "./x", "./", ".", "..",
    "../", "../k/", "../../../../../../x", "../..", "a/..", "a/.", "a/./b", "a/../b", "a/b/..",
    "/..", "/../x", "/./x", "/a/../../b", "/a/.", "/a/..", ".hidden", "..x", "x..", "a/.b",
    "//host/x", "//EXAMPLE.com", "///x", "?q=1", "?sort=asc&page=2", "?", "#", "#f", "#top",
    "?#", "?#f", "?q#", "?q#f", "a?#f", "a?", "a#", "/a?b?c#d#e", "#a#b", "#a?b", "?a'b",
    "#a'b", "a'b", "a|b", "?a|b", "a[b]", "?a[b]", "", " ", "  a.html\n", "\ta\tb\n", "a b",
    "a\tb", "a\nb", "a\rb", "a\x0cb", "a\x00b", "a\x1fb", "\x1fa", "%20", "a%20b", "%zz",
    "a%zz", "%E9", "?q=%E9", "#%", "a%", "a\\b", "\\\\host\\x", "/a\\..\\b", "?a\\b", "#a\\b",
    "caf\u00e9.html", "/\u043f\u0443\u0442\u044c", "?q=\u65e5\u672c", "#\u65e5",
    "\u65e5\u672c.html", "http://bücher.example/", "HTTP://EXAMPLE.COM", "http://Example.com/x",
    "http://example.com:8080/x", "http://user:pw@example.com/x", "javascript:void(0)",
    "mailto:x@y", "data:text/html,hi", "tel:+123", "ftp://x/y", "http:relative", "http:/abs",
    "https:relative", "http://example.com/a?#f", "http://example.com/a;?x",
    "http://example.com/a?x'y", "http://example.com/a#x#y", "http://example.com:080/",
    "a;p", "a;p/b", "/a;p", "?a;b", "#a;b", "a:b/c", "a/b:c", "./a:b", "1a:b", "+a:b",
    "a?b:c", "a#b:c", ":a", "C:\\x", "a@b", "/@x", "!$&'()*+,=", "~user/", "a" * 3000,
    "/" + "seg/" * 500, "../" * 300 + "x", "?" + "q" * 5000, "/x?" + "a=1&" * 200,
]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(("base_url", "page_url"), CONTEXTS, ids=[b or "empty" for b, _ in CONTEXTS])
def test_every_href_of_the_table_resolves_as_the_formula_does(
        base_url: str, page_url: str, encoding: str) -> None:
    differing = [(href, resolved(href, base_url, page_url, encoding),
                  reference(href, base_url, page_url, encoding)) for href in HREFS
                 if resolved(href, base_url, page_url, encoding)
                 != reference(href, base_url, page_url, encoding)]
    assert differing == []


@pytest.mark.parametrize(("href", "url"), [
    ("k/", "http://127.0.0.2:8080/t/3/7/12/k/"),
    ("../k/", "http://127.0.0.2:8080/t/3/7/k/"),
    ("../../../../../../x", "http://127.0.0.2:8080/x"),
    ("/section/x.html", "http://127.0.0.2:8080/section/x.html"),
    ("/a/../../b", "http://127.0.0.2:8080/b"),
    ("/..", "http://127.0.0.2:8080/"),
    ("..", "http://127.0.0.2:8080/t/3/7/"),
    (".", "http://127.0.0.2:8080/t/3/7/12/"),
    ("a/.", "http://127.0.0.2:8080/t/3/7/12/a/"),
    ("a//b/./c", "http://127.0.0.2:8080/t/3/7/12/a/b/c"),
    ("/a//b/./c", "http://127.0.0.2:8080/a//b/c"),
    ("?sort=asc&page=2", "http://127.0.0.2:8080/t/3/7/12/?sort=asc&page=2"),
    ("?", "http://127.0.0.2:8080/t/3/7/12/"),
    ("#top", "http://127.0.0.2:8080/t/3/7/12/#top"),
    ("a?#f", "http://127.0.0.2:8080/t/3/7/12/a#f"),
    ("#a?b", "http://127.0.0.2:8080/t/3/7/12/#a?b"),
    ("a%20b.html", "http://127.0.0.2:8080/t/3/7/12/a%20b.html"),
    ("caf%C3%A9/", "http://127.0.0.2:8080/t/3/7/12/caf%C3%A9/"),
    ("../%e9?q=%2F#%41", "http://127.0.0.2:8080/t/3/7/%e9?q=%2F#%41"),
])
def test_plain_join_answers_the_plain_hrefs_of_a_plain_page(href: str, url: str) -> None:
    """The forms a site's pages use most skip the formula, with the formula's answer."""
    join = PlainJoin.for_page(PAGE, PAGE, "utf-8")
    assert join is not None
    assert (join(href), reference(href, PAGE, PAGE, "utf-8")) == (url, url)


@pytest.mark.parametrize("href", [
    "", "//host/x", "a:b/c", "a%zz", "a%2", "?q=%", "#%g0", "a;p", "?a'b", "#a#b", "a b",
    "caf\u00e9", "a\\b",
    "http://example.com/", "javascript:void(0)", "a\tb"])
def test_plain_join_leaves_the_other_hrefs_to_the_formula(href: str) -> None:
    join = PlainJoin.for_page(PAGE, PAGE, "utf-8")
    assert join is not None
    assert join(href) is None


@pytest.mark.parametrize(("base_url", "page_url", "encoding"), [
    ("HTTP://EXAMPLE.COM/", "HTTP://EXAMPLE.COM/", "utf-8"),
    ("http://b\u00fccher.example/", "http://b\u00fccher.example/", "utf-8"),
    ("http://user@example.com/", "http://user@example.com/", "utf-8"),
    ("http://example.com:080/", "http://example.com:080/", "utf-8"),
    ("http://example.com:/", "http://example.com:/", "utf-8"),
    ("http://example.com:65536/", "http://example.com:65536/", "utf-8"),
    ("http://[::1]/", "http://[::1]/", "utf-8"),
    ("http://example.com/a%2/", "http://example.com/a%2/", "utf-8"),
    ("http://example.com/a;p/", "http://example.com/a;p/", "utf-8"),
    ("http://example.com/?a'b", "http://example.com/?a'b", "utf-8"),
    ("http://example.com/", "http://[bad/", "utf-8"),
    ("http://example.com/", "http://example.com/", "utf-16"),
    ("http://example.com/", "http://example.com/", "no-such-encoding"),
    ("ftp://example.com/", "ftp://example.com/", "utf-8"),
])
def test_no_href_of_an_awkward_page_skips_the_formula(base_url: str, page_url: str,
                                                       encoding: str) -> None:
    assert PlainJoin.for_page(base_url, page_url, encoding) is None


def test_links_in_tree_gives_the_formulas_urls_in_order() -> None:
    hrefs = [href for href in HREFS if "\x00" not in href and '"' not in href]
    body = "".join(f'<a href="{href.replace("&", "&amp;")}">x</a>' for href in hrefs)
    root = lxml.html.fromstring(f"<html><body>{body}</body></html>")
    expected: list[str] = []
    for element in root.iter("a"):
        url = reference(element.get("href"), PAGE, PAGE, "utf-8")
        if url is not None and url not in expected and url.startswith(("http://", "https://")):
            expected.append(url)
    found = links_in_tree(root, base_url=PAGE, page_url=PAGE, encoding="utf-8", max_links=0)
    assert [link.url for link in found.links] == expected
    assert len(expected) > 60


_ALPHABET = "/.?#%:;@\\ \t\n\u00e9\u65e5'|[]=&+,!~-_abcAB12"
_PREFIXES = ["", "", "/", "./", "../", "../../", "?", "#", "//", "http:", "a:", "/a/", "a/"]


def _random_href(rng: random.Random) -> str:
    return rng.choice(_PREFIXES) + "".join(
        rng.choice(_ALPHABET) for _ in range(rng.randrange(12)))


def test_a_seeded_random_sample_resolves_as_the_formula_does_mostly_without_it() -> None:
    rng = random.Random(20261126)
    answered = 0
    differing = []
    for _ in range(20_000):
        href = _random_href(rng)
        base_url, page_url = rng.choice(CONTEXTS)
        encoding = rng.choice(ENCODINGS)
        join = PlainJoin.for_page(base_url, page_url, encoding)
        fast = join(href) if join else None
        answered += fast is not None
        expected = reference(href, base_url, page_url, encoding)
        if (fast or _absolute_url(href, base_url, page_url, encoding)) != expected:
            differing.append((href, base_url, page_url, encoding, fast, expected))
    assert differing == []
    assert answered > 1_000


@settings(max_examples=3_000, deadline=None, derandomize=True)
@given(href=st.tuples(st.sampled_from(_PREFIXES), st.text(alphabet=_ALPHABET, max_size=16))
       .map("".join),
       context=st.sampled_from(CONTEXTS),
       encoding=st.sampled_from(["utf-8", "latin-1", "cp1251", "shift_jis", "utf-16"]))
def test_any_href_resolves_as_the_formula_does(href: str, context: tuple[str, str],
                                               encoding: str) -> None:
    base_url, page_url = context
    join = PlainJoin.for_page(base_url, page_url, encoding)
    fast = join(href) if join else None
    expected = reference(href, base_url, page_url, encoding)
    assert fast in (None, expected)
    assert resolved(href, base_url, page_url, encoding) == expected


_SCHEMES = ["javascript:", "mailto:", "tel:", "data:", "ftp:", "JaVaScRiPt:", "a:", "httpx:",
            "http:", "HTTPS:", "https:", " mailto:", "\tjavascript:", "java\tscript:", "h-1.x+:"]


@settings(max_examples=3_000, deadline=None, derandomize=True)
@given(href=st.tuples(st.sampled_from(_SCHEMES), st.text(alphabet=_ALPHABET, max_size=16))
       .map("".join),
       context=st.sampled_from(CONTEXTS))
def test_an_href_skipped_for_its_scheme_never_resolves_to_an_http_link(
        href: str, context: tuple[str, str]) -> None:
    """``links_in_tree`` skips the formula for an href of another scheme: the formula never
    makes an http(s) URL of one."""
    base_url, page_url = context
    url = reference(href, base_url, page_url, "utf-8")
    if _OTHER_SCHEME.match(href):
        assert url is None or not url.startswith(("http://", "https://"))


@pytest.mark.parametrize(("href", "skipped"), [
    ("javascript:void(0)", True), ("mailto:a@b.c", True), (" tel:1", True), ("a:b", True),
    ("httpx:y", True), ("http:x", False), ("HTTPS:x", False), ("https://a/", False),
    ("java\tscript:x", False), ("1a:b", False), ("/x:y", False), ("x", False)])
def test_which_hrefs_are_skipped_for_their_scheme(href: str, skipped: bool) -> None:
    assert bool(_OTHER_SCHEME.match(href)) is skipped


_HOSTS = ["a", "example.com", "127.0.0.2", "1.2.3", "xn--bcher-kva.example", "xn--zz", "a..b",
          "-a.b", "a-.b", "A.b", "b\u00fccher.example", "a_b.c", "0x7f.1", "x" * 64 + ".c"]
_PORTS = ["", ":80", ":8080", ":41234", ":65535", ":65536", ":080", ":", ":0", ":99999"]
_URL_TAIL = "/?#%:;@'[]|=&+,!~-_.aZ09eF \u00e9"


@settings(max_examples=3_000, deadline=None, derandomize=True)
@given(scheme=st.sampled_from(["http://", "https://", "HTTP://", "ftp://"]),
       host=st.sampled_from(_HOSTS), port=st.sampled_from(_PORTS),
       tail=st.text(alphabet=_URL_TAIL, max_size=16))
def test_a_url_judged_safe_is_what_safe_url_string_gives(scheme: str, host: str, port: str,
                                                         tail: str) -> None:
    """``is_safe_url`` (the fast engine's request URL) never says yes where w3lib would
    change the URL or refuse it."""
    url = scheme + host + port + ("/" + tail if tail else "")
    if is_safe_url(url):
        assert safe_url_string(url, "utf-8") == url


@pytest.mark.parametrize(("url", "safe"), [
    ("http://127.0.0.2:41234/t/3/", True), ("https://a.example/x?y=1&z=%2F#f", True),
    ("http://a/caf%C3%A9/", True), ("http://a/%zz", False), ("http://a/?", False),
    ("http://a/#", False), ("http://a:65536/", False), ("http://A/", False),
    ("http://a/b c", False), ("http://a/\u00e9", False), ("http://a/?q='", False)])
def test_which_urls_are_judged_safe(url: str, safe: bool) -> None:
    assert is_safe_url(url) is safe
