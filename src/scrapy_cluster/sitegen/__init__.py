"""A generated web site with its own request log, and how to judge a throttle from that log.

Shipped for ``scrapy-cluster demo``, which crawls it and checks politeness from what the site
saw; the tests and benchmarks crawl the same site. ``site.py`` is the site and its server,
``throttle_measure.py`` the measures over the arrival times it records.
"""
