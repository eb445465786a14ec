"""What `sync_calls="workflow"` costs a trivial synchronous call, against inline.

Starts its own file-backed (WAL) dev server on free loopback ports and two servers in
this process, each with its embedded worker, the same trivial `task=True` tool on
both: one serves a client that does not opt in to tasks inline (the default), the
other through a workflow. Prints p50/p95 in ms over ROUNDS sequential calls (and, for
scale, the same call as a task by a client that opts in: create, poll, result), and
the throughput of N calls at once through workflows.

    .venv/bin/python bench/sync_calls.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Literal

from fastmcp import Client, FastMCP
from latency import timed  # bench/ is the script's own folder on sys.path

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server


class NoTasksClient(Client):
    """A client that does not declare the tasks extension, like most clients in use."""

    _auto_internal_extensions = False


def build(address: str, sync_calls: Literal["inline", "workflow"]) -> FastMCP:
    mcp = FastMCP("bench")
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    mcp.add_extension(TemporalTasksExtension(address=address, task_queue=queue, sync_calls=sync_calls))

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        return n

    return mcp


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        server = await asyncio.to_thread(start_dev_server, db_path=Path(state) / "temporal.db", ui=False)
        try:
            inline, durable = build(server.address, "inline"), build(server.address, "workflow")
            async with (
                NoTasksClient(inline) as inline_client,
                NoTasksClient(durable) as durable_client,
                Client(durable) as tasks_client,
            ):
                for client in (inline_client, durable_client):
                    await client.call_tool("trivial", {"n": 0})  # warm up
                call_inline = lambda: inline_client.call_tool("trivial", {"n": 1})  # noqa: E731
                call_durable = lambda: durable_client.call_tool("trivial", {"n": 1})  # noqa: E731
                print(f"inline call           {await timed(rounds, call_inline)}")
                print(f"call via workflow     {await timed(rounds, call_durable)}")
                call_task = lambda: tasks_client.call_tool("trivial", {"n": 1})  # noqa: E731
                print(f"task end to end       {await timed(rounds, call_task)}")
                count = 200
                start = time.perf_counter()
                await asyncio.gather(*(durable_client.call_tool("trivial", {"n": i}) for i in range(count)))
                print(f"workflow throughput   {count / (time.perf_counter() - start):6.1f} calls/s ({count} at once)")
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
