"""scrapy-cluster: a distributed, on-demand web-crawling cluster on Scrapy, Redis and Kafka."""

from __future__ import annotations

__version__ = "0.1.0"
