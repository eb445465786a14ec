"""What `sync_calls="workflow"` costs a trivial synchronous call, against inline (its baseline).

    .venv/bin/python -m bench run sync_calls [--rounds 50] [--burst 200]

Two servers in this process, each with its embedded worker, on the run's dev server, the same
trivial `task=True` tool on both: one serves a client that does not opt in to tasks inline (the
default), the other through a workflow. Measured (ms) over sequential calls: inline, through a
workflow, and, for scale, the same call as a task by a client that opts in (create, poll,
result); and the throughput of a burst of calls at once through workflows.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, Literal

from fastmcp import Client, FastMCP

from bench.harness import dev_server, task_server
from bench.metrics import percentiles, timed_ms

QUESTION = "What does running a plain (non-task) call through a workflow cost, against inline?"
QUICK = {"rounds": 10, "burst": 50}


class NoTasksClient(Client):
    """A client that does not declare the tasks extension, like most clients in use."""

    _auto_internal_extensions = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--burst", type=int, default=200, help="calls through workflows at once")


def build(address: str, sync_calls: Literal["inline", "workflow"]) -> FastMCP:
    mcp = task_server(address=address, sync_calls=sync_calls)

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        return n

    return mcp


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server() as temporal:
        inline, durable = build(temporal.address, "inline"), build(temporal.address, "workflow")
        async with (
            NoTasksClient(inline) as inline_client,
            NoTasksClient(durable) as durable_client,
            Client(durable) as tasks_client,
        ):
            for client in (inline_client, durable_client):
                await client.call_tool("trivial", {"n": 0})  # warm up
            samples = {
                "inline_call_ms": await timed_ms(
                    args.rounds, lambda: inline_client.call_tool("trivial", {"n": 1})
                ),
                "workflow_call_ms": await timed_ms(
                    args.rounds, lambda: durable_client.call_tool("trivial", {"n": 1})
                ),
                "task_end_to_end_ms": await timed_ms(
                    args.rounds, lambda: tasks_client.call_tool("trivial", {"n": 1})
                ),
            }
            began = time.perf_counter()
            await asyncio.gather(*(durable_client.call_tool("trivial", {"n": i}) for i in range(args.burst)))
            throughput = args.burst / (time.perf_counter() - began)
    result: dict[str, Any] = {name: percentiles(values) for name, values in samples.items()}
    return result | {"workflow_throughput_calls_per_s": round(throughput, 1)}
