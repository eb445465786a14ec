"""One worker at default settings saturated by legs that compute between their awaits: are any lost?

    .venv/bin/python -m bench run busy_worker [--legs 40] [--cpu 3] [--slice 0.03] [--label after]

On the run's dev server (in memory), one FastMCP server whose embedded worker runs with
the extension's defaults (heartbeat_timeout 5 s, heartbeat_interval 4.5 s after a 30 s fast
period, 50 legs at once), driven through a real `fastmcp.Client`. Submits `--legs` tasks of
one tool, `crunch`, whose body holds the CPU `--slice` seconds at a time, `await`ing between
slices, until it has computed `--cpu` seconds (a tool that parses or computes in its
coroutine: no step blocks the loop, there are just many of them). Nothing is killed.

Reports, per run: tasks completed and failed, bodies started more than once, attempts
Temporal timed out (`ActivityTaskTimedOut` events and legs that completed on a later
attempt), the worker's warnings (a tool that blocked the loop; a starved worker), the most
bodies running at once, and the wall time. `--label` names the run in its settings (e.g. before,
after); `bench/results/busy_worker.json` holds the labelled runs stored before the one runner.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections import Counter
from typing import Any

import anyio
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType

from bench.harness import dev_server
from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id

QUESTION = "Does one worker at default settings, saturated by legs that compute between awaits, lose any?"
QUICK = {"legs": 6, "cpu": 1.0}
DEADLINE = 3600


class WarningCount(logging.Handler):
    """Counts the worker's warnings about a blocked or starved event loop."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "blocked the event loop" in message:
            self.counts["tool blocked the loop"] += 1
        elif "event loop is starved" in message:
            self.counts["worker starved"] += 1


def build(
    address: str, options: argparse.Namespace, starts: Counter[int], running: list[int]
) -> tuple[FastMCP, Any]:
    extension = TemporalTasksExtension(address=address, task_queue=f"busy-{uuid.uuid4().hex[:8]}")
    mcp = FastMCP("busy-worker-bench")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def crunch(job: int) -> int:
        starts[job] += 1
        running[0] += 1
        running[1] = max(running[1], running[0])
        try:
            computed = 0.0
            while computed < options.cpu:
                until = time.perf_counter() + options.slice
                while time.perf_counter() < until:
                    pass
                computed += options.slice
                await asyncio.sleep(0)
        finally:
            running[0] -= 1
        return job

    return mcp, extension


def timed_out_attempts(history: Any) -> int:
    """Attempts of the task's legs that Temporal gave up on, as its history shows them."""
    count = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            count += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            count += event.activity_task_started_event_attributes.attempt - 1
    return count


async def run(options: argparse.Namespace) -> dict[str, Any]:
    warnings = WarningCount()
    logging.getLogger("fastmcp_temporal").addHandler(warnings)
    starts: Counter[int] = Counter()
    running = [0, 0]
    async with dev_server(in_memory=True) as server:
        try:
            mcp, extension = build(server.address, options, starts, running)
            began = time.monotonic()
            async with Client(mcp) as client:
                tasks: list[Any] = []
                statuses: dict[str, str] = {}

                async def submit_and_wait(job: int) -> None:
                    task = await call_tool_task(client, "crunch", {"job": job})
                    tasks.append(task)
                    statuses[task.task_id] = (await task.wait(timeout=DEADLINE)).status

                async with anyio.create_task_group() as group:  # all at once, as many callers would
                    for job in range(options.legs):
                        group.start_soon(submit_and_wait, job)
                elapsed = time.monotonic() - began
                temporal = extension.client
                assert temporal is not None
                ids = [workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id) for task in tasks]
                histories = [await temporal.get_workflow_handle(each).fetch_history() for each in ids]
        finally:
            logging.getLogger("fastmcp_temporal").removeHandler(warnings)
    outcome = Counter(statuses.values())
    return {
        "tasks_completed": outcome.get("completed", 0),
        "tasks_failed": options.legs - outcome.get("completed", 0),
        "bodies_started_more_than_once": sum(1 for count in starts.values() if count > 1),
        "body_starts": sum(starts.values()),
        "attempts_timed_out": sum(timed_out_attempts(history) for history in histories),
        "warnings": dict(warnings.counts),
        "most_bodies_running_at_once": running[1],
        "wall_s": round(elapsed, 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--legs", type=int, default=40, help="tasks submitted at once")
    parser.add_argument("--cpu", type=float, default=3.0, help="seconds of CPU each leg computes")
    parser.add_argument("--slice", type=float, default=0.03, help="seconds of CPU between two awaits")
    parser.add_argument("--label", help="the run's name in its settings (e.g. before, after)")
