"""How evenly the two leg rate limits pace the legs they start.

    .venv/bin/python -m bench run rate_limits [--legs 12] [--rate 1]

On the run's dev server (in memory), for each limit in turn, one FastMCP server whose
embedded worker runs with it (`max_activities_per_second`, the worker's own;
`max_task_queue_activities_per_second`, enforced by Temporal), driven through a real
`fastmcp.Client`. Submits `--legs` trivial tasks at once and notes when each body starts:
reports the gaps between starts, the most starts within any 0.5 s, and the average rate.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from fastmcp import Client
from fastmcp_tasks.client import call_tool_task

from bench.harness import dev_server, task_server

QUESTION = "How evenly do the worker's and the task queue's leg rate limits pace the legs they start?"
QUICK = {"legs": 4, "rate": 2.0}
LIMITS = ("max_activities_per_second", "max_task_queue_activities_per_second")
WINDOW = 0.5


async def starts_under(address: str, limit: str, options: argparse.Namespace) -> list[float]:
    """When each of `--legs` legs started, in seconds from the first, under `limit`."""
    mcp = task_server("rate-limits-bench", address=address, **{limit: options.rate})
    started: list[float] = []

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        started.append(time.monotonic())
        return n

    async with Client(mcp) as client:
        tasks = [await call_tool_task(client, "trivial", {"n": n}) for n in range(options.legs)]
        for task in tasks:
            await task.wait(timeout=120 + options.legs / options.rate)
    first = min(started)
    return sorted(round(at - first, 3) for at in started)


def summary(starts: list[float]) -> dict[str, Any]:
    gaps = [round(b - a, 3) for a, b in zip(starts, starts[1:], strict=False)]
    most = max(sum(1 for other in starts if at <= other < at + WINDOW) for at in starts)
    return {
        "starts_s": starts,
        "gaps_s": gaps,
        f"most_starts_within_{WINDOW}s": most,
        "average_per_s": round((len(starts) - 1) / starts[-1], 2) if starts[-1] else None,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--legs", type=int, default=12, help="tasks submitted at once")
    parser.add_argument("--rate", type=float, default=1.0, help="the limit, legs per second")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server(in_memory=True) as temporal:
        return {limit: summary(await starts_under(temporal.address, limit, args)) for limit in LIMITS}
