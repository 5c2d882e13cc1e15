"""Re-crawls on the crawler side: a request's ``recrawl`` policy, the state a URL carries from
one fetch to the next, the conditional headers it sends, and the verdict on each fetch (pure:
no I/O, no Scrapy, no Twisted; both engines use it).

**Policy** (``RecrawlPolicy.from_request``): the crawl request's ``recrawl`` object
(docs/api.md): ``interval`` (fixed seconds between fetches), ``adaptive`` (``min``, ``max``,
``inc``, ``dec``; ``interval`` is then the starting interval), ``until`` (epoch s), ``max_cycles``,
``links``, ``not_modified``. A malformed object gives None and a warning: the request is
crawled once, as if it had none.

**State** (``RevisitState``): what the frontier carries from one fetch to the next, opaque to
it: ``<interval s>,<fetch count>,<digest>,<last-modified>,<etag>``, numbers in base 36, the
digest the 8 hex digits of ``blake2b(body, digest_size=4)`` (empty when no body was ever
read), Last-Modified as epoch seconds (empty when none was kept), the ETag last (it may hold
commas; empty when none was kept). An ETag that is not printable ASCII without space, or longer
than 64 characters, is not kept; the digest still tells a changed page from an unchanged one.
A state that does not parse is no state: the fetch counts as a first fetch.

**Headers** (``conditional_headers``): ``If-None-Match`` with the kept ETag and
``If-Modified-Since`` (IMF-fixdate) with the kept Last-Modified, both when both were kept (the
server decides; RFC 9110: If-None-Match wins). An engine adds them only where the request's own
headers have no such header.

**Verdict** (``judge``), per fetch:

* *not modified*: a 304, or a response below 400 whose body digest equals the kept one. A 304
  keeps the kept digest, and takes the validators it sends (else keeps the old ones); a 200
  takes its own validators (none kept when it sends none).
* *changed*: any other response below 400 (a first fetch is changed).
* *error*: a status of 400 or more, or no response (the download failed for good): the old
  digest and validators are kept, and the URL stays scheduled by the not-modified rule, so a
  transient outage does not drop it.

The fetch count goes up by one on every fetch, errors included.

Interval to the next fetch: fixed: ``interval``. Adaptive: on a first fetch (or a state that
did not parse) ``interval``, or ``min`` without it; then on a changed page the last interval
times ``1 - dec``, on a not-modified page or an error times ``1 + inc``; rounded to whole
seconds, moved by at least one second when ``dec``/``inc`` is not 0, always within
``[min, max]``.

The URL leaves the schedule (``Verdict.revisit`` None) when: ``links`` is false and the page is
not a seed (depth > 0); the next fetch would pass ``1 + max_cycles`` fetches; the next fetch
would come after ``until``. Otherwise ``Verdict.revisit`` is the frontier's ``Revisit``:
acknowledge the lease and queue the request again after the interval, with the new state.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

from scrapy_cluster.frontier.model import Revisit

logger = logging.getLogger(__name__)

RECRAWL_FIELD = "recrawl"
"""The crawl request's field holding the policy (``rc`` in queue items)."""
RETRY_STATE_FIELD = "recrawl_state"
"""On a retry the crawler queues itself: the state of the fetch being retried (a retry is a new
queue item, which carries no frontier state), so the count and validators go on."""
NOT_MODIFIED = 304
ETAG_MAX = 64
DEFAULT_INC, DEFAULT_DEC = 0.4, 0.2
_PRINTABLE = re.compile(r"[\x21-\x7e]+")
_DIGEST = re.compile(r"[0-9a-f]{8}")


class Malformed(ValueError):
    """A ``recrawl`` object the crawler cannot use."""


@dataclass(frozen=True)
class Adaptive:
    min_s: int
    max_s: int
    inc: float = DEFAULT_INC
    dec: float = DEFAULT_DEC
    estimate: bool = False


