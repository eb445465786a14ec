"""A worker saturated by legs that each compute in short slices loses none of them.

One real FastMCP server, whose embedded worker runs the legs on the real Temporal dev
server, gets more CPU-slicing legs at once than its event loop can turn around within the
heartbeat margin (every slice is short: no tool blocks the loop, there are just many of
them). Every task completes, each body starts once, and Temporal timed out no attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType

from helpers.servers import server_with
from helpers.temporal import task_handle

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEGS = 20
SLICE = 0.03  # seconds of CPU between two awaits: no single step holds the loop for long
SLICES = 40
DEADLINE = 240


def _compute(seconds: float) -> None:
    """Hold the CPU (and the event loop) for `seconds`, as parsing or number crunching does."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


async def test_a_saturated_worker_completes_every_leg_once(make_extension) -> None:
    extension = make_extension(heartbeat_fast_period=timedelta(0), maximum_attempts=5)
    server = server_with(extension)
    starts: Counter[int] = Counter()

    @server.tool(task=True)
    async def crunch(job: int) -> int:
        starts[job] += 1
        for _ in range(SLICES):
            _compute(SLICE)
            await asyncio.sleep(0)
        return job

    async with Client(server) as client:
        tasks = [await call_tool_task(client, "crunch", {"job": job}) for job in range(LEGS)]
        results = {}

        async def wait(task) -> None:  # noqa: ANN001 - fastmcp_tasks' task handle
            results[task.task_id] = await task.wait(timeout=DEADLINE)

        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(wait, task)
        histories = [await task_handle(extension, task.task_id).fetch_history() for task in tasks]

    assert [results[task.task_id].status for task in tasks] == ["completed"] * LEGS
    assert starts == Counter(range(LEGS)), "a body started more than once"
    timed_out = [
        e for h in histories for e in h.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
    ]
    retried = [
        e.activity_task_started_event_attributes.attempt
        for h in histories
        for e in h.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt > 1
    ]
    assert (timed_out, retried) == ([], []), "Temporal timed out attempts of legs the worker was running"
