"""Where a task's time goes, end to end, through an unmodified fastmcp.Client.

Starts its own file-backed (WAL) dev server on free loopback ports, runs a server
with the embedded worker in this process, and prints p50/p95 in ms for:

- a plain task=False call (the in-memory transport's floor);
- a trivial task tool end to end (`client.call_tool`, create -> poll -> result);
- submission alone (`call_tool_task`: validate, snapshot, durable start);
- `tasks/get` on a running task (describe + memo; no worker involved);
- throughput of N trivial tasks submitted at once.

    .venv/bin/python bench/latency.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server


async def timed(rounds: int, action: Callable[[], Awaitable[object]]) -> str:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - start) * 1000)
    cuts = statistics.quantiles(samples, n=20)
    return f"p50 {statistics.median(samples):6.1f}  p95 {cuts[18]:6.1f}"


def build(address: str) -> tuple[FastMCP, asyncio.Event]:
    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}"))
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


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        server = await asyncio.to_thread(start_dev_server, db_path=Path(state) / "temporal.db", ui=False)
        try:
            mcp, gate = build(server.address)
            async with Client(mcp) as client:
                await client.call_tool("trivial", {"n": 0})  # warm up
                print(
                    f"plain call            {await timed(rounds, lambda: client.call_tool('plain', {'n': 1}))}"
                )
                print(
                    f"task end to end       {await timed(rounds, lambda: client.call_tool('trivial', {'n': 1}))}"
                )
                print(
                    f"submit                {await timed(rounds, lambda: call_tool_task(client, 'trivial', {'n': 1}))}"
                )
                running = await call_tool_task(client, "waits")
                print(f"tasks/get (running)   {await timed(rounds, running.status)}")
                gate.set()
                count = 200
                start = time.perf_counter()
                await asyncio.gather(*(client.call_tool("trivial", {"n": i}) for i in range(count)))
                print(
                    f"throughput            {count / (time.perf_counter() - start):6.1f} tasks/s ({count} at once)"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