@dataclass(frozen=True)
class RecrawlPolicy:
    """A request's ``recrawl`` object, checked (see module docstring)."""

    interval_s: int | None = None
    adaptive: Adaptive | None = None
    until_s: int | None = None
    max_cycles: int | None = None
    links: bool = True
    not_modified_item: bool = True

    @classmethod
    def from_request(cls, request: Mapping[str, Any]) -> RecrawlPolicy | None:
        """The policy of a crawl-request dict (or Scrapy meta); None without a ``recrawl``
        field or with a malformed one (warned)."""
        value = request.get(RECRAWL_FIELD)
        if value is None:
            return None
        try:
            return cls.parse(value)
        except Malformed as exc:
            logger.warning("ignoring a malformed recrawl field: %s", exc,
                           extra={"url": str(request.get("url"))[:500]})
            return None

    @classmethod
    def parse(cls, value: Any) -> RecrawlPolicy:
        """Raises ``Malformed`` saying what is wrong."""
        if not isinstance(value, Mapping):
            raise Malformed(f"not an object: {value!r}"[:200])
        adaptive = _adaptive(value.get("adaptive"))
        interval = _optional_int(value, "interval", low=1)
        if interval is None and adaptive is None:
            raise Malformed("neither interval nor adaptive")
        links = value.get("links", True)
        not_modified = value.get("not_modified", "item")
        if not isinstance(links, bool) or not_modified not in ("item", "none"):
            raise Malformed("links must be a boolean, not_modified 'item' or 'none'")
        return cls(interval_s=interval, adaptive=adaptive,
                   until_s=_optional_int(value, "until", low=0),
                   max_cycles=_optional_int(value, "max_cycles", low=1),
                   links=links, not_modified_item=not_modified == "item")

    def first_interval_s(self) -> int:
        """The interval after a first fetch."""
        if self.adaptive is None:
            assert self.interval_s is not None  # parse requires one of the two
            return self.interval_s
        start = self.interval_s if self.interval_s is not None else self.adaptive.min_s
        return _within(start, self.adaptive)


def _optional_int(value: Mapping[str, Any], name: str, *, low: int) -> int | None:
    number = value.get(name)
    if number is None:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or number < low:
        raise Malformed(f"{name} must be an integer >= {low}, got {number!r}"[:200])
    return number


def _adaptive(value: Any) -> Adaptive | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise Malformed("adaptive must be an object")
    low = _optional_int(value, "min", low=1)
    high = _optional_int(value, "max", low=1)
    if low is None or high is None or high < low:
        raise Malformed("adaptive needs min and max, min <= max")
    inc, dec = value.get("inc", DEFAULT_INC), value.get("dec", DEFAULT_DEC)
    if isinstance(inc, bool) or not isinstance(inc, int | float) or not inc >= 0:
        raise Malformed(f"adaptive.inc must be a number >= 0, got {inc!r}"[:200])
    if isinstance(dec, bool) or not isinstance(dec, int | float) or not 0 <= dec < 1:
        raise Malformed(f"adaptive.dec must be a number in [0, 1), got {dec!r}"[:200])
    estimate = value.get("estimate", False)
    if not isinstance(estimate, bool):
        raise Malformed(f"adaptive.estimate must be a boolean, got {estimate!r}"[:200])
    return Adaptive(low, high, float(inc), float(dec), estimate)


def _within(interval_s: int, adaptive: Adaptive) -> int:
    return max(adaptive.min_s, min(adaptive.max_s, interval_s))


@dataclass(frozen=True)
class RevisitState:
    """The state a URL carries from its previous fetch (see module docstring)."""

    interval_s: int
    fetches: int
    digest: str = ""
    last_modified_s: int | None = None
    etag: str | None = None
    changes: int = 0
    """Estimating policies only: changes seen over the ``fetches - 1`` re-fetches."""
    first_s: int | None = None
    """Estimating policies only: when the URL was first fetched (epoch s)."""

    @classmethod
    def parse(cls, text: str | None) -> RevisitState | None:
        """The state in ``text``; None (a first fetch) when absent or not parseable."""
        if not text or not isinstance(text, str):
            return None
        parts = text.split(",", 4)
        if len(parts) != 5:
            return None
        interval, fetches, digest, modified, etag = parts
        interval, _, history = interval.partition(".")
        try:
            changes, first = (int(part, 36) for part in history.split(".")) if history \
                else (0, None)
            state = cls(int(interval, 36), int(fetches, 36), digest,
                        int(modified, 36) if modified else None, etag or None, changes, first)
        except ValueError:
            return None
        if state.interval_s < 1 or state.fetches < 1 or (digest and not _DIGEST.fullmatch(digest)) \
                or (state.last_modified_s is not None and state.last_modified_s < 0) \
                or (etag and kept_etag(etag) is None) or state.changes >= state.fetches:
            return None
        return state

    def encode(self) -> str:
        modified = "" if self.last_modified_s is None else _base36(self.last_modified_s)
        history = "" if self.first_s is None else \
            f".{_base36(self.changes)}.{_base36(self.first_s)}"
        return (f"{_base36(self.interval_s)}{history},{_base36(self.fetches)},{self.digest},"
                f"{modified},{self.etag or ''}")


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if number == 0:
        return "0"
    text = ""
    while number:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
    return text


