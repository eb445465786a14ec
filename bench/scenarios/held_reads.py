"""How soon does a waiting client see its task finish, with reads held and without?

Runs one task at a time on the run's dev server, the worker in this process, a real
`fastmcp.Client` over the in-memory
transport. Each task's tool (poll interval 5 s, the default) waits until released at a
random moment 1 to 8 s after it starts, while its client polls; the figure is the time from
the tool's return to the client's observing the result, for two clients: `fastmcp.Client`'s
`call_tool` (it waits min(backoff from 20 ms, pollIntervalMs) between reads) and a client
that waits exactly the advertised `pollIntervalMs` between reads. Each with the defaults
(reads held) and with `read_hold=0, reread_hold=0` (every read answered at once, as before
reads were held): the paired baseline, in the same run.

    .venv/bin/python -m bench run held_reads [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from datetime import timedelta
from typing import Any

from fastmcp import Client
from fastmcp_tasks.client import call_tool_task

from bench.drivers import tasks_get
from bench.harness import dev_server, task_server
from bench.metrics import percentiles

QUESTION = "How soon does a waiting client see its task finish, with reads held and without (the baseline)?"
QUICK = {"samples": 2}
SETTINGS: dict[str, dict[str, Any]] = {
    "held (defaults)": {},
    "not held (read_hold=0, reread_hold=0)": {"read_hold": timedelta(0), "reread_hold": timedelta(0)},
}
RELEASE_AFTER = (1.0, 8.0)  # seconds after the tool starts
TERMINAL = ("completed", "failed", "cancelled")


async def _fixed_interval_client(client: Client, task_id: str) -> None:
    """Read until the task ends, waiting exactly the advertised `pollIntervalMs` between reads."""
    while True:
        read = await tasks_get(client, task_id)
        if read.status in TERMINAL:
            return
        await asyncio.sleep((read.poll_interval_ms or 0) / 1000)


async def _samples(address: str, settings: dict[str, Any], samples: int) -> dict[str, list[float]]:
    mcp = task_server(address=address, **settings)
    returned: list[float] = []

    @mcp.tool(task=True)
    async def waits(seconds: float) -> str:
        await asyncio.sleep(seconds)
        returned.append(time.perf_counter())
        return "done"

    seen: dict[str, list[float]] = {"fastmcp.Client": [], "fixed interval": []}
    async with Client(mcp) as client:
        for _ in range(samples):
            await client.call_tool("waits", {"seconds": random.uniform(*RELEASE_AFTER)})
            seen["fastmcp.Client"].append(time.perf_counter() - returned[-1])
            task = await call_tool_task(client, "waits", {"seconds": random.uniform(*RELEASE_AFTER)})
            await asyncio.sleep((task.create_result.poll_interval_ms or 0) / 1000)
            await _fixed_interval_client(client, task.task_id)
            seen["fixed interval"].append(time.perf_counter() - returned[-1])
    return seen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=10, help="tasks per client kind and setting")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"tool_poll_interval_ms": 5000}
    async with dev_server(in_memory=True) as temporal:
        for name, settings in SETTINGS.items():
            seen = await _samples(temporal.address, settings, args.samples)
            report[name] = {
                kind: {
                    "return_to_seen_s": percentiles(times, digits=3),
                    "raw_s": [round(t, 3) for t in times],
                }
                for kind, times in seen.items()
            }
    return report
