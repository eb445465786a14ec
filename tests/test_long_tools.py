"""Long tools: what Temporal records for a leg's timeouts, read from workflow history.

A leg is scheduled with no wall-clock limit but a ceiling of days
(`start_to_close_timeout`, default 7 days) and a heartbeat timeout of seconds, so a
tool may run for hours while a dead worker is still noticed at once; nothing else
(schedule-to-close, the workflow's own run or execution timeout) bounds it. A tool's
`execution_policy`, the extension's settings and a tool's own `timeout=` change what
is recorded. Each test runs a task and reads its `ActivityTaskScheduled` and
`WorkflowExecutionStarted` events.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskScheduledEventAttributes

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.temporal import task_handle

pytestmark = pytest.mark.anyio

WEEK = timedelta(days=7)
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
