"""Asking the cluster a question through its HTTP API, as an application would: ``POST /feed``
to the Rest service, which answers within WAIT_FOR_RESPONSE_TIME or hands back a ``poll_id``
to ``POST /poll`` later. Standard library only (``urllib``)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

import orjson


class ApiError(Exception):
    """The Rest service refused a request or could not be reached."""


class ApiClient:
    """Sends API requests to a Rest service and keeps their answers by uuid."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._seen: dict[str, dict[str, Any]] = {}
        self._polling: set[str] = set()

    def _post(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.base_url + path, data=orjson.dumps(body),
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, orjson.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, orjson.loads(exc.read() or b"{}")
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(f"Rest service unreachable at {self.base_url}: {exc}") from exc

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until ``GET /`` reports GREEN (Redis and the bus reachable)."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.base_url + "/", timeout=2) as response:
                    health = orjson.loads(response.read())
                if health.get("node_health") == "GREEN":
                    return
                last = str(health)
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ApiError(f"Rest service at {self.base_url} not ready after {timeout_s:g}s: {last}")

    def send(self, request: Mapping[str, Any]) -> str:
        """``POST /feed`` one request; returns its uuid (added when missing, except to crawl
        requests, which have none: their answers are pages on the crawled topics)."""
        uid = "" if "url" in request else str(request.get("uuid") or uuid.uuid4().hex[:12])
        body = dict(request) if not uid else {**request, "uuid": uid}
        code, answer = self._post("/feed", body)
        if code != 200 or answer.get("status") != "SUCCESS":
            raise ApiError(f"/feed refused {body}: {code} {answer.get('error')}")
        data = answer.get("data")
        if uid and isinstance(data, dict):
            if data.get("uuid") == uid:
                self._seen[uid] = data
            elif data.get("poll_id") == uid:
                self._polling.add(uid)
        return uid

    def wait(self, uids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
        """The answers of ``uids`` that arrived within ``timeout_s`` (``/poll`` for late ones)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for uid in [uid for uid in uids if uid in self._polling]:
                code, answer = self._post("/poll", {"poll_id": uid})
                if code == 200 and isinstance(answer.get("data"), dict):
                    self._seen[uid] = answer["data"]
                    self._polling.discard(uid)
            if all(uid in self._seen for uid in uids) or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        return {uid: self._seen[uid] for uid in uids if uid in self._seen}

    def ask(self, request: Mapping[str, Any], timeout_s: float = 15.0) -> dict[str, Any] | None:
        uid = self.send(request)
        return self.wait([uid], timeout_s).get(uid)

    def close(self) -> None:
        """Nothing to release (one connection per request)."""
