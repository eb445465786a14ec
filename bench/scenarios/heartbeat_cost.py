"""What a long tool leg bills in Actions beside bare Temporal, and how fast a cancel reaches it.

    .venv/bin/python -m bench run heartbeat_cost [--seconds 60] [--rounds 24] [--legs 0]

An in-memory dev server with its Prometheus endpoint on and a namespace per shape
(`harness.dev_server_with_metrics`), FastMCP servers with
the embedded worker (default settings: `heartbeat_timeout` 5 s), driven through real
`fastmcp.Client`s, and beside them bare Temporal workers whose workflow runs one activity
with the same heartbeat timeout, heartbeating through the SDK's own throttle:

1. **Actions per task**, from the dev server's `action` metric (its billable estimate), for
   one task of `--seconds` per shape: a silent leg and one reporting progress every second,
   for each engine. The four shapes run at once, each in a namespace of its own, so each
   namespace's counters are its one task's. With them, the history reads per task per 30 s
   (every `GetWorkflowExecutionHistory` the frontend served: the worker's long poll for a
   cancel, the server's and the client's reads) and, apart, the worker's long polls for its
   leg's close (counted around the call the worker makes).
2. **Cancel delivery at any age.** `--rounds` legs run at once, each cancelled at its own
   moment spread over the first 50 s, alternately by `tasks/cancel` and by an operator's
   `WorkflowHandle.cancel()`; the latency is from just before the request to the body
   seeing `CancelledError` (same process, same clock). Target: <= 1 s p95.
3. **The cancel road at many legs** (`--legs N`): N silent legs run at once for `--seconds`;
   the worker's close long polls per leg per 30 s, and how many were in flight at most.

Everything started is stopped in `finally`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import anyio
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio import activity, workflow
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client as TemporalClient
from temporalio.service import WorkflowService
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.harness import dev_server_with_metrics, task_server, wait_ready
from bench.metrics import namespace_counts, percentiles_ms, scrape

QUESTION = (
    "What does a long tool leg bill in Actions beside bare Temporal (the paired baseline), and how fast "
    "does a cancel reach it at any age?"
)
QUICK = {"seconds": 6, "rounds": 2}
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
# Counters reach the metrics endpoint this long after the request that moved them.
_SETTLE = 2.0
_CANCEL_AGES = (0.2, 50.0)
# Each measured shape runs in a namespace of its own, so the dev server's counters of it are its own.
SHAPES = {
    "silent": "ours-silent",
    "progress_every_second": "ours-progress",
    "bare_silent": "bare-silent",
    "bare_progress_every_second": "bare-progress",
}
CANCELS_NAMESPACE = "default"


class CloseLongPolls:
    """The worker's long polls for its legs' close, counted around the call `_leg_follow` makes."""

    def __init__(self) -> None:
        self.sent = 0
        self.in_flight = 0
        self.most_in_flight = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        original = WorkflowService.get_workflow_execution_history
        polls = self

        async def counted(
            service: WorkflowService, req: GetWorkflowExecutionHistoryRequest, *args: object, **kwargs: object
        ) -> object:
            closing = (
                req.history_event_filter_type == HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
            )
            if not (closing and activity.in_activity()):  # a server's follow of a task, not a leg's
                return await original(service, req, *args, **kwargs)
            polls.sent += 1
            polls.in_flight += 1
            polls.most_in_flight = max(polls.most_in_flight, polls.in_flight)
            try:
                return await original(service, req, *args, **kwargs)
            finally:
                polls.in_flight -= 1

        WorkflowService.get_workflow_execution_history = counted  # type: ignore[method-assign]
        try:
            yield
        finally:
            WorkflowService.get_workflow_execution_history = original  # type: ignore[method-assign]


@activity.defn(name="bare_long_leg")
async def bare_long_leg(seconds: float, report_every: float) -> str:
    """A bare activity: heartbeats every second (its progress, if any), throttled by the SDK."""
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        activity.heartbeat({"statusMessage": f"step {step}"} if report_every else None)
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return "done"


@workflow.defn(name="BareLongLeg")
class BareLongLeg:
    @workflow.run
    async def run(self, seconds: float, report_every: float) -> str:
        return await workflow.execute_activity(
            "bare_long_leg",
            args=[seconds, report_every],
            result_type=str,
            start_to_close_timeout=timedelta(hours=1),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
        )


def build_server(address: str, namespace: str, events: dict[str, float]) -> FastMCP:
    """A server whose `hold` tool logs when it starts (and its workflow) and when a cancel reaches it."""
    server = task_server(
        "heartbeat-cost",
        address=address,
        namespace=namespace,
        task_queue="heartbeat-cost",
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        shutdown_grace=timedelta(0),
        ui=False,
    )

    @server.tool(task=True)
    async def hold(key: str, seconds: float, report_every: float, ctx: Context) -> str:
        events[f"{key}:start"] = time.monotonic()
        workflows[key] = activity.info().workflow_id
        try:
            step, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                if report_every:
                    step += 1
                    await ctx.report_progress(step, None, f"step {step}")
                await asyncio.sleep(min(report_every or seconds, max(0.0, deadline - time.monotonic())))
        except asyncio.CancelledError:
            events[f"{key}:cancelled"] = time.monotonic()
            raise
        return key

    return server


workflows: dict[str, str] = {}  # the hold tool's key -> its task's workflow id


async def until(check: object, timeout: float = 120) -> None:
    with anyio.fail_after(timeout):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def price(address: str, metrics_url: str, seconds: float, polls: CloseLongPolls) -> dict:
    """One task of each shape, all at once, each in its own namespace; what each moved in its counters."""
    events: dict[str, float] = {}

    async def ours(namespace: str, report_every: float) -> None:
        async with Client(build_server(address, namespace, events)) as client:
            task = await call_tool_task(
                client, "hold", {"key": uuid.uuid4().hex, "seconds": seconds, "report_every": report_every}
            )
            await task.wait(timeout=seconds + 120)

    async def bare(namespace: str, report_every: float) -> None:
        temporal = await TemporalClient.connect(address, namespace=namespace)
        async with Worker(
            temporal,
            task_queue="bare-long-leg",
            workflows=[BareLongLeg],
            activities=[bare_long_leg],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            await temporal.execute_workflow(
                "BareLongLeg", args=[seconds, report_every], id=uuid.uuid4().hex, task_queue="bare-long-leg"
            )

    runs = {
        "silent": lambda: ours(SHAPES["silent"], 0),
        "progress_every_second": lambda: ours(SHAPES["progress_every_second"], 1.0),
        "bare_silent": lambda: bare(SHAPES["bare_silent"], 0),
        "bare_progress_every_second": lambda: bare(SHAPES["bare_progress_every_second"], 1.0),
    }
    before_text, polls_before = scrape(metrics_url), polls.sent
    async with anyio.create_task_group() as group:
        for run in runs.values():
            group.start_soon(run)
    await anyio.sleep(_SETTLE)
    after_text = scrape(metrics_url)
    shapes: dict[str, dict] = {}
    for name, namespace in SHAPES.items():
        before, after = namespace_counts(before_text, namespace), namespace_counts(after_text, namespace)
        shapes[name] = {measure: after[measure] - before[measure] for measure in after}
        print(f"{name:28} {shapes[name]}")
    close_polls = polls.sent - polls_before
    for name, shape in shapes.items():
        per_second = shape["heartbeats"] / seconds
        shape["modelled_10_min_actions"] = round(shape["actions"] - shape["heartbeats"] + per_second * 600)
        shape["history_reads_per_30s"] = round(shape["history_reads"] * 30 / seconds, 2)
    for ours_name in ("silent", "progress_every_second"):
        shape, bare_shape = shapes[ours_name], shapes[f"bare_{ours_name}"]
        shape["close_long_polls_per_30s"] = round(close_polls / 2 * 30 / seconds, 2)  # two legs of ours ran
        shape["actions_vs_bare"] = round(shape["actions"] / bare_shape["actions"], 2)
        shape["modelled_10_min_vs_bare"] = round(
            shape["modelled_10_min_actions"] / bare_shape["modelled_10_min_actions"], 2
        )
    return shapes


async def cancel_latency(
    client: Client, temporal: TemporalClient, rounds: int, events: dict[str, float]
) -> dict:
    """`rounds` legs at once, cancelled at ages spread over `_CANCEL_AGES`, alternately through
    `tasks/cancel` and an operator's `WorkflowHandle.cancel()`."""
    latencies: dict[str, list[tuple[float, float]]] = {"tasks/cancel": [], "WorkflowHandle.cancel": []}
    low, high = _CANCEL_AGES
    ages = [low + (high - low) * i / max(rounds - 1, 1) for i in range(rounds)]

    async def one(age: float, road: str) -> None:
        key = uuid.uuid4().hex
        task = await call_tool_task(client, "hold", {"key": key, "seconds": 3600, "report_every": 0})
        await until(lambda: f"{key}:start" in events)
        await anyio.sleep(max(0.0, events[f"{key}:start"] + age - time.monotonic()))
        sent = time.monotonic()
        if road == "tasks/cancel":
            await task.cancel()
        else:
            await temporal.get_workflow_handle(workflows[key]).cancel()
        await until(lambda: f"{key}:cancelled" in events)
        latencies[road].append((age, events[f"{key}:cancelled"] - sent))

    async with anyio.create_task_group() as group:
        for n, age in enumerate(ages):
            group.start_soon(one, age, list(latencies)[n % 2])
    every = [latency for rows in latencies.values() for _, latency in rows]
    figures = {"rounds": rounds, "ages_s": [round(a, 1) for a in ages], "all": percentiles_ms(every, 0)}
    figures |= {road: percentiles_ms([latency for _, latency in rows], 0) for road, rows in latencies.items()}
    figures["by_age_ms"] = sorted(
        (round(age, 1), round(latency * 1000)) for rows in latencies.values() for age, latency in rows
    )
    print(f"cancel -> CancelledError at ages {low:g}-{high:g} s: {figures}   (target p95 <= 1,000 ms)")
    return figures


