"""What the start-up check of FastMCP's internals costs a construction, the first and the rest.

    .venv/bin/python bench/upstream_check.py [--constructions 20] [--out FILE]

In this fresh process, times `--constructions` `TemporalTasksExtension(worker=False)` in a
row, then as many `McpTasksPlugin(server)` on a server with that extension: the first
construction runs `check_upstream()` (symbols, signatures, the live probes that start
throwaway FastMCP servers), the others find its result (what an extension still spends
after the first is reading its settings). Then times `check_upstream()` alone, and the check
run anew (`upstream_failure.__wrapped__`), which is what every construction paid before
the check ran once per process. Needs no Temporal server. Prints the report and writes it to
`--out` (default `bench/results/upstream_check.txt`). Target: <= 10 ms per construction after
the first.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from fastmcp import FastMCP

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension
from fastmcp_temporal._upstream_check import check_upstream, upstream_failure

RESULTS = Path(__file__).parent / "results" / "upstream_check.txt"


def milliseconds(make: Callable[[], object], times: int) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        make()
        took.append((time.perf_counter() - started) * 1000)
    return took


def line(label: str, took: list[float]) -> str:
    return (
        f"{label:<44} median {statistics.median(took):8.3f} ms   max {max(took):8.3f} ms   (n={len(took)})"
    )


def report(constructions: int) -> str:
    extensions = milliseconds(lambda: TemporalTasksExtension(worker=False), constructions)
    server = FastMCP("bench")
    server.add_extension(TemporalTasksExtension(worker=False))
    plugins = milliseconds(lambda: McpTasksPlugin(server), constructions)
    checks = milliseconds(check_upstream, constructions)
    anew = milliseconds(upstream_failure.__wrapped__, 5)
    return "\n".join([
        f"bench/upstream_check.py, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}",
        f"{'first TemporalTasksExtension() (runs the check)':<44} {extensions[0]:8.3f} ms",
        line("TemporalTasksExtension() after the first", extensions[1:]),
        line("McpTasksPlugin(server) after the first", plugins),
        line("check_upstream() after the first", checks),
        line("the check run anew (each construction before)", anew),
    ]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--constructions", type=int, default=20, help="constructions of each, in a row")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the text file the report is written to")
    options = parser.parse_args()
    text = report(options.constructions)
    print(text, end="")
    options.out.write_text(text)


if __name__ == "__main__":
    main()
