"""The rules both crawler engines obey, engine-neutral (docs/architecture.md, "Crawler").

No Scrapy middleware, extension or Twisted class lives here: the Scrapy engine's adapters
(``crawler/ssrf.py``, ``crawler/send_clock.py``, ``crawler/politeness.py``, ...) and the fast
engine (``crawler/fast/``) both import these modules and only adapt them to their I/O.

``lease_state`` (held, finished and given-back leases; the flush plan), ``late_sends`` (the
late-send book), ``address_guard`` (the SSRF rule), ``funnel`` (URL funnel counts), ``items``
and ``meta`` (result items, crawl fields), ``link_rules`` (what a crawl follows),
``crawl_delay`` (robots.txt Crawl-delay), ``retry_after`` (Retry-After pauses),
``response_stats`` and ``telemetry`` (status stats, fetch telemetry), ``public_ip``,
``resolution`` (the cluster and Scrapy settings and the spider a crawler runs with) and
``process_logging``.
"""
