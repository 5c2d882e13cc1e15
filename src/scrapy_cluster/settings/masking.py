"""Hide secrets when settings are printed or logged."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

MASK = "****"
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|PASSWD|CREDENTIAL|API_KEY|KEY\.PEM",
                          re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]*@", re.IGNORECASE)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def mask_url(url: str) -> str:
    """``redis://user:pw@host:1/0`` -> ``redis://user:****@host:1/0``; a secret query
    parameter (``unix:///r.sock?password=pw``) is masked too. The rest is kept as written."""
    if not _URL.match(url):
        return url
    parts = urlsplit(url)
    masked = url
    if _URL_WITH_PASSWORD.match(url):
        user = parts.username or ""
        host = parts.hostname or ""
        netloc = f"{user}:{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
        masked = masked.replace(f"//{parts.netloc}", f"//{netloc}", 1)
    if parts.query:
        query = "&".join(_mask_parameter(pair) for pair in parts.query.split("&"))
        masked = masked.replace(f"?{parts.query}", f"?{query}", 1)
    return masked


def _mask_parameter(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    return f"{name}={MASK}" if equals and is_secret_name(name) else pair


def mask_secrets(name: str, value: Any) -> Any:
    """Return ``value`` with secrets replaced by ``****`` (recursing into dicts and lists)."""
    if value is None:
        return None
    if is_secret_name(name):
        return MASK
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, dict):
        return {key: mask_secrets(str(key), item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secrets(name, item) for item in value]
    return value
