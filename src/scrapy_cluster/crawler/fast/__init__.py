"""The fast crawler engine: asyncio + aiohttp on the same frontier as the Scrapy crawler.

``scrapy-cluster crawler --engine fast`` (``CRAWLER_ENGINE``). It has the ``link`` and
``wandering`` spiders' semantics and produces the same result items (docs/crawler.md, "Fast
engine"). It imports only ``crawler/common/`` (the rules both engines obey), itself and the
core. Modules: ``fetch`` (the HTTP client seam), ``extract`` (the link extractor seam),
``robots``, ``spiders``, ``requests``, ``policy`` (``PagePolicy``), ``pages`` (what one fetched
request becomes), ``link_batch`` (links of pages finishing together, one enqueue),
``item_sender`` (result items to the bus), ``domain_hooks`` (late sends, Retry-After,
Crawl-delay), ``async_lease_book`` (the lease book on ``AsyncFrontier``), ``engine`` (slots,
pops, acks) and ``app`` (composition from settings, signals).
"""
