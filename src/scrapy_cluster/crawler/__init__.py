"""The crawler: Scrapy spiders that share a distributed frontier in Redis and send results to the bus.

``scrapy_cluster.crawler.settings`` holds the Scrapy settings the cluster crawler runs with;
``scrapy-cluster crawler`` (``runner.py``) runs one crawler process.
"""
