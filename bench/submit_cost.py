"""Where a submit's time goes: what each part of the workflow start adds, one at a time.

    .venv/bin/python bench/submit_cost.py [--calls 600]

One server, one dev server, one process. Each `call_tool_task` starts its workflow with
one part left out, in turn (eager start, the searchable attributes, the memo, the UI
summary and details), so a noisy machine slows every variant alike. Prints the p50 of
the submit and of the `start_workflow` inside it per variant, next to a `tools/call` of a
plain tool on the same server (the MCP floor). Leaving a part out is for measuring only:
the UI, the operator CLI and `tasks/get` need each of them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import time
import uuid
from typing import Any

from bench_server import add_trivial_tools
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver._server import start_dev_server

VARIANTS: tuple[tuple[str, ...], ...] = (
    (),
    ("request_eager_start",),
    ("search_attributes",),
    ("memo",),
    ("static_summary", "static_details"),
)


async def measure(calls: int) -> None:
    server = await asyncio.to_thread(start_dev_server, ui=False)
    try:
        temporal = await TemporalClient.connect(server.address)
        left_out: list[tuple[str, ...]] = [()]
        starts: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
        submits: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
        start_workflow = temporal.start_workflow

        async def start_without(*args: Any, **kwargs: Any) -> Any:
            for part in left_out[0]:
                kwargs[part] = False if part == "request_eager_start" else None
            t0 = time.perf_counter()
            handle = await start_workflow(*args, **kwargs)
            starts[left_out[0]].append(time.perf_counter() - t0)
            return handle

        temporal.start_workflow = start_without  # type: ignore[method-assign]
        mcp = FastMCP("bench")
        mcp.add_extension(TemporalTasksExtension(client=temporal, task_queue=f"bench-{uuid.uuid4().hex[:8]}"))
        add_trivial_tools(mcp)
        floor: list[float] = []
        async with Client(mcp) as client:
            for _ in range(10):  # warm up
                await (await call_tool_task(client, "trivial", {"n": 1})).result()
            starts.clear()
            for i in range(calls):
                left_out[0] = VARIANTS[i % len(VARIANTS)]
                t0 = time.perf_counter()
                task = await call_tool_task(client, "trivial", {"n": i})
                submits[left_out[0]].append(time.perf_counter() - t0)
                await task.result()
                t0 = time.perf_counter()
                await client.call_tool("no_task", {"n": i})
                floor.append(time.perf_counter() - t0)
        print(f"MCP floor (tools/call of a plain tool): {_ms(floor)} ms")
        print("| left out | submit p50 ms | start_workflow p50 ms |\n| --- | --- | --- |")
        for variant in VARIANTS:
            print(f"| {', '.join(variant) or 'nothing'} | {_ms(submits[variant])} | {_ms(starts[variant])} |")
    finally:
        server.stop()


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600)
    asyncio.run(measure(parser.parse_args().calls))


if __name__ == "__main__":
    main()
