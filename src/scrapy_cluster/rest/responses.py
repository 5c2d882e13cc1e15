"""The API's answer wrapper ``{status, data, error}`` and its messages (docs/rest.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi.responses import Response

SUCCESS, FAILURE = "SUCCESS", "FAILURE"
MSG_INVALID_JSON = "The payload must be valid JSON."
MSG_SCHEMA = "JSON did not validate against schema."
MSG_NO_ENDPOINT = "The desired endpoint does not exist"
MSG_NO_KAFKA = "Unable to connect to Kafka"
MSG_NO_REDIS = "Unable to connect to Redis"
MSG_NO_POLL = "Could not find matching poll_id"
MSG_TOO_LARGE = "The payload is too large."
MSG_KEY = "A valid API key is required."
MSG_HEAD_TOO_LARGE = "The request's header fields are too large."
MSG_LOCKED_OUT = "Too many wrong API keys from this address; retry later."
MSG_METHOD = "The method is not allowed for the requested URL."
MSG_UNEXPECTED = "Unexpected error in the Rest service; see its log."
JSON_TYPE = "application/json"
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' "
                               "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}
"""Headers of every HTML page the service serves (the dashboard, its login form, ``/docs``):
scripts, styles, images and requests from this origin only, no inline script, never framed."""


def wrapped(data: Any = None, *, code: int = 200, message: str | None = None,
            cause: str | None = None, headers: Mapping[str, str] | None = None,
            warnings: Sequence[str] = ()) -> Response:
    """The ``{status, data, error}`` wrapper; FAILURE when ``message`` is given. ``warnings``
    (e.g. no crawler runs the crawl's spider) adds a ``warnings`` list, only when not empty."""
    error = None
    if message is not None:
        error = {"message": message} if cause is None else {"message": message, "cause": cause}
    body: dict[str, Any] = {"data": data, "error": error,
                            "status": FAILURE if message is not None else SUCCESS}
    if warnings:
        body["warnings"] = list(warnings)
    return Response(orjson.dumps(body), status_code=code, media_type=JSON_TYPE, headers=headers)
