"""What the start-up check of FastMCP's internals costs a construction, the first and the rest.

    .venv/bin/python -m bench run upstream_check [--constructions 20]

In this fresh process (the runner's; the check must not have run in it yet), times
`--constructions` `TemporalTasksExtension(worker=False)` in a
row, then as many `McpTasksPlugin(server)` on a server with that extension: the first
construction runs `check_upstream()` (symbols, signatures, the live probes that start
throwaway FastMCP servers), the others find its result (what an extension still spends
after the first is reading its settings). Then times `check_upstream()` alone, and the check
run anew (`upstream_failure.__wrapped__`), which is what every construction paid before
the check ran once per process. Needs no Temporal server. Target: <= 10 ms per construction
after the first.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP

from bench.metrics import percentiles
from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension
from fastmcp_temporal._upstream_check import check_upstream, upstream_failure

QUESTION = "What does the start-up check of FastMCP's internals cost a construction, the first and the rest?"
QUICK = {"constructions": 5}


def milliseconds(make: Callable[[], object], times: int) -> list[float]:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        make()
        took.append((time.perf_counter() - started) * 1000)
    return took


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--constructions", type=int, default=20, help="constructions of each, in a row")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    extensions = milliseconds(lambda: TemporalTasksExtension(worker=False), args.constructions)
    server = FastMCP("bench")
    server.add_extension(TemporalTasksExtension(worker=False))
    return {
        "first_extension_ms": round(extensions[0], 3),
        "extension_after_first_ms": percentiles(extensions[1:], digits=3),
        "plugin_after_first_ms": percentiles(
            milliseconds(lambda: McpTasksPlugin(server), args.constructions), digits=3
        ),
        "check_after_first_ms": percentiles(milliseconds(check_upstream, args.constructions), digits=3),
        "check_anew_ms": percentiles(milliseconds(upstream_failure.__wrapped__, 5), digits=3),
        "target_after_first_ms": 10,
    }
