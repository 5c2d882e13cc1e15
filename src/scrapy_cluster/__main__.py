"""``python -m scrapy_cluster``: the same as the ``scrapy-cluster`` command."""

from __future__ import annotations

from scrapy_cluster.cli import main

if __name__ == "__main__":
    main(prog_name="scrapy-cluster")
