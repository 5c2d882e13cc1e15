"""Where the fast engine's main thread spends its time, from a py-spy sample of a crawling
process (``crawl_throughput.py --spy-seconds N``).

``py-spy record --format raw`` writes one line per distinct stack with its sample count. This
module groups the samples of the main thread (the one running the asyncio loop) by the stage
of a page they were taken in, outermost match first, so that each sample counts once:

fetch (aiohttp), link extraction (parse, then ``links_in_tree``, with URL resolution apart),
link rules and the spider's follow-up requests, the frontier enqueue of the links (request
encoding, command packing and the round trip), the result item and its production, the pops,
acks and lease reaps, and what the event loop does between them. Samples of other threads
(the Redis Streams producer's, the thread pool's) are counted apart: py-spy counts a thread
blocked in a socket call as busy, so their share overstates their CPU.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

# (stage, frame patterns): a sample belongs to the first stage one of whose patterns matches
# one of its frames, innermost stages listed first.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("URL resolution (PlainJoin, urljoin + safe_url_string)",
     (r"^PlainJoin\.", r"^_absolute_url ", r"^urljoin ", r"^safe_url_string ")),
    ("HTML parse (lxml)", (r"^LxmlExtractor\._parse ",)),
    ("links_in_tree, the rest (lxml walk, link text, Link)", (r"^links_in_tree ",)),
    ("extraction, the rest (encoding, base URL)", (r"^LxmlExtractor\.__call__ ",)),
    ("link rules + follow-up requests", (r"^LinkSpider\.follow", r"^select_links ")),
    ("enqueue: request encoding (validate, fingerprint, item, seen cache)",
     (r"^FrontierCalls\.enqueue_batch ", r"^FrontierCalls\.finish_enqueue ")),
    ("enqueue: command packing + round trip", (r"^AsyncFrontier\.enqueue_many ",
                                                r"^LinkBatcher\.")),
    ("result item + production", (r"^page_item ", r"^ItemSender\.", r"^fit_encoded ")),
    ("fetch (aiohttp)", (r"^AiohttpFetcher\.",)),
    ("robots.txt, SSRF guard, politeness, stats", (r"^RobotsCache\.", r"^PageProcessor\._refused",
                                                   r"^Politeness\.", r"^FunnelCounter\.")),
    ("the rest of a page (PageProcessor)", (r"^PageProcessor\.",)),
    ("pops, acks, reaps, engine loop", (r"^FastEngine\.", r"^AsyncLeaseBook\.",
                                        r"^AsyncFrontier\.")),
)
_COMPILED = tuple((name, tuple(re.compile(p) for p in patterns)) for name, patterns in STAGES)


def stage_of(frames: list[str]) -> str:
    for name, patterns in _COMPILED:
        if any(pattern.search(frame) for frame in frames for pattern in patterns):
            return name
    return "event loop and other"


def summarise(raw: Path) -> tuple[Counter[str], int, int]:
    """Samples per stage of the main thread, its total, and the other threads' total."""
    stages: Counter[str] = Counter()
    main = other = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count_text = line.rsplit(" ", 1)
        count, frames = int(count_text), stack.split(";")
        if not any("run_until_complete" in frame for frame in frames):
            other += count
            continue
        main += count
        stages[stage_of(frames)] += count
    return stages, main, other


def report(raw: Path, cpu_ms_page: float) -> None:
    """Print the stages as shares of the main thread and as µs of the page's CPU time."""
    stages, main, other = summarise(raw)
    if not main:
        print(f"py-spy: no sample of the main thread in {raw}")
        return
    print(f"\nfast engine, py-spy: {main} samples of the main thread, {other} of other threads; "
          f"process CPU {cpu_ms_page * 1000:.0f} µs/page, split by the main thread's shares:")
    for name, count in stages.most_common():
        share = count / main
        print(f"  {share * 100:5.1f} %  {share * cpu_ms_page * 1000:6.0f} µs/page  {name}")
