"""The Kafka Monitor: the cluster's JSON API gateway.

It consumes API requests from ``<prefix>.incoming``, validates each against the
plugins' JSON Schemas and hands it to the first plugin that accepts it. See
``docs/api.md`` for the API and ``docs/architecture.md`` for the design.
"""

from __future__ import annotations
