"""The fast crawler engine: asyncio + aiohttp on the same frontier as the Scrapy crawler.

``scrapy-cluster crawler --engine fast`` (``CRAWLER_ENGINE``). It has the ``link`` spider's
semantics and produces the same result items (docs/crawler.md, "Fast engine"). Modules:
``fetch`` (the HTTP client seam), ``extract`` (the link extractor seam), ``robots``,
``pages`` (what one fetched request becomes), ``leases`` (asyncio lease book), ``engine``
(slots, pops, acks) and ``app`` (composition from settings, signals).
"""