def kept_etag(value: str | None) -> str | None:
    """``value`` (stripped) when it can be kept: printable ASCII without space, 1 to 64 chars."""
    if value is None:
        return None
    value = value.strip()
    return value if 0 < len(value) <= ETAG_MAX and _PRINTABLE.fullmatch(value) else None


def last_modified_s(value: str | None) -> int | None:
    """A Last-Modified header as epoch seconds; None when absent or not a date."""
    if not value:
        return None
    try:
        seconds = int(parsedate_to_datetime(value.strip()).timestamp())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return seconds if seconds >= 0 else None


def digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=4).hexdigest()


def conditional_headers(state: RevisitState | None) -> dict[str, str]:
    """The validators to send for a re-fetch (none for a first fetch)."""
    if state is None:
        return {}
    headers: dict[str, str] = {}
    if state.etag:
        headers["If-None-Match"] = state.etag
    if state.last_modified_s is not None:
        headers["If-Modified-Since"] = formatdate(state.last_modified_s, usegmt=True)
    return headers


def missing_headers(state: RevisitState | None,
                    present: Iterable[str]) -> dict[str, str]:
    """``conditional_headers`` less those whose name (any case) is in ``present``."""
    headers = conditional_headers(state)
    if headers:
        taken = {name.lower() for name in present}
        headers = {name: value for name, value in headers.items() if name.lower() not in taken}
    return headers


@dataclass(frozen=True)
class Verdict:
    """What a fetch of a scheduled URL gave (see module docstring): ``not_modified`` (a 304 or
    an unchanged body) or ``changed`` (both False: an error), the new ``state``, and the
    ``revisit`` to acknowledge the lease with (None: the URL leaves the schedule)."""

    changed: bool
    not_modified: bool
    state: RevisitState
    revisit: Revisit | None

    @property
    def fetch(self) -> int:
        """Which fetch of the URL this was (1 for the first)."""
        return self.state.fetches


def judge(policy: RecrawlPolicy, state: RevisitState | None, *, depth: int, status: int | None,
          headers: Mapping[str, str], body: bytes, now_s: float) -> Verdict:
    """The verdict on one fetch. ``status`` None: no response; ``headers``: the response's,
    one value per name (any case; only ETag and Last-Modified are read)."""
    fetches = (state.fetches if state is not None else 0) + 1
    etag, modified = _validators(headers)
    if status is None or status >= 400:
        changed = not_modified = False
        kept = (state.digest, state.last_modified_s, state.etag) if state is not None \
            else ("", None, None)
    elif status == NOT_MODIFIED:
        changed, not_modified = False, True
        new_etag = etag if etag is not None else (state.etag if state else None)
        kept = (state.digest if state else "",
                None if new_etag is not None else
                modified if modified is not None else (state.last_modified_s if state else None),
                new_etag)
    else:
        body_digest = digest(body)
        not_modified = state is not None and state.digest == body_digest
        changed = not not_modified
        kept = (body_digest, modified, etag)
    history: tuple[int, int | None] = (0, None)
    if policy.adaptive is not None and policy.adaptive.estimate:
        history = (state.changes + changed, state.first_s if state.first_s is not None
                   else int(now_s)) if state is not None else (0, int(now_s))
    interval = _next_interval(policy, state, changed=changed, history=history, now_s=now_s)
    new = RevisitState(interval, fetches, *kept, *history)
    return Verdict(changed, not_modified, new,
                   _schedule(policy, new, depth=depth, now_s=now_s))


def _validators(headers: Mapping[str, str]) -> tuple[str | None, int | None]:
    etag = modified = None
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "etag":
            etag = value
        elif lowered == "last-modified":
            modified = value
    kept = kept_etag(etag)
    # RFC 9110 13.1.3: a server ignores If-Modified-Since when If-None-Match is sent, so a
    # Last-Modified is kept only when there is no ETag (about 7 bytes of Redis per URL)
    return kept, None if kept is not None else last_modified_s(modified)


ESTIMATE_AFTER = 2
"""Re-fetches an estimating policy observes before it trusts its estimate."""


def change_rate(refetches: int, changes: int, observed_s: float) -> float:
    """Cho and Garcia-Molina's estimate of a page's Poisson change rate (per second) from
    ``refetches`` intervals of mean length ``observed_s / refetches`` in which ``changes`` saw
    a change: ``-ln((n - X + 0.5) / (n + 0.5)) / I``. A page never seen changing gets the rate
    of half a change over what was observed, so its interval keeps growing."""
    mean_s = max(observed_s, 1.0) / refetches
    rate = -math.log((refetches - changes + 0.5) / (refetches + 0.5)) / mean_s
    return max(rate, 0.5 / ((refetches + 0.5) * mean_s))


