"""Where a task's time goes, end to end, through an unmodified fastmcp.Client, same process.

    .venv/bin/python -m bench run latency [--rounds 50] [--burst 200]

One server with its embedded worker in this process, on the run's dev server. Measured (ms):
a plain `task=False` call (the in-memory transport's floor); a trivial task tool end to end
(`client.call_tool`: create, poll, result); submission alone (`call_tool_task`: validate,
snapshot, durable start); `tasks/get` on a running task (describe and memo, no worker); and
the throughput of a burst of trivial tasks submitted at once.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task

from bench.harness import dev_server, task_server
from bench.metrics import percentiles, timed_ms

QUESTION = (
    "Where does a trivial task's time go in one process: plain call, end to end, submit, tasks/get, burst?"
)
QUICK = {"rounds": 10, "burst": 50}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--burst", type=int, default=200, help="trivial tasks submitted at once")


def build(address: str) -> tuple[FastMCP, asyncio.Event]:
    mcp = task_server(address=address)
    gate = asyncio.Event()

    @mcp.tool
    def plain(n: int) -> int:
        return n

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        return n

    @mcp.tool(task=True)
    async def waits() -> str:
        await gate.wait()
        return "done"

    return mcp, gate


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server() as temporal:
        mcp, gate = build(temporal.address)
        async with Client(mcp) as client:
            await client.call_tool("trivial", {"n": 0})  # warm up
            figures: dict[str, Any] = {
                "plain_call_ms": await timed_ms(args.rounds, lambda: client.call_tool("plain", {"n": 1})),
                "end_to_end_ms": await timed_ms(args.rounds, lambda: client.call_tool("trivial", {"n": 1})),
                "submit_ms": await timed_ms(args.rounds, lambda: call_tool_task(client, "trivial", {"n": 1})),
            }
            running = await call_tool_task(client, "waits")
            figures["tasks_get_running_ms"] = await timed_ms(args.rounds, running.status)
            gate.set()
            began = time.perf_counter()
            await asyncio.gather(*(client.call_tool("trivial", {"n": i}) for i in range(args.burst)))
            throughput = args.burst / (time.perf_counter() - began)
    result: dict[str, Any] = {name: percentiles(samples) for name, samples in figures.items()}
    return result | {"throughput_tasks_per_s": round(throughput, 1)}
