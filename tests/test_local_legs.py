"""Short tools as local activities (`execution_policy(leg="local")`), over the MCP wire.

Each test drives a real FastMCP server on the session's dev server through a real
`fastmcp.Client` and reads what Temporal recorded. It proves that:

- a `leg="local"` tool (or any tool under `TemporalTasksExtension(leg="local")`) runs its
  body as a local activity, so a trivial task completes in one workflow task with a
  `MarkerRecorded` and no `ActivityTaskScheduled`, while a tool without the policy, or
  with `leg="activity"`, still schedules a regular activity;
- its result is the inline call's result, byte for byte;
- an ask parks the task and the next leg, after `tasks/update`, is local too;
- a synchronous call served by a workflow (`sync_calls="workflow"`) runs a local leg;
- a leg over its start_to_close_timeout is retried inside the workflow task, and a leg
  out of attempts fails the task saying so; a tool error is a result, never retried;
- progress reported by a local leg does not fail it and never reaches `tasks/get` (a
  local activity is no pending activity and cannot heartbeat);
- `tasks/cancel` reaches a running local leg (at the workflow task's next heartbeat),
  the task ends `cancelled` and the body never runs again; a leg that finishes after
  the cancel ran once and the task still ends `cancelled`;
- a worker killed with `kill -9` mid-leg: the workflow task times out, another worker
  runs the leg again from the start, and the task completes once (slow).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from fastmcp import Client, Context
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

import fault_app
from fastmcp_temporal import TemporalTasksExtension, checkpoint, execution_policy
from fastmcp_temporal.devserver import DevServer, free_port
from helpers.metrics import sample
from helpers.processes import AttemptLog, Processes
from helpers.results import RETURN_CASES, wire
from helpers.servers import NoTasksClient, server_with, square
from helpers.temporal import task_handle, workflow_closed
from helpers.waits import DEADLINE, eventually, finished, status_becomes
from helpers.wire import accept, ask, tasks_cancel, tasks_get, tasks_update

pytestmark = pytest.mark.anyio

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


# --- helpers ---------------------------------------------------------------------------


async def event_types(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events]


async def leg_kinds(handle: WorkflowHandle) -> tuple[int, int]:
    """How many legs ran as local activities (markers) and as regular activities."""
    history = await handle.fetch_history()
    kinds = [event.event_type for event in history.events]
    return kinds.count(MARKER), kinds.count(SCHEDULED)


# --- 1. where the leg runs -------------------------------------------------------------


async def test_a_trivial_local_leg_task_completes_in_one_workflow_task(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(leg="local")
    async def quick(n: int) -> int:
        return n * n

    async with Client(server) as client:
        final = await finished(await call_tool_task(client, "quick", {"n": 7}))
        handle = task_handle(extension, final.task_id)
        events = await event_types(handle)
        details = await (await handle.describe()).static_details()

    assert (final.status, final.result["structuredContent"]) == ("completed", {"result": 49})
    assert details is not None and "Each leg: a local activity (no heartbeats)" in details
    assert events == [
        "WORKFLOW_EXECUTION_STARTED",
        "WORKFLOW_TASK_SCHEDULED",
        "WORKFLOW_TASK_STARTED",
        "WORKFLOW_TASK_COMPLETED",
        "MARKER_RECORDED",
        "WORKFLOW_EXECUTION_COMPLETED",
    ]


@pytest.mark.parametrize(
    ("extension_leg", "tool_leg", "local"),
    [
        (None, None, False),
        (None, "activity", False),
        ("local", None, True),
        ("local", "activity", False),
        ("activity", "local", True),
    ],
    ids=["default", "tool-activity", "extension-local", "tool-overrides-extension", "tool-local"],
)
async def test_the_tool_policy_over_the_extension_setting_chooses_the_leg_kind(
    make_extension, extension_leg: str | None, tool_leg: Any, local: bool
) -> None:
    extension = make_extension(**({"leg": extension_leg} if extension_leg else {}))
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(leg=tool_leg)
    async def cube(n: int) -> int:
        return n**3

    async with Client(server) as client:
        final = await finished(await call_tool_task(client, "cube", {"n": 3}))
        kinds = await leg_kinds(task_handle(extension, final.task_id))

    assert final.result["structuredContent"] == {"result": 27}
    assert kinds == ((1, 0) if local else (0, 1))


def test_the_leg_setting_is_checked_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"execution_policy\(leg='fast'\): use 'activity' or 'local'"):
        execution_policy(leg="fast")  # type: ignore[arg-type]
    monkeypatch.setenv("FASTMCP_TEMPORAL_LEG", "local")
    assert TemporalTasksExtension().temporal_settings.leg == "local"
    with pytest.raises(ValueError, match="'activity' or 'local'"):
        TemporalTasksExtension(leg="fast")


_BYTE_CASES = [
    case
    for case in RETURN_CASES
    if case.id in {"dict", "pydantic", "bytes", "tool-result", "call-tool-result-error", "output-schema"}
]


@pytest.mark.parametrize(("fn", "options", "expect"), _BYTE_CASES)
async def test_a_local_leg_result_is_the_inline_call_result_byte_for_byte(
    make_extension, fn, options, expect
) -> None:
    extension = make_extension(leg="local")
    server = server_with(extension)
    server.tool(fn, name="x", task=True, **options)

    async with Client(server) as tasked, NoTasksClient(server) as inline:
        final = await finished(await call_tool_task(tasked, "x", {}))
        expected = wire(await inline.call_tool_mcp("x", {}))
        kinds = await leg_kinds(task_handle(extension, final.task_id))

    assert final.status == "completed"
    assert _same_bytes(wire(mcp_types.CallToolResult.model_validate(final.result)), expected)
    assert expect.items() <= expected.items()
    assert kinds == (1, 0)


def _same_bytes(tasked: dict[str, Any], inline: dict[str, Any]) -> bool:
    """The same JSON text, key order included."""
    return json.dumps(tasked) == json.dumps(inline)


# --- 2. asks, synchronous calls, retries ---------------------------------------------


async def test_an_answered_ask_runs_the_next_leg_locally_too(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)
    legs: list[str] = []

    @server.tool(task=True)
    @execution_policy(leg="local")
    async def confirm(ctx: Context) -> str | InputRequiredResult:
        legs.append("asked" if ctx.input_responses is None else "answered")
        if ctx.input_responses is None:
            return ask("go")
        return f"confirmed {ctx.input_responses['go'].content['value']}"

    async with Client(server) as client:
        task = await call_tool_task(client, "confirm")
        parked = await status_becomes(task, "input_required")
        (key,) = parked.input_requests
        await tasks_update(client, task.task_id, {key: accept("yes")})
        final = await finished(task)
        kinds = await leg_kinds(task_handle(extension, task.task_id))

    assert final.result["structuredContent"] == {"result": "confirmed yes"}
    assert legs == ["asked", "answered"]
    assert kinds == (2, 0)


async def test_a_synchronous_call_served_by_a_workflow_runs_a_local_leg(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(sync_calls="workflow", leg="local")
    async def double(n: int) -> int:
        return 2 * n

    async with NoTasksClient(server) as client:
        with anyio.fail_after(DEADLINE):
            answer = await client.call_tool_mcp("double", {"n": 21})
        assert extension.client is not None
        query = f"TaskQueue = '{extension.temporal_settings.task_queue}'"
        (execution,) = [w async for w in extension.client.list_workflows(query)]
        handle = extension.client.get_workflow_handle(execution.id)
        kinds = await leg_kinds(handle)

    assert answer.structured_content == {"result": 42}
    assert execution.id.startswith("mcp-call/")
    assert kinds == (1, 0)


async def test_a_timed_out_local_attempt_is_retried_inside_the_workflow(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)
    attempts: list[int] = []

    @server.tool(task=True)
    @execution_policy(leg="local", start_to_close_timeout=timedelta(seconds=1), maximum_attempts=3)
    async def flaky() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            await anyio.sleep(60)  # past start_to_close: Temporal retries the leg
        return f"attempt {len(attempts)}"

    async with Client(server) as client:
        final = await finished(await call_tool_task(client, "flaky"))
        kinds = await leg_kinds(task_handle(extension, final.task_id))

    assert final.result["structuredContent"] == {"result": "attempt 2"}
    assert attempts == [1, 2]
    assert kinds == (1, 0)  # both attempts in one local activity, recorded once


async def test_a_local_leg_out_of_attempts_fails_the_task_saying_so(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(leg="local", start_to_close_timeout=timedelta(seconds=1), maximum_attempts=1)
    async def stuck() -> str:
        await anyio.sleep(60)
        return "never"

    async with Client(server) as client:
        final = await finished(await call_tool_task(client, "stuck"))
        kinds = await leg_kinds(task_handle(extension, final.task_id))

    assert final.status == "failed"
    assert final.status_message == (
        "The tool did not finish within its start_to_close_timeout of 1s, after 1 attempt(s)."
    )
    assert kinds == (1, 0)


async def test_a_tool_error_in_a_local_leg_is_a_result_and_never_retried(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)
    runs: list[str] = []

    @server.tool(task=True)
    @execution_policy(leg="local", maximum_attempts=3)
    async def order() -> str:
        runs.append("order")
        raise ToolError("out of stock")

    async with Client(server) as client:
        final = await finished(await call_tool_task(client, "order", raise_on_error=False))
        kinds = await leg_kinds(task_handle(extension, final.task_id))

    assert (final.status, final.result["isError"]) == ("completed", True)
    assert final.result["content"] == [{"type": "text", "text": "out of stock"}]
    assert runs == ["order"]
    assert kinds == (1, 0)


# --- 3. progress and metrics ----------------------------------------------------------


async def test_progress_of_a_local_leg_does_not_fail_it_and_stays_off_tasks_get(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)
    reported, release = anyio.Event(), anyio.Event()

    @server.tool(task=True)
    @execution_policy(leg="local")
    async def steps(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half way")
        checkpoint({"done": 1})
        reported.set()
        await release.wait()
        return "all steps"

    async with Client(server) as client:
        task = await call_tool_task(client, "steps")
        with anyio.fail_after(DEADLINE):
            await reported.wait()
        description = await task_handle(extension, task.task_id).describe()
        running = await tasks_get(client, task.task_id)
        release.set()
        final = await finished(task)

    assert list(description.raw_description.pending_activities) == []
    assert (running.status, running.status_message) == ("working", None)
    assert final.result["structuredContent"] == {"result": "all steps"}


async def test_metrics_count_local_legs_and_their_input_rounds(make_extension) -> None:
    address = f"127.0.0.1:{free_port()}"
    extension = make_extension(metrics_address=address, leg="local")
    server = server_with(extension, square)

    @server.tool(task=True)
    async def agree(ctx: Context) -> str | InputRequiredResult:
        return ask("ok") if ctx.input_responses is None else "agreed"

    expected = {
        ("mcp_tasks_finished", "square"): 1,
        ("mcp_leg_duration_count", "square"): 1,
        ("mcp_tasks_finished", "agree"): 1,
        ("mcp_leg_duration_count", "agree"): 2,
        ("mcp_task_input_rounds", "agree"): 1,
    }
    async with Client(server) as client, httpx.AsyncClient() as http:
        await finished(await call_tool_task(client, "square", {"n": 4}))
        task = await call_tool_task(client, "agree")
        (key,) = (await status_becomes(task, "input_required")).input_requests
        await tasks_update(client, task.task_id, {key: accept("yes")})
        await finished(task)
        kinds = await leg_kinds(task_handle(extension, task.task_id))
        with anyio.fail_after(DEADLINE):
            while True:
                scraped = (await http.get(f"http://{address}/metrics")).text
                seen = {(name, tool): sample(scraped, name, tool=tool) for name, tool in expected}
                if seen == expected:
                    break
                await anyio.sleep(0.2)
    assert kinds == (2, 0)


# --- 4. cancellation --------------------------------------------------------------------


async def test_cancel_reaches_a_running_local_leg_which_never_runs_again(make_extension) -> None:
    extension = make_extension()
    server = server_with(extension)
    events: list[str] = []

    @server.tool(task=True)
    @execution_policy(leg="local", maximum_attempts=5)
    async def hold() -> str:
        events.append("start")
        try:
            await anyio.sleep(3600)
        except BaseException:
            events.append("cancelled")
            raise
        return "never"

    async with Client(server) as client:
        task = await call_tool_task(client, "hold")
        await eventually(lambda: events == ["start"], what="the body to start")
        await tasks_cancel(client, task.task_id)
        answered = await tasks_get(client, task.task_id)
        await workflow_closed(extension, task.task_id)
        handle = task_handle(extension, task.task_id)
        closed = (await handle.describe()).status
        kinds = await leg_kinds(handle)

    assert answered.status == "cancelled"
    assert closed == WorkflowExecutionStatus.CANCELED
    assert events == ["start", "cancelled"]
    assert kinds == (1, 0)


async def test_a_local_leg_finishing_after_the_cancel_ran_once_and_the_task_is_cancelled(
    make_extension,
) -> None:
    extension = make_extension()
    server = server_with(extension)
    runs: list[str] = []
    release = anyio.Event()

    @server.tool(task=True)
    @execution_policy(leg="local", maximum_attempts=5)
    async def brief() -> str:
        runs.append("brief")
        with anyio.CancelScope(shield=True):  # finishes even if the cancel reaches it first
            await release.wait()
        return "finished"

    async with Client(server) as client:
        task = await call_tool_task(client, "brief")
        await eventually(lambda: runs == ["brief"], what="the body to start")
        await tasks_cancel(client, task.task_id)
        release.set()
        await workflow_closed(extension, task.task_id)
        handle = task_handle(extension, task.task_id)
        closed = (await handle.describe()).status
        final = await tasks_get(client, task.task_id)
        kinds = await leg_kinds(handle)

    assert (final.status, closed) == ("cancelled", WorkflowExecutionStatus.CANCELED)
    assert runs == ["brief"]
    assert kinds == (1, 0)


# --- 5. a worker killed mid-leg -----------------------------------------------------------


@pytest.mark.slow
async def test_a_worker_killed_mid_leg_reruns_the_local_leg_on_another_and_completes_once(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    workers = [processes.worker(temporal_server.address, task_queue) for _ in range(2)]
    await processes.polling(*workers)
    # The API-only twin creates the task, so every leg of it runs locally on whichever
    # worker runs its workflow task.
    api = fault_app.build_server(address=temporal_server.address, task_queue=task_queue, worker=False, leg="local")
    async with Client(api) as client:
        task = await call_tool_task(client, "count", {"key": "job", "to": 12, "step": 0.25})
        await eventually(lambda: attempts.progress("job") >= 2, timeout=DEADLINE, what="the tool to count")
        (first,) = attempts.starts("job")
        victim = next(w for w in workers if w.pid == first["pid"])
        processes.kill(victim)
        with anyio.fail_after(3 * DEADLINE):
            final = await task.wait(timeout=3 * DEADLINE)

    temporal = await TemporalClient.connect(temporal_server.address)
    handle = task_handle(temporal, task.task_id)
    events = await event_types(handle)
    killed_run, rerun = attempts.starts("job")

    assert (final.status, final.result["structuredContent"]) == ("completed", {"key": "job", "counted": 12})
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert killed_run["pid"] == victim.pid and rerun["pid"] != victim.pid
    assert rerun["resumed_from"] is None  # a local leg's checkpoints never left the dead worker
    assert "WORKFLOW_TASK_TIMED_OUT" in events
    assert (events.count("MARKER_RECORDED"), events.count("ACTIVITY_TASK_SCHEDULED")) == (1, 0)
    assert events.count("WORKFLOW_EXECUTION_COMPLETED") == 1