def _estimated_interval(policy: RecrawlPolicy, adaptive: Adaptive, state: RevisitState | None,
                        history: tuple[int, int | None], now_s: float) -> int | None:
    """The interval of an estimating policy: sqrt(target / rate), where target is the policy's
    ``interval`` (default sqrt(min * max)): a page changing once per target is fetched once per
    target, one changing 4x as often twice as often. At a fixed request budget this minimises
    the mean time from a change to its fetch (Cho and Garcia-Molina; docs/benchmarks.md). None
    until ``ESTIMATE_AFTER`` re-fetches were seen."""
    refetches = (state.fetches if state is not None else 0)  # intervals observed after this fetch
    changes, first_s = history
    if first_s is None or refetches < ESTIMATE_AFTER:
        return None
    target_s = policy.interval_s if policy.interval_s is not None \
        else math.sqrt(adaptive.min_s * adaptive.max_s)
    rate = change_rate(refetches, changes, now_s - first_s)
    return _within(max(1, round(math.sqrt(target_s / rate))), adaptive)


def _next_interval(policy: RecrawlPolicy, state: RevisitState | None, *, changed: bool,
                   history: tuple[int, int | None] = (0, None), now_s: float = 0.0) -> int:
    adaptive = policy.adaptive
    if adaptive is None:
        return policy.first_interval_s()
    if adaptive.estimate:
        estimated = _estimated_interval(policy, adaptive, state, history, now_s)
        if estimated is not None:
            return estimated
    if state is None:
        return policy.first_interval_s()
    last = state.interval_s
    if changed:
        interval = round(last * (1 - adaptive.dec))
        if adaptive.dec and interval >= last:
            interval = last - 1
    else:
        interval = round(last * (1 + adaptive.inc))
        if adaptive.inc and interval <= last:
            interval = last + 1
    return _within(interval, adaptive)


def _schedule(policy: RecrawlPolicy, state: RevisitState, *, depth: int,
              now_s: float) -> Revisit | None:
    if not policy.links and depth > 0:
        return None
    if policy.max_cycles is not None and state.fetches >= 1 + policy.max_cycles:
        return None
    if policy.until_s is not None and now_s + state.interval_s > policy.until_s:
        return None
    return Revisit(delay_ms=state.interval_s * 1000, state=state.encode())


def mark_item(item: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """A page item of a scheduled URL: ``recrawl_fetch`` added (``not_modified`` too when the
    page did not change)."""
    item["recrawl_fetch"] = verdict.fetch
    if verdict.not_modified:
        item["not_modified"] = True
    return item


def not_modified_item(item: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The small item of a not-modified page, from its page item built without body or links:
    no body fields, ``not_modified: true`` and ``recrawl_fetch``."""
    for name in ("body", "encoding_base64"):
        item.pop(name, None)
    item["body_length"] = 0
    return mark_item(item, verdict)


@dataclass(frozen=True)
class Refetch:
    """A popped request of a re-crawled URL: its policy, the state of its previous fetch (None
    on a first fetch) and the conditional ``headers`` the engine adds to it."""

    policy: RecrawlPolicy
    state: RevisitState | None
    headers: dict[str, str]

    def judge(self, *, depth: Any, status: int | None, headers: Mapping[str, str],
              body: bytes, now_s: float) -> Verdict:
        return judge(self.policy, self.state, depth=int(depth or 0), status=status,
                     headers=headers, body=body, now_s=now_s)

    def retry_fields(self) -> dict[str, Any]:
        """What a retry of this request carries so the state goes on (``RETRY_STATE_FIELD``)."""
        return {RETRY_STATE_FIELD: self.state.encode() if self.state is not None else None}


def refetch_of(request: Mapping[str, Any], revisit: str | None,
               present_headers: Iterable[str]) -> Refetch | None:
    """The ``Refetch`` of a popped crawl-request dict with a ``recrawl`` field (None without a
    usable policy). ``revisit``: the lease's frontier state (``LeasedRequest.revisit``), else the
    state a retry carried; ``present_headers``: the names the request already sends."""
    policy = RecrawlPolicy.from_request(request)
    if policy is None:
        return None
    state = RevisitState.parse(revisit or request.get(RETRY_STATE_FIELD))
    return Refetch(policy, state, missing_headers(state, present_headers))
