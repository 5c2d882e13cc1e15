"""The request API shared by every entry point: the JSON Schemas of the requests applications
send (``schemas/*.json``) and their validation (``validation.py``).

The Kafka Monitor validates what arrives on ``<prefix>.incoming`` with them, the Rest service
what arrives on ``/feed``, ``scrapy-cluster feed`` and ``migrate`` what they are given, so all
of them accept and refuse the same requests with the same reasons.
"""

from __future__ import annotations

from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
"""The bundled request schemas (``scraper_schema.json``, ``action_schema.json``, ...)."""
