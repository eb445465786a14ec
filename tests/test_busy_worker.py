"""A worker saturated by legs that each compute in short slices loses none of them.

One real FastMCP server, whose embedded worker runs the legs on the real Temporal dev
server, gets more CPU-slicing legs at once than its event loop can turn around within the
heartbeat margin (every slice is short: no tool blocks the loop, there are just many of
them). Every task completes, each body starts once, and Temporal timed out no attempt.

A worker built to take them all at once (its own `max_concurrent_activities`) starves its
loop: it warns that it is starved, and blames no tool. A worker at default settings runs many
waiting (I/O-bound) legs at once: Temporal sees them all started together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from helpers.servers import server_with
from helpers.temporal import task_handle

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEGS = 20
SLICE = 0.03  # seconds of CPU between two awaits: no single step holds the loop for long
SLICES = 40
# A worker that takes this many at once (its own max_concurrent_activities) starves its loop.
STARVING_LEGS = 40
STARVING_SLICES = 5
DEADLINE = 240
# Waiting legs a worker at default settings runs at once: more than the former default's 50.
WAITING_LEGS = 80
WAITING_DEADLINE = 45


def _compute(seconds: float) -> None:
    """Hold the CPU (and the event loop) for `seconds`, as parsing or number crunching does."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def crunching_server(extension: TemporalTasksExtension, starts: Counter[int], slices: int) -> FastMCP:
    """A server whose one tool, `crunch`, computes `slices` short slices, counting its body's starts."""
    server = server_with(extension)

    @server.tool(task=True)
    async def crunch(job: int) -> int:
        starts[job] += 1
        for _ in range(slices):
            _compute(SLICE)
            await asyncio.sleep(0)
        return job

    return server


async def run_all(client: Client, legs: int) -> dict[str, str]:
    """Submit `legs` crunch tasks at once; the status each ends with, by task id."""
    statuses: dict[str, str] = {}

    async def submit_and_wait(job: int) -> None:
        task = await call_tool_task(client, "crunch", {"job": job})
        statuses[task.task_id] = (await task.wait(timeout=DEADLINE)).status

    async with anyio.create_task_group() as group:
        for job in range(legs):
            group.start_soon(submit_and_wait, job)
    return statuses


@pytest.mark.alone
async def test_a_saturated_worker_completes_every_leg_once(
    make_extension, caplog: pytest.LogCaptureFixture
) -> None:
    extension = make_extension(maximum_attempts=5)
    starts: Counter[int] = Counter()
    server = crunching_server(extension, starts, SLICES)

    caplog.set_level(logging.WARNING, logger="fastmcp_temporal")
    async with Client(server) as client:
        statuses = await run_all(client, LEGS)
        histories = [await task_handle(extension, task_id).fetch_history() for task_id in statuses]

    assert list(statuses.values()) == ["completed"] * LEGS
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
    assert not [r.getMessage() for r in caplog.records if "blocked the event loop" in r.getMessage()]


@pytest.mark.alone
async def test_a_worker_that_takes_more_legs_than_its_loop_keeps_up_with_says_it_is_starved(
    make_extension, temporal_server: DevServer, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = crunching_server(make_extension(worker=False), Counter(), STARVING_SLICES)
    hosted = crunching_server(make_extension(), Counter(), STARVING_SLICES)
    temporal = await TemporalClient.connect(temporal_server.address, plugins=[McpTasksPlugin(hosted)])

    caplog.set_level(logging.WARNING, logger="fastmcp_temporal")
    async with Worker(temporal, task_queue=task_queue, max_concurrent_activities=STARVING_LEGS), Client(api) as client:
        await run_all(client, STARVING_LEGS)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "event loop is starved" in w], warnings
    assert not [w for w in warnings if "blocked the event loop" in w]


async def started_legs(temporal: TemporalClient, task_ids: list[str]) -> int:
    """How many of the tasks' legs Temporal shows as started (a worker runs them), right now."""
    descriptions = [await task_handle(temporal, task_id).describe() for task_id in task_ids]
    return sum(
        leg.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for description in descriptions
        for leg in description.raw_description.pending_activities
    )


async def test_a_worker_at_default_settings_runs_many_waiting_legs_at_once(make_extension) -> None:
    extension = make_extension()
    release = asyncio.Event()

    async def wait_for_release(job: int) -> int:
        await release.wait()
        return job

    server = server_with(extension, wait_for_release)
    async with Client(server) as client:
        tasks = [await call_tool_task(client, "wait_for_release", {"job": job}) for job in range(WAITING_LEGS)]
        assert extension.client is not None
        task_ids = [task.task_id for task in tasks]
        started = 0
        with anyio.move_on_after(WAITING_DEADLINE):
            while (started := await started_legs(extension.client, task_ids)) < WAITING_LEGS:
                await anyio.sleep(0.5)
        release.set()
        statuses = [(await task.wait(timeout=DEADLINE)).status for task in tasks]

    assert started == WAITING_LEGS, f"only {started} of {WAITING_LEGS} waiting legs ran at once"
    assert statuses == ["completed"] * WAITING_LEGS
