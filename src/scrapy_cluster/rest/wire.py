"""The API's wire format (docs/rest.md): reading a request's JSON body within its limit, and
the answer wrapper ``{status, data, error}`` with its messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import Request
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


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes even without a Content-Length."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def is_json(request: Request) -> bool:
    """``application/json`` or ``application/*+json``, any parameters."""
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    return media == JSON_TYPE or (media.startswith("application/") and media.endswith("+json"))


async def parse_json(request: Request, limit: int) -> dict[str, Any] | Response:
    """The JSON object of the body, or the error answer to return."""
    if not is_json(request):
        return wrapped(code=400, message=MSG_INVALID_JSON,
                       cause="Content-Type must be application/json")
    try:
        body = await read_body(request, limit)
    except BodyTooLarge:
        return wrapped(code=413, message=MSG_TOO_LARGE)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return wrapped(code=400, message=MSG_INVALID_JSON, cause=str(exc))
    if not isinstance(parsed, dict):
        return wrapped(code=400, message=MSG_SCHEMA,
                       cause=f"request must be a JSON object, not {type(parsed).__name__}")
    return parsed
