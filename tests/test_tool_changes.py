"""A redeploy that changes a tool under its tasks ends each of them once, with an error naming it.

Tasks parked on input, and legs waiting for a retry after `kill -9` of their worker,
meet a worker of the next release (tests/redeploy_app.py) in which their tool was
removed, renamed, disabled, lost the version the task called, or takes other arguments.
Proves, through a real `fastmcp.Client` and in Temporal's histories, that:

- a tool that no longer resolves fails its task with the reference's "component for key
  not found at re-entry" error (-32603, "No task-enabled component found for '<key>'."),
  naming the tool and its version;
- stored arguments that no longer validate complete the task with the `isError` result
  a call with those arguments gets now (the reference's rule for bad arguments), naming
  the tool, and the body does not run;
- each of those legs ends on its first attempt on the new worker (attempts are unlimited
  here, so one that failed would be retried for ever), no body runs again, and no
  workflow is left running.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp_tasks.client import ToolTask, call_tool_task
from temporalio.client import Client as TemporalClient

import redeploy_app
from fastmcp_temporal.devserver import DevServer
from helpers.processes import AttemptLog, Processes
from helpers.temporal import no_workflow_running, task_handle
from helpers.waits import eventually, finished, status_becomes
from helpers.wire import accept, tasks_update, text_of

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

APP = Path(redeploy_app.__file__)

# Tool called -> (its arguments besides `key`, the version called).
PARKED: dict[str, tuple[dict[str, Any], str | None]] = {
    "removed": ({}, None),
    "old_name": ({}, None),
    "disabled": ({}, None),
    "versioned": ({}, "1"),
    "reshaped": ({}, None),
    "retyped": ({"size": "large"}, None),
}
HELD = ("held", "held_reshaped")

# Tool -> the component key the task stored, which the next release no longer has.
GONE = {
    "removed": "tool:removed@",
    "old_name": "tool:old_name@",
    "disabled": "tool:disabled@",
    "versioned": "tool:versioned@1",
    "held": "tool:held@",
}
# Tool -> what the validation error of its stored arguments says under the next release.
REFUSED = {
    "reshaped": "mode\n  Missing required argument",
    "retyped": "size\n  Input should be a valid integer",
    "held_reshaped": "mode\n  Missing required argument",
}


async def test_tasks_whose_tool_changed_end_once_with_an_error_naming_it(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    before = processes.worker(temporal_server.address, task_queue, app=APP)
    await processes.polling(before)
    api = redeploy_app.build_server(
        "before", address=temporal_server.address, task_queue=task_queue, worker=False
    )
    async with Client(api) as client:
        tasks: dict[str, ToolTask] = {}
        for tool, (arguments, version) in PARKED.items():
            tasks[tool] = await call_tool_task(client, tool, {"key": tool, **arguments}, version=version)
        for tool in HELD:
            tasks[tool] = await call_tool_task(client, tool, {"key": tool})
        questions = {
            tool: (await status_becomes(tasks[tool], "input_required")).input_requests for tool in PARKED
        }
        await eventually(lambda: all(attempts.starts(tool) for tool in HELD), what="the held tools to start")

        processes.kill(before)
        after = processes.worker(
            temporal_server.address, task_queue, app=APP, env={"REDEPLOY_RELEASE": "after"}
        )
        await processes.polling(after)
        for tool in PARKED:
            (surfaced,) = questions[tool]
            await tasks_update(client, tasks[tool].task_id, {surfaced: accept("go")})
        final = {tool: await finished(task) for tool, task in tasks.items()}

    for tool, key in GONE.items():
        assert final[tool].status == "failed", (tool, final[tool])
        error = final[tool].error
        assert error["code"] == -32603
        assert error["message"].startswith(f"No task-enabled component found for {key!r}."), error
        assert f"tool {tool!r}" in error["message"]
    assert "version '1'" in final["versioned"].error["message"]

    for tool, validation in REFUSED.items():
        assert final[tool].status == "completed", (tool, final[tool])
        assert final[tool].result["isError"] is True
        assert f"tool {tool!r}" in text_of(final[tool])
        assert validation in text_of(final[tool])

    for tool in PARKED:
        assert [start["leg"] for start in attempts.starts(tool)] == [1], tool
    for tool in HELD:
        assert len(attempts.starts(tool)) == 1, tool

    temporal = await TemporalClient.connect(temporal_server.address)
    for tool, task in tasks.items():
        legs = await leg_attempts(temporal, task.task_id)
        if tool in PARKED:
            assert legs == [1, 1], (tool, legs)
        else:  # the retry after the kill met the new release, and ended there
            assert len(legs) == 1 and legs[0] >= 2, (tool, legs)
    await no_workflow_running(temporal, task_queue)


async def leg_attempts(temporal: TemporalClient, task_id: str) -> list[int]:
    """The attempt each of the task's legs completed on; fails if a leg failed or timed out for good."""
    attempts: list[int] = []
    closed = 0
    async for event in task_handle(temporal, task_id).fetch_history_events():
        if event.HasField("activity_task_started_event_attributes"):
            attempts.append(event.activity_task_started_event_attributes.attempt)
        assert not event.HasField("activity_task_failed_event_attributes"), event
        assert not event.HasField("activity_task_timed_out_event_attributes"), event
        closed += event.HasField("activity_task_completed_event_attributes")
    assert closed == len(attempts)
    return attempts
