"""How many Temporal calls one `tasks/update` makes, with and without a worker online.

    .venv/bin/python -m bench run update_calls [--rounds 1]

Parks a task on input with a worker, then answers it once through a server with the
embedded worker and once through an API-only server (no worker anywhere), counting
the RPCs the Temporal client made during the `tasks/update` from the SDK's metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
import uuid
from typing import Any

from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.client import Client as TemporalClient

from bench.bench_server import ask_ok
from bench.drivers import tasks_update
from bench.harness import dev_server
from bench.metrics import CallCounter, percentiles
from fastmcp_temporal import TemporalTasksExtension

QUESTION = (
    "How many Temporal calls, and how long, does one tasks/update take with and without a worker online?"
)
QUICK = {"rounds": 1}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="answers per setting")


def server(client: TemporalClient, queue: str, worker: bool) -> FastMCP:
    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(client=client, task_queue=queue, worker=worker))

    @mcp.tool(task=True)
    async def ask() -> str | InputRequiredResult:
        return ask_ok()

    return mcp


async def answer_once(
    client: TemporalClient, metrics: CallCounter, queue: str, worker: bool
) -> tuple[float, dict[str, int]]:
    """Park a task on input, then answer it through a server with or without a worker: ms, client calls."""
    async with Client(server(client, queue, worker=True)) as mcp_client:
        task = await call_tool_task(mcp_client, "ask")
        while (current := await task.status()).status != "input_required":
            await asyncio.sleep(0.05)
    (key,) = current.input_requests
    async with Client(server(client, queue, worker=worker)) as mcp_client:
        before = collections.Counter(metrics.snapshot())
        started = time.perf_counter()
        await tasks_update(mcp_client, task.task_id, {key: {"action": "accept", "content": {}}})
        elapsed = time.perf_counter() - started
        calls = collections.Counter(metrics.snapshot()) - before
    ours = {op: n for op, n in calls.items() if not op.startswith(("Poll", "Respond", "Record"))}
    return elapsed * 1000, ours


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with dev_server() as temporal:
        metrics = CallCounter()
        client = await TemporalClient.connect(temporal.address, runtime=metrics.runtime)
        for worker in (True, False):
            answers = [
                await answer_once(client, metrics, f"bench-{uuid.uuid4().hex[:8]}", worker)
                for _ in range(args.rounds)
            ]
            figures["worker_online" if worker else "no_worker"] = {
                "ack_ms": percentiles([ms for ms, _ in answers]),
                "client_calls": answers[-1][1],
            }
    return figures
