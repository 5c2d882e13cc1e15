"""Upgrading Redis state: from an original Scrapy Cluster 1.2/1.3 deployment, and between
versions of our own key layout.

``upgrades`` holds the steps from one version of our key layout to the next (the version
stamped in ``scrapy-cluster:schema`` and its check at start are the core's ``layout``).
``legacy`` turns the original's keys and values into ours (pure); ``source`` finds and stages
the original keys; ``queues``, ``dupefilters`` and ``steps`` import them; ``runner`` runs
everything in order and ``summary`` says what moved. The user guide is docs/migration.md.
"""
