"""Spiders shipped with the crawler: ``link`` and ``wandering``; ``ClusterSpider`` is their base."""
