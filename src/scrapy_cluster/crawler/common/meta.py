"""The crawl-API fields a request carries in its ``meta``, and how a child request inherits them.

A crawl request (see the frontier) stores these fields at its top level; inside Scrapy they
live in ``request.meta`` so spiders and middlewares can read them. Scrapy's own runtime keys
(``depth``, ``download_slot``, ``redirect_urls``, ...) and private keys (``_...``) never leave
the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IDENTITY_FIELDS = ("appid", "crawlid", "spiderid")
INHERITED_FIELDS = (
    *IDENTITY_FIELDS, "attrs", "maxdepth", "allowed_domains", "allow_regex", "deny_regex",
    "deny_extensions", "expires", "useragent", "cookie", "domain_max_pages",
)
RECRAWL_FIELD = "recrawl"
CLUSTER_FIELDS = (*INHERITED_FIELDS, "curdepth", "priority", "depth_upgrade", RECRAWL_FIELD)
"""``depth_upgrade`` (set by the frontier on a URL fetched again because it was found at a
smaller depth) is carried by the request and its retries, never inherited by its links.
``recrawl`` (the re-crawl policy) is inherited only while its ``links`` is not false."""
SCRAPY_RUNTIME_META = frozenset({
    "depth", "download_latency", "download_slot", "download_timeout", "redirect_times",
    "redirect_ttl", "redirect_urls", "redirect_reasons", "retry_times", "is_start_request",
    "handle_httpstatus_all",
})
LEASE_META_KEY = "_sc_lease_id"
PARENT_LEASE_META_KEY = "_sc_parent_lease_id"
"""On a request a callback yields: the lease of the page that yielded it, given back when the
request cannot be queued (Redis unreachable), so the page is crawled again."""
ENQUEUED_META_KEY = "_sc_enqueued_at_s"
"""When the frontier queued the request, on this process's ``time.monotonic()`` clock (from
the item's enqueue time and the pop's reply); absent for items queued without one."""
RECRAWL_META_KEY = "_sc_recrawl"
"""On a popped request of a re-crawled URL: its ``revisit.Refetch`` (policy, previous state,
the conditional headers added)."""
VERDICT_META_KEY = "_sc_recrawl_verdict"
"""On the response of such a request, once judged: its ``revisit.Verdict``."""
DEPTH_PRIORITY_STEP = 10


def cluster_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The crawl-API fields present in ``meta`` (``None`` values left out)."""
    return {name: meta[name] for name in CLUSTER_FIELDS if meta.get(name) is not None}


def user_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The spider's own meta keys: neither crawl-API fields, Scrapy runtime keys nor private."""
    return {key: value for key, value in meta.items()
            if key not in CLUSTER_FIELDS and key not in SCRAPY_RUNTIME_META
            and not key.startswith("_")}


def inherit(parent: Mapping[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Copy the inherited crawl fields of ``parent`` into ``child`` where ``child`` has none.

    ``curdepth`` becomes the parent's plus one unless the child set it. A child that names
    another ``spiderid`` keeps it: that is how one spider hands work to another. ``recrawl``
    is copied only when its ``links`` is not false (then only the seeds are re-crawled).
    """
    for name in INHERITED_FIELDS:
        if child.get(name) is None and parent.get(name) is not None:
            child[name] = parent[name]
    recrawl = parent.get(RECRAWL_FIELD)
    if recrawl is not None and child.get(RECRAWL_FIELD) is None \
            and not (isinstance(recrawl, dict) and recrawl.get("links") is False):
        child[RECRAWL_FIELD] = recrawl
    if child.get("curdepth") is None:
        child["curdepth"] = int(parent.get("curdepth") or 0) + 1
    return child


def child_priority(parent: Mapping[str, Any]) -> int:
    """Priority of a link found on a page: one step (10) below its parent, as in breadth first."""
    return int(parent.get("priority") or 0) - DEPTH_PRIORITY_STEP
