"""Hide secrets when settings are printed or logged."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "****"
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|PASSWD|CREDENTIAL|API_KEY", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*:[^/@]*@", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def mask_url(url: str) -> str:
    """``redis://user:pw@host:1/0`` -> ``redis://user:****@host:1/0``."""
    if not _URL_WITH_PASSWORD.match(url):
        return url
    parts = urlsplit(url)
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


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
