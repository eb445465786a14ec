"""How many Temporal calls one `tasks/update` makes, with and without a worker online.

    .venv/bin/python bench/update_calls.py

Parks a task on input with a worker, then answers it once through a server with the
embedded worker and once through an API-only server (no worker anywhere), counting
the RPCs the Temporal client made during the `tasks/update` from the SDK's metrics.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from bench_server import ask_ok
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from mcp_types import InputRequiredResult, Result
from procs import CallCounter
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server


def server(client: TemporalClient, queue: str, worker: bool) -> FastMCP:
    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(client=client, task_queue=queue, worker=worker))

    @mcp.tool(task=True)
    async def ask() -> str | InputRequiredResult:
        return ask_ok()

    return mcp


async def answer_once(client: TemporalClient, metrics: CallCounter, queue: str, worker: bool) -> str:
    async with Client(server(client, queue, worker=True)) as mcp_client:
        task = await call_tool_task(mcp_client, "ask")
        while (current := await task.status()).status != "input_required":
            await asyncio.sleep(0.05)
    (key,) = current.input_requests
    async with Client(server(client, queue, worker=worker)) as mcp_client:
        before = collections.Counter(metrics.snapshot())
        started = time.perf_counter()
        update = UpdateTaskRequest(
            params=UpdateTaskRequestParams(
                task_id=task.task_id, input_responses={key: {"action": "accept", "content": {}}}
            )
        )
        await mcp_client.session.send_request(update, Result)
        elapsed = time.perf_counter() - started
        calls = collections.Counter(metrics.snapshot()) - before
    ours = {op: n for op, n in calls.items() if not op.startswith(("Poll", "Respond", "Record"))}
    return f"worker online: {worker!s:5}  ack after {elapsed * 1000:6.0f} ms  client calls {dict(ours)}"


async def main() -> None:
    with TemporaryDirectory() as state:
        dev = await asyncio.to_thread(start_dev_server, db_path=Path(state) / "temporal.db", ui=False)
        try:
            metrics = CallCounter()
            client = await TemporalClient.connect(dev.address, runtime=metrics.runtime)
            for worker in (True, False):
                print(await answer_once(client, metrics, f"bench-{uuid.uuid4().hex[:8]}", worker))
        finally:
            dev.stop()


if __name__ == "__main__":
    asyncio.run(main())
