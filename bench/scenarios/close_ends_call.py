"""How soon a durable call ends after its workflow closes while its question is open.

    .venv/bin/python -m bench run close_ends_call [--rounds 10]

On the run's dev server (in memory), in this process, a FastMCP server with
`sync_calls="workflow"` (`task_ttl` 3 s, embedded worker) and a `fastmcp.Client` of the 2025-11-25
protocol (`mode="legacy"`) that declares elicitation and never answers. Each round calls a tool
that asks one question, waits until the caller holds it, then closes the call's workflow one
way: its TTL (nothing is done), an operator's cancel, or an operator's terminate. Measured: from the workflow's close
(its close event's time, Temporal's clock, the same machine's) to the moment the caller
gets the call's error. Promise: within about a second.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from typing import Any

import anyio
import mcp_types
from fastmcp import Client, Context
from fastmcp.client.elicitation import ElicitResult
from mcp.shared.exceptions import MCPError
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from bench.bench_server import ask_ok
from bench.harness import dev_server, task_server
from bench.metrics import percentiles

QUESTION = (
    "How soon after a durable call's workflow closes (TTL, cancel, terminate) does the waiting caller "
    "get its error?"
)
QUICK = {"rounds": 2}
TTL = timedelta(seconds=3)
WAYS = ("ttl", "cancel", "terminate")


async def asks(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        return ask_ok("name?", {"value": {"type": "string"}})
    return "answered"


async def one_round(
    client: Client, temporal: TemporalClient, task_queue: str, way: str, asked: list[anyio.Event]
) -> float:
    """Seconds from the workflow's close to the call's error."""
    asked.append(anyio.Event())
    ended_at: list[float] = []

    async def call() -> None:
        try:
            await client.call_tool("asks")
        except MCPError:
            ended_at.append(time.time())

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await asked[-1].wait()
            handle = await _running_call(temporal, task_queue)
            if way == "cancel":
                await handle.cancel()
            elif way == "terminate":
                await handle.terminate(reason="bench")
        while (description := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await anyio.sleep(0.05)
    assert description.close_time is not None
    return ended_at[0] - description.close_time.timestamp()


async def _running_call(temporal: TemporalClient, task_queue: str) -> WorkflowHandle[Any, Any]:
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    while True:
        found = [execution async for execution in temporal.list_workflows(query)]
        if found:
            return temporal.get_workflow_handle(found[0].id, run_id=found[0].run_id)
        await anyio.sleep(0.05)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server(in_memory=True) as dev:
        temporal = await TemporalClient.connect(dev.address)
        seconds = {
            way: [await _one_call(temporal, way, round_) for round_ in range(args.rounds)] for way in WAYS
        }
    return {
        "what": "seconds from a durable call's workflow close (its question open) to the caller's error",
        "ways": {way: percentiles(values, digits=3) | {"seconds": values} for way, values in seconds.items()},
    }


async def _one_call(temporal: TemporalClient, way: str, round_: int) -> float:
    """One call closed `way`: seconds from its workflow's close to the caller's error."""
    task_queue = f"close-bench-{way}-{round_}"
    server = task_server(
        "close-bench",
        client=temporal,
        task_queue=task_queue,
        sync_calls="workflow",
        task_ttl=TTL,
        shutdown_grace=timedelta(0),
    )
    server.tool(task=True)(asks)
    asked: list[anyio.Event] = []

    async def never_answers(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        asked[-1].set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with Client(server, mode="legacy", elicitation_handler=never_answers) as client:
        return await one_round(client, temporal, task_queue, way, asked)
