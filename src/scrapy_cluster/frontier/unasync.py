"""Writes ``sync.py`` (``Frontier``) from ``aio.py`` (``AsyncFrontier``), so the twins cannot drift.

``aio.py`` is the only source of the frontier clients: edit it, then run
``python -m scrapy_cluster.frontier.unasync`` (``--check`` only reports a difference, exit
status 1). ``tests/test_frontier_twins.py`` fails when the checked-in ``sync.py`` is not what
this writes. The rewrite is textual and small (``REWRITES``): ``async def`` becomes ``def``,
``await`` goes, the asyncio client and sleep become redis-py's and ``time.sleep``, and the
module docstring is ``SYNC_DOCSTRING``. A word of asyncio left in the result is an error, so
``aio.py``'s code and docstrings (but its module docstring) stay neutral about the kind.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE = PACKAGE_DIR / "aio.py"
TARGET = PACKAGE_DIR / "sync.py"

SYNC_DOCSTRING = '''"""``Frontier``: the distributed frontier for synchronous code (the Scrapy scheduler, the
Redis Monitor, the command line).

Written from ``aio.py`` by ``python -m scrapy_cluster.frontier.unasync``: do not edit this
file, edit ``aio.py`` and run that command (a test fails when the two differ).
"""'''

REWRITES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.MULTILINE), replacement) for pattern, replacement in (
        (r"^import asyncio\n", ""),
        (r"^import redis\.asyncio\n", ""),
        (r"\bawait asyncio\.sleep\(", "time.sleep("),
        (r"\bredis\.asyncio\.Redis\b", "redis.Redis"),
        (r"\bAsyncFrontier\b", "Frontier"),
        (r"\basync def\b", "def"),
        (r"\bawait ", ""),
    ))
LEFT_OVER = re.compile(r"\b(?:async|await|asyncio|Async\w*|coroutines?)\b")


def sync_source(async_source: str) -> str:
    """The text of ``sync.py`` for ``async_source`` (the text of ``aio.py``)."""
    if not async_source.startswith('"""'):
        raise ValueError("aio.py must start with its module docstring")
    body = async_source[async_source.index('"""', 3) + 3:]
    for pattern, replacement in REWRITES:
        body = pattern.sub(replacement, body)
    left = [line.strip() for line in body.splitlines() if LEFT_OVER.search(line)]
    if left:
        raise ValueError("asyncio left in the sync frontier:\n" + "\n".join(left))
    return SYNC_DOCSTRING + body


def main(argv: list[str] | None = None) -> int:
    """Write ``sync.py``; with ``--check``, only say whether it is up to date."""
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    expected = sync_source(SOURCE.read_text("utf-8"))
    if TARGET.read_text("utf-8") == expected:
        return 0
    if check:
        print(f"{TARGET} differs from what {SOURCE.name} gives: run "
              "python -m scrapy_cluster.frontier.unasync", file=sys.stderr)
        return 1
    TARGET.write_text(expected, "utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
