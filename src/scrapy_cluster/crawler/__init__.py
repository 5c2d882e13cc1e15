"""The crawler: spiders that share a distributed frontier in Redis and send results to the bus.

``common/`` holds the rules both engines obey; the Scrapy engine's adapters sit here, at the
dotted paths its settings name (``scrapy_cluster.crawler.settings`` holds the Scrapy settings
the cluster crawler runs with); ``fast/`` is the asyncio engine. ``scrapy-cluster crawler``
(``runner.py``) runs one crawler process on the engine CRAWLER_ENGINE names.
"""
