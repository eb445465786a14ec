"""Where a submit's time goes: what each part of the workflow start adds, one at a time.

    .venv/bin/python -m bench run submit_cost [--calls 600]

One server on the run's dev server, one process. Each `call_tool_task` starts its workflow with
one part left out, in turn (eager start, the searchable attributes, the memo, the UI
summary and details), so a noisy machine slows every variant alike. Figures: the p50 of
the submit, of the `start_workflow` inside it and of the task's end to end (the submit to its
result) per variant, next to a `tools/call` of a plain tool on the same server (the MCP floor). Leaving a part out is for measuring only:
the UI, the operator CLI and `tasks/get` need each of them.

    .venv/bin/python -m bench run submit_cost --cpu [--bursts 8] [--burst 300]

measures what the dev server spends instead: its CPU milliseconds per task over bursts of
this project's trivial tasks, each burst with parts left out (never the memo, which reads
need to find the task), and of bare workflows
(`bench/bare_engine.py`, a tiny input) in between, all in this process.

    .venv/bin/python -m bench run submit_cost --floors [--calls 200]

puts the submit beside its floors, paired call by call: a bare start timed on its own and
a plain `tools/call`, and a `tools/call` whose tool starts a bare workflow (the floor
engine's `bare_start`), each with eager start and without. With eager start, the first
workflow task comes back in the start's answer and this process's worker runs it at once,
before a response sent from the same process leaves: a start inside a request pays that,
one timed on its own does not, so their sum is no floor for an engine that starts eagerly.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from bench.bare_engine import bare_worker, start
from bench.bench_server import add_trivial_tools
from bench.drivers import bounded, costs
from bench.harness import dev_server, task_server
from bench.marks import Marks
from bench.metrics import percentiles_ms, process_tree

QUESTION = (
    "Where does a submit's time go, part by part of the workflow start, beside its floors (a bare start, "
    "a plain tools/call), and what does the dev server spend per task against a bare workflow?"
)
QUICK = {"calls": 20, "bursts": 1, "burst": 30}

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


def _server(temporal: TemporalClient) -> FastMCP:
    mcp = task_server(client=temporal)
    add_trivial_tools(mcp)
    return mcp


async def measure(calls: int) -> dict[str, Any]:
    async with dev_server() as server:
        temporal = await TemporalClient.connect(server.address)
        starts = _Starts(temporal)
        submits: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
        ends: dict[tuple[str, ...], list[float]] = collections.defaultdict(list)
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
                ends[starts.left_out].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await client.call_tool("no_task", {"n": i})
                floor.append(time.perf_counter() - t0)
    return {
        "mcp_floor_ms": percentiles_ms(floor),
        "left_out": {
            ", ".join(variant) or "nothing": {
                "submit_ms": percentiles_ms(submits[variant]),
                "start_workflow_ms": percentiles_ms(starts.times[variant]),
                "end_to_end_ms": percentiles_ms(ends[variant]),
            }
            for variant in VARIANTS
        },
    }


async def measure_cpu(bursts: int, n: int) -> dict[str, Any]:
    async with dev_server() as server:
        temporal = await TemporalClient.connect(server.address)
        starts = _Starts(temporal)
        mcp, bare_queue = _server(temporal), f"bare-{uuid.uuid4().hex[:8]}"
        server_pids = process_tree(server.server.pid)
        cpu: dict[str, list[float]] = collections.defaultdict(list)
        async with bare_worker(temporal, bare_queue, Marks(server.state / "marks")), Client(mcp) as client:

            async def ours(i: int) -> None:
                await (await call_tool_task(client, "trivial", {"n": i})).result()

            async def bare(i: int) -> None:
                await (await start(temporal, bare_queue, "BareTrivial", i)).result()

            await _cpu_per_task(server_pids, n, ours)  # warm up
            for _ in range(bursts):
                cpu["bare workflow"].append(await _cpu_per_task(server_pids, n, bare))
                for variant in CPU_VARIANTS:
                    starts.left_out = variant
                    cpu[", ".join(variant) or "nothing"].append(await _cpu_per_task(server_pids, n, ours))
    return {
        "dev_server_cpu_ms_per_task": {
            name: round(statistics.median(values), 2) for name, values in cpu.items()
        }
    }


async def measure_floors(calls: int) -> dict[str, Any]:
    async with dev_server() as server:
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

        async with bare_worker(temporal, bare_queue, Marks(server.state / "marks")), Client(mcp) as client:
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
    return _floors_report(times)


def _floors_report(times: dict[str, list[float]]) -> dict[str, Any]:
    latency = {name: percentiles_ms(values) for name, values in times.items()}
    p50 = {name: figures["p50"] for name, figures in latency.items()}
    submit = p50["submit (eager)"]
    return {
        "latency_ms": latency,
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--cpu", action="store_true", help="the dev server's CPU per task instead")
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--floors", action="store_true", help="the submit beside its floors instead")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.floors:
        return await measure_floors(args.calls)
    return await measure_cpu(args.bursts, args.burst) if args.cpu else await measure(args.calls)
