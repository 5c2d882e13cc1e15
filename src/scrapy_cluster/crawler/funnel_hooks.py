"""The Scrapy engine's hooks into the URL funnel (``common/funnel.py``): one ``FunnelCounter``
per Scrapy crawler, and which Scrapy exceptions are refusals by a rule."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest

from scrapy_cluster.crawler.common.funnel import ROBOTS_MESSAGE, FunnelCounter
from scrapy_cluster.crawler.ssrf import ForbiddenAddress


def refusal_reason(exception: BaseException) -> str | None:
    """``robots`` or ``ssrf`` when a download was refused by a rule rather than failed."""
    if isinstance(exception, ForbiddenAddress):
        return "ssrf"
    if isinstance(exception, IgnoreRequest) and str(exception) == ROBOTS_MESSAGE:
        return "robots"
    return None


_FUNNELS: WeakKeyDictionary[Crawler, FunnelCounter] = WeakKeyDictionary()


def funnel_for(crawler: Crawler) -> FunnelCounter:
    """The one ``FunnelCounter`` of a Scrapy crawler, shared by its spider, middlewares,
    scheduler and pipeline; the scheduler's lease acknowledgements write it."""
    counter = _FUNNELS.get(crawler)
    if counter is None:
        counter = FunnelCounter()
        _FUNNELS[crawler] = counter
    return counter
