"""Where a submit's time goes: what each part of the workflow start adds, one at a time.

    .venv/bin/python bench/submit_cost.py [--calls 600]

One server, one dev server, one process. Each `call_tool_task` starts its workflow with
one part left out, in turn (eager start, the searchable attributes, the memo, the UI
summary and details), so a noisy machine slows every variant alike. Prints the p50 of
the submit and of the `start_workflow` inside it per variant, next to a `tools/call` of a
plain tool on the same server (the MCP floor). Leaving a part out is for measuring only:
the UI, the operator CLI and `tasks/get` need each of them.

    .venv/bin/python bench/submit_cost.py --cpu [--bursts 8] [--burst 300]

measures what the dev server spends instead: its CPU milliseconds per task over bursts of
this project's trivial tasks, each burst with parts left out (never the memo, which reads
need to find the task), and of bare workflows
(`bench/bare_engine.py`, a tiny input) in between, all in this process.

    .venv/bin/python bench/submit_cost.py --floors [--calls 200] [--out FILE]

puts the submit beside its floors, paired call by call: a bare start timed on its own and
a plain `tools/call`, and a `tools/call` whose tool starts a bare workflow (the floor
engine's `bare_start`), each with eager start and without. With eager start, the first
workflow task comes back in the start's answer and this process's worker runs it at once,
before a response sent from the same process leaves: a start inside a request pays that,
one timed on its own does not, so their sum is no floor for an engine that starts eagerly.
`--out` writes the figures to a file under bench/results.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bare_engine import bare_worker, start
from bench_server import add_trivial_tools
from drivers import bounded, costs
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from marks import Marks
from procs import process_tree
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

VARIANTS: tuple[tuple[str, ...], ...] = (
    (),
    ("request_eager_start",),
    ("search_attributes",),
    ("memo",),
    ("static_summary", "static_details"),
)
# A read of a task whose start had no memo finds no task: `--cpu` keeps it in every burst.
CPU_VARIANTS: tuple[tuple[str, ...], ...] = (
    (),
    ("search_attributes",),
    ("static_summary", "static_details"),
    ("search_attributes", "static_summary", "static_details"),
)


class _Starts:
    """The server's `start_workflow`, leaving out the parts `left_out` names, and timed."""

    def __init__(self, temporal: TemporalClient) -> None:
        self.left_out: tuple[str, ...] = ()
        self.times: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
        self._start_workflow = temporal.start_workflow
        temporal.start_workflow = self._start_without  # type: ignore[method-assign]

    async def _start_without(self, *args: Any, **kwargs: Any) -> Any:
        for part in self.left_out:
            kwargs[part] = False if part == "request_eager_start" else None
        t0 = time.perf_counter()
        handle = await self._start_workflow(*args, **kwargs)
        self.times[self.left_out].append(time.perf_counter() - t0)
        return handle


RESULTS = Path(__file__).parent / "results"


def _server(temporal: TemporalClient) -> FastMCP:
    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(client=temporal, task_queue=f"bench-{uuid.uuid4().hex[:8]}"))
    add_trivial_tools(mcp)
    return mcp


async def measure(calls: int) -> None:
    server = await asyncio.to_thread(start_dev_server, ui=False)
    try:
        temporal = await TemporalClient.connect(server.address)
        starts = _Starts(temporal)
        submits: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
        mcp = _server(temporal)
        floor: list[float] = []
        async with Client(mcp) as client:
            for _ in range(10):  # warm up
                await (await call_tool_task(client, "trivial", {"n": 1})).result()
            starts.times.clear()
            for i in range(calls):
                starts.left_out = VARIANTS[i % len(VARIANTS)]
                t0 = time.perf_counter()
                task = await call_tool_task(client, "trivial", {"n": i})
                submits[starts.left_out].append(time.perf_counter() - t0)
                await task.result()
                t0 = time.perf_counter()
                await client.call_tool("no_task", {"n": i})
                floor.append(time.perf_counter() - t0)
        print(f"MCP floor (tools/call of a plain tool): {_ms(floor)} ms")
        print("| left out | submit p50 ms | start_workflow p50 ms |\n| --- | --- | --- |")
        for variant in VARIANTS:
            print(
                f"| {', '.join(variant) or 'nothing'} | {_ms(submits[variant])} | {_ms(starts.times[variant])} |"
            )
    finally:
        server.stop()


