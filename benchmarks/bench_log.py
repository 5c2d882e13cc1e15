"""Log records per second: JSON to stdout-like stream, to a rolling file, two processes on one file.

Run: .venv/bin/python benchmarks/bench_log.py [--records N]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy_cluster.log import configure_logging
from scrapy_cluster.settings import load_settings

_WRITER = """
import sys
sys.path.insert(0, {here!r})
from bench_log import write_records
write_records({overrides!r}, int(sys.argv[1]))
"""


def file_overrides(log_dir: Path, json_lines: bool) -> dict[str, Any]:
    return {"LOGGER_NAME": "bench", "LOG_STDOUT": False, "LOG_DIR": str(log_dir),
            "LOG_FILE": "bench.log", "LOG_JSON": json_lines, "LOG_MAX_BYTES": 1024 * 1024,
            "LOG_BACKUPS": 1000}


def write_records(overrides: dict[str, Any], count: int) -> float:
    """Configure from ``overrides``, log ``count`` records; return the seconds taken."""
    logger = configure_logging(load_settings("kafka-monitor", environ={}, overrides=overrides))
    started_s = time.perf_counter()
    for seq in range(count):
        logger.info("crawled page", extra={"url": "http://example.com/page", "seq": seq,
                                           "status_code": 200})
    elapsed_s = time.perf_counter() - started_s
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    return elapsed_s


def bench_stream(count: int) -> float:
    overrides = {"LOGGER_NAME": "bench", "LOG_JSON": True}
    sys.stdout, real_stdout = io.StringIO(), sys.stdout
    try:
        return count / write_records(overrides, count)
    finally:
        sys.stdout = real_stdout


def bench_two_processes(log_dir: Path, count: int) -> float:
    code = _WRITER.format(here=str(Path(__file__).parent),
                          overrides=file_overrides(log_dir, json_lines=True))
    started_s = time.perf_counter()
    writers = [subprocess.Popen([sys.executable, "-c", code, str(count)]) for _ in range(2)]
    if any(writer.wait() != 0 for writer in writers):
        raise SystemExit("a writer process failed")
    return 2 * count / (time.perf_counter() - started_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    count = parser.parse_args().records
    print(f"records per run: {count}")
    print(f"{'JSON to a stream:':<34}{bench_stream(count):>10,.0f} records/s")
    for json_lines in (False, True):
        with tempfile.TemporaryDirectory() as log_dir:
            rate = count / write_records(file_overrides(Path(log_dir), json_lines), count)
        label = ("JSON" if json_lines else "human") + " to a locked rolling file:"
        print(f"{label:<34}{rate:>10,.0f} records/s")
    with tempfile.TemporaryDirectory() as log_dir:
        rate = bench_two_processes(Path(log_dir), count)
    print(f"{'JSON, 2 processes, one file:':<34}{rate:>10,.0f} records/s "
          "(both together, including start-up)")


if __name__ == "__main__":
    main()
