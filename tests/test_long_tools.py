"""Long tools: what Temporal records for a leg's timeouts, read from workflow history.

A leg is scheduled with no wall-clock limit but a ceiling of days
(`start_to_close_timeout`, default 7 days) and a heartbeat timeout of seconds, so a
tool may run for hours while a dead worker is still noticed at once; nothing else
(schedule-to-close, the workflow's own run or execution timeout) bounds it. A tool's
`execution_policy`, the extension's settings and a tool's own `timeout=` change what
is recorded. Each test runs a task and reads its `ActivityTaskScheduled` and
`WorkflowExecutionStarted` events.

A long leg heartbeats for liveness alone, as sparsely as the SDK throttles a plain
activity with the same heartbeat timeout (counted by Temporal's own metrics), and a cancel
reaches its body at any age within far less than a heartbeat interval.
"""

from __future__ import annotations

import asyncio
import runpy
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskScheduledEventAttributes

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from fastmcp_temporal.worker._heartbeat import SDK_THROTTLE_SHARE
from helpers.servers import server_with
from helpers.temporal import task_handle
from helpers.waits import DEADLINE, eventually, status_becomes

pytestmark = pytest.mark.anyio

# The benchmark's dev server with its metrics on, and its heartbeat count: bench/ is never on sys.path.
bench_harness = runpy.run_path(str(Path(__file__).parents[1] / "bench" / "harness.py"))
bench_metrics = runpy.run_path(str(Path(__file__).parents[1] / "bench" / "metrics.py"))
WEEK = timedelta(days=7)
# A cancel is tried this long into a leg: well past any fast start.
CANCEL_AGE = timedelta(seconds=40)
SILENT_LEG = timedelta(seconds=60)
TOOL_TIMEOUT_MARGIN = timedelta(seconds=30)


async def scheduled_leg(
    extension: TemporalTasksExtension, client: Client, tool: str
) -> tuple[ActivityTaskScheduledEventAttributes, Any]:
    """Run `tool` as a task; its first leg's scheduling and the workflow's start, as recorded."""
    task = await call_tool_task(client, tool)
    await task.result()
    handle = task_handle(extension, task.task_id)
    events = (await handle.fetch_history()).events
    (started,) = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED]
    (scheduled,) = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    return scheduled.activity_task_scheduled_event_attributes, started.workflow_execution_started_event_attributes


def seconds(duration: Any) -> timedelta:
    return duration.ToTimedelta()


def long_tools_server(extension: TemporalTasksExtension) -> FastMCP:
    server = FastMCP("long-tools")
    server.add_extension(extension)

    @server.tool(task=True)
    async def plain() -> str:
        return "plain"

    @server.tool(task=True)
    @execution_policy(
        start_to_close_timeout=timedelta(hours=2),
        heartbeat_timeout=timedelta(seconds=9),
        maximum_attempts=3,
        initial_retry_interval=timedelta(seconds=2),
    )
    async def tuned() -> str:
        return "tuned"

    @server.tool(task=True, timeout=3 * 3600)
    @execution_policy(start_to_close_timeout=timedelta(hours=1))
    async def own_timeout() -> str:
        return "own"

    return server


async def test_without_a_policy_a_leg_is_bounded_by_heartbeats_and_a_ceiling_of_days(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension()
    async with Client(long_tools_server(extension)) as client:
        leg, started = await scheduled_leg(extension, client, "plain")
    assert seconds(leg.start_to_close_timeout) == WEEK
    assert seconds(leg.heartbeat_timeout) == timedelta(seconds=2)  # the test extension's setting
    assert seconds(leg.schedule_to_close_timeout) == timedelta(0)  # unset: retries are not bounded in time
    assert leg.retry_policy.maximum_attempts == 5
    assert seconds(started.workflow_execution_timeout) == timedelta(0)
    assert seconds(started.workflow_run_timeout) == timedelta(0)


async def test_a_tools_policy_is_what_temporal_records(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension()
    async with Client(long_tools_server(extension)) as client:
        leg, _ = await scheduled_leg(extension, client, "tuned")
    assert seconds(leg.start_to_close_timeout) == timedelta(hours=2)
    assert seconds(leg.heartbeat_timeout) == timedelta(seconds=9)
    assert leg.retry_policy.maximum_attempts == 3
    assert seconds(leg.retry_policy.initial_interval) == timedelta(seconds=2)


async def test_a_tools_own_timeout_outranks_a_shorter_ceiling(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension()
    async with Client(long_tools_server(extension)) as client:
        leg, _ = await scheduled_leg(extension, client, "own_timeout")
    assert seconds(leg.start_to_close_timeout) == timedelta(hours=3) + TOOL_TIMEOUT_MARGIN


async def test_the_extensions_settings_are_the_defaults(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension(start_to_close_timeout=timedelta(hours=30), maximum_attempts=0)
    async with Client(long_tools_server(extension)) as client:
        leg, _ = await scheduled_leg(extension, client, "plain")
    assert seconds(leg.start_to_close_timeout) == timedelta(hours=30)
    assert leg.retry_policy.maximum_attempts == 0


async def test_a_cancel_long_into_a_silent_leg_reaches_its_body_long_before_a_heartbeat_interval(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    interval = timedelta(seconds=30)
    extension = make_extension(heartbeat_timeout=timedelta(seconds=60), heartbeat_interval=interval)
    seen: dict[str, float] = {}

    async def silent() -> str:
        seen["started"] = time.monotonic()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen["cancelled"] = time.monotonic()
            raise
        return "woke"

    async with Client(server_with(extension, silent)) as client:
        task = await call_tool_task(client, "silent")
        await eventually(lambda: "started" in seen, what="the leg's start")
        await anyio.sleep(max(0.0, seen["started"] + CANCEL_AGE.total_seconds() - time.monotonic()))
        sent = time.monotonic()
        await task.cancel()
        await eventually(lambda: "cancelled" in seen, timeout=DEADLINE + interval.total_seconds(), what="the cancel")
        await status_becomes(task, "cancelled")

    assert seen["cancelled"] - sent < interval.total_seconds() / 3


async def test_a_silent_minute_long_leg_sends_no_more_heartbeats_than_a_plain_activity_would() -> None:
    timeout = timedelta(seconds=5)
    with bench_harness["dev_server_with_metrics"]() as (address, metrics_url):
        await bench_harness["wait_ready"](address)
        extension = TemporalTasksExtension(
            address=address, task_queue="silent-minute", heartbeat_timeout=timeout, shutdown_grace=timedelta(0), ui=False
        )

        async def silent_minute() -> str:
            await asyncio.sleep(SILENT_LEG.total_seconds())
            return "done"

        async with Client(server_with(extension, silent_minute)) as client:
            task = await call_tool_task(client, "silent_minute")
            await task.wait(timeout=SILENT_LEG.total_seconds() + DEADLINE)
        heartbeats = bench_metrics["heartbeats_recorded"](metrics_url)

    sdk_throttled = SILENT_LEG / (SDK_THROTTLE_SHARE * timeout)
    assert heartbeats <= 1.2 * sdk_throttled + 1