async def many_legs(
    client: Client, legs: int, seconds: float, polls: CloseLongPolls, events: dict[str, float]
) -> dict:
    """`legs` silent legs at once for `seconds`: the worker's close long polls per leg per 30 s, and
    the most in flight at once."""
    keys = [uuid.uuid4().hex for _ in range(legs)]
    sent_before = polls.sent
    tasks = [
        await call_tool_task(client, "hold", {"key": key, "seconds": seconds, "report_every": 0})
        for key in keys
    ]
    await until(lambda: all(f"{key}:start" in events for key in keys), timeout=300)
    polls.most_in_flight = polls.in_flight
    for task in tasks:
        await task.wait(timeout=seconds + 300)
    figures = {
        "legs": legs,
        "leg_s": seconds,
        "close_long_polls_per_leg_per_30s": round((polls.sent - sent_before) / legs * 30 / seconds, 2),
        "most_in_flight": polls.most_in_flight,
    }
    print(f"{legs} legs at once: {figures}")
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seconds", type=float, default=60, help="length of each measured leg (0 skips the price)"
    )
    parser.add_argument("--rounds", type=int, default=24, help="cancel rounds (0 skips)")
    parser.add_argument(
        "--legs", type=int, default=0, help="silent legs run at once for the cancel road's cost"
    )


async def run(options: argparse.Namespace) -> dict[str, Any]:
    events: dict[str, float] = {}
    polls = CloseLongPolls()
    with dev_server_with_metrics(tuple(SHAPES.values())) as (address, metrics_url), polls.counting():
        await wait_ready(address)
        shapes = await price(address, metrics_url, options.seconds, polls) if options.seconds else None
        temporal = await TemporalClient.connect(address, namespace=CANCELS_NAMESPACE)
        async with Client(build_server(address, CANCELS_NAMESPACE, events)) as client:
            cancels = (
                await cancel_latency(client, temporal, options.rounds, events) if options.rounds else None
            )
            legs = (
                await many_legs(client, options.legs, options.seconds, polls, events)
                if options.legs
                else None
            )
    return {
        "leg_s": options.seconds,
        "heartbeat_timeout_s": HEARTBEAT_TIMEOUT.total_seconds(),
        "per_task": shapes,
        "cancel": cancels,
        "many_legs": legs,
    }
