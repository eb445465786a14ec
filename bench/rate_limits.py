"""How evenly the two leg rate limits pace the legs they start.

    .venv/bin/python bench/rate_limits.py [--legs 12] [--rate 1] [--out FILE]

Starts its own in-memory dev server and, for each limit in turn, one FastMCP server whose
embedded worker runs with it (`max_activities_per_second`, the worker's own;
`max_task_queue_activities_per_second`, enforced by Temporal), driven through a real
`fastmcp.Client`. Submits `--legs` trivial tasks at once and notes when each body starts:
reports the gaps between starts, the most starts within any 0.5 s, and the average rate.
Writes `bench/results/rate_limits.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

RESULTS = Path(__file__).parent / "results" / "rate_limits.json"
WINDOW = 0.5


async def starts_under(address: str, limit: str, options: argparse.Namespace) -> list[float]:
    """When each of `--legs` legs started, in seconds from the first, under `limit`."""
    extension = TemporalTasksExtension(
        address=address, task_queue=f"rate-{uuid.uuid4().hex[:8]}", **{limit: options.rate}
    )
    mcp = FastMCP("rate-limits-bench")
    mcp.add_extension(extension)
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


async def main(options: argparse.Namespace) -> None:
    server = await anyio.to_thread.run_sync(lambda: start_dev_server(ui=False))
    try:
        results: dict[str, Any] = {"legs": options.legs, "rate": options.rate, "load_average_at_start": options.load}
        for limit in ("max_activities_per_second", "max_task_queue_activities_per_second"):
            results[limit] = summary(await starts_under(server.address, limit, options))
    finally:
        await anyio.to_thread.run_sync(server.stop)
    print(json.dumps(results, indent=2))
    options.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legs", type=int, default=12, help="tasks submitted at once")
    parser.add_argument("--rate", type=float, default=1.0, help="the limit, legs per second")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON file the result is written to")
    options = parser.parse_args()
    options.load = round(os.getloadavg()[0], 2)
    anyio.run(main, options)