async def measure_cpu(bursts: int, n: int) -> None:
    server = await asyncio.to_thread(start_dev_server, ui=False)
    try:
        temporal = await TemporalClient.connect(server.address)
        starts = _Starts(temporal)
        mcp, bare_queue = _server(temporal), f"bare-{uuid.uuid4().hex[:8]}"
        dev_server = process_tree(server.pid)
        cpu: dict[str, list[float]] = collections.defaultdict(list)
        with tempfile.TemporaryDirectory() as marks:
            async with bare_worker(temporal, bare_queue, Marks(Path(marks))), Client(mcp) as client:

                async def ours(i: int) -> None:
                    await (await call_tool_task(client, "trivial", {"n": i})).result()

                async def bare(i: int) -> None:
                    await (await start(temporal, bare_queue, "BareTrivial", i)).result()

                await _cpu_per_task(dev_server, n, ours)  # warm up
                for _ in range(bursts):
                    cpu["bare workflow"].append(await _cpu_per_task(dev_server, n, bare))
                    for variant in CPU_VARIANTS:
                        starts.left_out = variant
                        cpu[", ".join(variant) or "nothing"].append(await _cpu_per_task(dev_server, n, ours))
        print("| left out | dev server CPU ms per task (median of bursts) |\n| --- | --- |")
        for name, values in cpu.items():
            print(f"| {name} | {statistics.median(values):.2f} |")
    finally:
        server.stop()


async def measure_floors(calls: int, out: str | None) -> None:
    server = await asyncio.to_thread(start_dev_server, ui=False)
    try:
        temporal = await TemporalClient.connect(server.address)
        mcp, bare_queue = _server(temporal), f"bare-{uuid.uuid4().hex[:8]}"

        @mcp.tool
        async def bare_start(n: int, eager: bool) -> str:
            """The floor engine's `bare_start`, on the client whose worker runs bare workflows here."""
            return (await start(temporal, bare_queue, "BareTrivial", n, eager=eager)).id

        times: dict[str, list[float]] = collections.defaultdict(list)

        async def timed(name: str, call: Awaitable[Any]) -> Any:
            t0 = time.perf_counter()
            result = await call
            times[name].append(time.perf_counter() - t0)
            return result

        with tempfile.TemporaryDirectory() as marks:
            async with bare_worker(temporal, bare_queue, Marks(Path(marks))), Client(mcp) as client:
                for i in range(calls + 10):  # the first ten warm up
                    if i == 10:
                        times.clear()
                    for eager in (True, False):
                        suffix = "eager" if eager else "not eager"
                        handle = await timed(
                            f"bare start, {suffix}",
                            start(temporal, bare_queue, "BareTrivial", i, eager=eager),
                        )
                        await handle.result()
                        started = await timed(
                            f"tools/call starting a bare workflow, {suffix}",
                            client.call_tool("bare_start", {"n": i, "eager": eager}),
                        )
                        await temporal.get_workflow_handle(started.data).result()
                    await timed("plain tools/call", client.call_tool("no_task", {"n": i}))
                    task = await timed("submit (eager)", call_tool_task(client, "trivial", {"n": i}))
                    await task.result()
        report = _floors_report(times)
        print(json.dumps(report, indent=2))
        if out:
            (RESULTS / out).write_text(json.dumps(report, indent=2) + "\n")
    finally:
        server.stop()


def _floors_report(times: dict[str, list[float]]) -> dict[str, Any]:
    p50 = {name: round(statistics.median(values) * 1000, 2) for name, values in times.items()}
    submit = p50["submit (eager)"]
    return {
        "p50_ms": p50,
        "submit_over": {
            "bare start + plain tools/call, eager": round(
                submit / (p50["bare start, eager"] + p50["plain tools/call"]), 2
            ),
            "tools/call starting a bare workflow, eager": round(
                submit / p50["tools/call starting a bare workflow, eager"], 2
            ),
        },
        "start_in_a_request_over_apart": {
            eager: round(
                p50[f"tools/call starting a bare workflow, {eager}"]
                / (p50[f"bare start, {eager}"] + p50["plain tools/call"]),
                2,
            )
            for eager in ("eager", "not eager")
        },
        "calls": len(times["submit (eager)"]),
    }


async def _cpu_per_task(pids: list[int], n: int, run: Callable[[int], Awaitable[None]]) -> float:
    """The processes' CPU milliseconds per task over `n` tasks run at once, 50 at a time."""
    limit = asyncio.Semaphore(50)
    async with costs([], {"measured": pids}, n) as out:
        await asyncio.gather(*(bounded(limit, run(i)) for i in range(n)))
    return out["cpu_ms_per_task"]["measured"]


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--cpu", action="store_true", help="the dev server's CPU per task instead")
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--floors", action="store_true", help="the submit beside its floors instead")
    parser.add_argument("--out", help="with --floors: a file name under bench/results for the figures")
    args = parser.parse_args()
    if args.floors:
        asyncio.run(measure_floors(args.calls, args.out))
    else:
        asyncio.run(measure_cpu(args.bursts, args.burst) if args.cpu else measure(args.calls))


if __name__ == "__main__":
    main()
