"""How soon a durable call ends after its workflow closes while its question is open.

    .venv/bin/python bench/close_ends_call.py [--rounds 10] [--out close_ends_call.json]

Starts its own dev server and, in this process, a FastMCP server with `sync_calls="workflow"`
(`task_ttl` 3 s, embedded worker) and a handshake-era `fastmcp.Client` that declares
elicitation and never answers. Each round calls a tool that asks one question, waits until
the caller holds it, then closes the call's workflow one way: its TTL (nothing is done),
an operator's cancel, or an operator's terminate. Measured: from the workflow's close
(its close event's time, Temporal's clock, the same machine's) to the moment the caller
gets the call's error. Promise: within about a second. Writes `bench/results/<out>`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from fastmcp import Client, Context, FastMCP
from fastmcp.client.elicitation import ElicitResult
from mcp.shared.exceptions import MCPError
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

RESULTS = Path(__file__).parent / "results"
TTL = timedelta(seconds=3)
WAYS = ("ttl", "cancel", "terminate")


async def asks(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        schema = {"type": "object", "properties": {"value": {"type": "string"}}}
        question = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(message="name?", requested_schema=schema)
        )
        return mcp_types.InputRequiredResult(input_requests={"name": question})
    return "answered"


async def one_round(client: Client, temporal: TemporalClient, task_queue: str, way: str, asked: list[anyio.Event]) -> float:
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


async def main(address: str, rounds: int, out: str) -> None:
    temporal = await TemporalClient.connect(address)
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    for way in WAYS:
        for round_ in range(rounds):
            task_queue = f"close-bench-{way}-{round_}"
            extension = TemporalTasksExtension(
                client=temporal, task_queue=task_queue, sync_calls="workflow", task_ttl=TTL,
                shutdown_grace=timedelta(0),
            )
            server = FastMCP("close-bench")
            server.add_extension(extension)
            server.tool(task=True)(asks)
            asked: list[anyio.Event] = []

            async def never_answers(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
                asked[-1].set()
                await anyio.sleep_forever()
                raise AssertionError("unreachable")

            async with Client(server, mode="legacy", elicitation_handler=never_answers) as client:
                seconds[way].append(await one_round(client, temporal, task_queue, way, asked))
    report = {
        "what": "seconds from a durable call's workflow close (its question open) to the caller's error",
        "rounds": rounds,
        "load": os.getloadavg(),
        "ways": {
            way: {"p50": statistics.median(values), "max": max(values), "seconds": values}
            for way, values in seconds.items()
        },
    }
    (RESULTS / out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["ways"], indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default="close_ends_call.json", help="file name under bench/results")
    arguments = parser.parse_args()
    dev = start_dev_server(ui=False)
    try:
        anyio.run(main, dev.address, arguments.rounds, arguments.out)
    finally:
        dev.stop()
