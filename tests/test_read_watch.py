"""Reads of a running task cost Temporal requests per change, not per read, on any server.

Proves, on a real Temporal server over the MCP wire, with two servers on one task queue
(one runs the worker, one is API-only, as behind a load balancer) and a client reading
through each in turn: an ask, an answer, the close, and a cancel made through one server
all show on the other, although both answer unchanged reads from what they already know
(their long poll of the task's history sees the event); that a quiet task, parked or in a
long leg, read many times costs the server a small bounded number of Temporal requests
(counted from the SDK's metrics), not a `describe()` per read; and that
a leg's progress, which adds no history event, shows within `progress_refresh`. A task an
operator resets with the `temporal` CLI (completed, or in its leg) shows its new run on
both servers, the one that had cached its first close too, and its body runs again; the
new run asks again instead of reusing the first run's answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta, timezone
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.worker import _progress
from fastmcp_temporal.workflows.models import PROGRESSED_SIGNAL
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE
from helpers.servers import gated_tool, reporting_once, server_with
from helpers.temporal import (
    TemporalRequests,
    anonymous_workflow_id,
    no_workflow_running,
    reset_workflow,
    task_handle,
)
from helpers.waits import DEADLINE
from helpers.wire import (
    accept,
    asking,
    only_key,
    parks,
    tasks_cancel,
    tasks_get,
    tasks_update,
    two_rounds,
)

pytestmark = pytest.mark.anyio

# Longer than any test: the progress refresh never re-reads, so only an event can.
NEVER = timedelta(seconds=DEADLINE * 4)
READS = 40
DESCRIBE = "DescribeWorkflowExecution"
HISTORY = "GetWorkflowExecutionHistory"
SHORT_TASKS = 10


async def _api_server(
    temporal_server: DevServer, task_queue: str, requests: TemporalRequests, *tools: Callable[..., Any], **settings: Any
) -> tuple[FastMCP, TemporalClient]:
    """An API-only server (no worker), and its Temporal client, whose requests `requests` counts."""
    client = await requests.connect(temporal_server.address)
    extension = TemporalTasksExtension(client=client, task_queue=task_queue, worker=False, **settings)
    return server_with(extension, *tools, name="api"), client


async def _every_server_shows(
    clients: list[Client], task_id: str, status: str, until: Callable[[ClientGetTaskResult], bool] = lambda _: True
) -> list[ClientGetTaskResult]:
    """Read the task through each server in turn until every one's read shows `status`."""
    with anyio.fail_after(DEADLINE):
        while True:
            reads = [await tasks_get(client, task_id) for client in clients]
            if all(read.status == status and until(read) for read in reads):
                return reads
            await anyio.sleep(0.05)


async def test_changes_through_one_server_show_at_the_other_servers_reads(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    requests = TemporalRequests()
    worker = server_with(make_extension(progress_refresh=NEVER), two_rounds, parks, name="worker")
    api, temporal = await _api_server(  # reread_hold 0: the READS below answered at once, not held
        temporal_server, task_queue, requests, two_rounds, parks, progress_refresh=NEVER, reread_hold=timedelta(0)
    )
    async with Client(worker) as one, Client(api) as two:
        both = [one, two]
        task = await call_tool_task(one, "two_rounds")
        (_, parked) = await _every_server_shows(both, task.task_id, "input_required", asking("first"))

        described = requests.count()[DESCRIBE]
        for _ in range(READS):
            assert asking("first")(await tasks_get(two, task.task_id))
        assert requests.count()[DESCRIBE] == described  # answered from what the watch knows

        await tasks_update(one, task.task_id, {only_key(parked): accept("1")})
        (_, parked) = await _every_server_shows(both, task.task_id, "input_required", asking("second"))
        await tasks_update(two, task.task_id, {only_key(parked): accept("2")})
        done = await _every_server_shows(both, task.task_id, "completed")
        assert [read.result["structuredContent"] for read in done] == [{"result": "done"}] * 2

        cancelled = await call_tool_task(two, "parks")
        await _every_server_shows(both, cancelled.task_id, "input_required", asking("name"))
        await tasks_cancel(one, cancelled.task_id)
        await _every_server_shows(both, cancelled.task_id, "cancelled")
        await no_workflow_running(temporal, task_queue)  # while the worker still runs: it closes them


async def test_a_short_task_costs_its_creating_server_one_long_poll(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """A task just created is followed for its close alone: the dozen events of its workflow
    end no long poll of the server that created it (following every event cost about five)."""

    async def quick() -> str:
        return "quick"

    requests = TemporalRequests()
    worker = server_with(make_extension(), quick, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, quick)
    async with Client(worker), Client(api) as two:
        for _ in range(SHORT_TASKS):
            task = await call_tool_task(two, "quick")
            assert (await task.result()).structured_content == {"result": "quick"}
        assert requests.count()[HISTORY] < 3 * SHORT_TASKS  # 1 each, more only for a task slower than 2 s
        await no_workflow_running(temporal, task_queue)


async def test_a_task_that_outlives_its_close_only_watch_is_followed_at_a_few_requests(
    temporal_server: DevServer, task_queue: str
) -> None:
    """With no worker online nothing happens to the task: the creating server's close-only long
    poll ends empty after 2 s, and it then follows every event with one long poll, not a loop."""
    requests = TemporalRequests()
    async with _a_task_no_worker_runs(temporal_server, task_queue, requests) as (client, task_id):
        with anyio.fail_after(DEADLINE):
            while requests.count()[HISTORY] < 2:  # the close-only poll, then the first page of every event
                await anyio.sleep(0.05)
        assert (await tasks_get(client, task_id)).status == "working"
        await tasks_cancel(client, task_id)
        assert (await tasks_get(client, task_id)).status == "cancelled"
        assert requests.count()[HISTORY] <= 4


async def test_a_waiting_client_of_a_queued_task_costs_a_few_describes_in_its_first_seconds(
    temporal_server: DevServer, task_queue: str
) -> None:
    """A task no worker has picked up yet, waited on by a client polling fast (a burst's
    tasks, queued): its reads, held, re-read it after 500 ms, then each second."""
    requests = TemporalRequests()
    async with _a_task_no_worker_runs(temporal_server, task_queue, requests) as (client, task_id):
        before = requests.count()[DESCRIBE]
        with anyio.fail_after(DEADLINE):
            for _ in range(3):  # the first read, then two held reads of about 1 s each
                assert (await tasks_get(client, task_id)).status == "working"
                await anyio.sleep(0.05)
        assert requests.count()[DESCRIBE] - before <= 2  # 1 here; 6 when re-read every 250 ms


async def unrun() -> str:
    """A tool the tests above create tasks of with no worker online."""
    return "ran"


@asynccontextmanager
async def _a_task_no_worker_runs(
    temporal_server: DevServer, task_queue: str, requests: TemporalRequests
) -> AsyncIterator[tuple[Client, str]]:
    """A client of an API-only server, and a task it created there that no worker runs (terminated
    after, unless a cancel already ended it)."""
    api, temporal = await _api_server(temporal_server, task_queue, requests, unrun)
    async with Client(api) as client:
        task = await call_tool_task(client, "unrun")
        try:
            yield client, task.task_id
        finally:
            handle = task_handle(temporal, task.task_id)
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate()


async def _requests_for_reads(requests: TemporalRequests, client: Client, task_id: str, status: str) -> int:
    """Read the task `READS` times (each shows `status`); the Temporal requests that cost."""
    before = requests.count()
    for _ in range(READS):
        assert (await tasks_get(client, task_id)).status == status
        await anyio.sleep(0.05)
    return (requests.count() - before).total()


async def test_a_quiet_task_read_many_times_costs_a_few_temporal_requests(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """Parked on input, or in a leg that reports nothing: no change, so no request per read.

    A parked task costs its first `describe()` and the watch's history requests; a leg's
    progress is re-read as its copy ages (after 1 s, 2 s, 4 s ... of standing still).
    """
    started, release = anyio.Event(), anyio.Event()
    gated = gated_tool(started, release)
    requests = TemporalRequests()
    worker = server_with(make_extension(), parks, gated, name="worker")
    # reads every 50 ms would each wait up to reread_hold: this counts what reads cost, not how long they wait
    api, temporal = await _api_server(temporal_server, task_queue, requests, parks, gated, reread_hold=timedelta(0))
    async with Client(worker) as one, Client(api) as two:
        parked = await call_tool_task(one, "parks")
        await _every_server_shows([one], parked.task_id, "input_required")
        assert await _requests_for_reads(requests, two, parked.task_id, "input_required") <= 4

        running = await call_tool_task(one, "gated")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        assert await _requests_for_reads(requests, two, running.task_id, "working") <= 10

        release.set()
        await tasks_cancel(two, parked.task_id)
        assert (await running.result()).structured_content == {"result": "done"}
        await no_workflow_running(temporal, task_queue)  # while the worker still runs: it closes them


async def test_progress_shows_within_progress_refresh(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """Progress adds no history event: the server re-reads it, within `progress_refresh`, not per read."""
    halfway, finish = anyio.Event(), anyio.Event()

    async def reports(ctx: Context) -> str:
        await ctx.report_progress(1, 3, "one")
        await halfway.wait()
        await ctx.report_progress(2, 3, "two")
        await finish.wait()
        return "done"

    requests = TemporalRequests()
    worker = server_with(make_extension(), reports, name="worker")
    api, temporal = await _api_server(  # reread_hold 0: reads every 50 ms, each answered at once
        temporal_server, task_queue, requests, reports, progress_refresh=timedelta(seconds=2), reread_hold=timedelta(0)
    )
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "reports")
        reads = 0

        async def progress_reads(message: str) -> None:
            nonlocal reads
            with anyio.fail_after(DEADLINE):
                while (await tasks_get(two, task.task_id)).status_message != message:
                    reads += 1
                    await anyio.sleep(0.05)

        await progress_reads("one")
        halfway.set()
        await progress_reads("two")
        assert requests.count()[DESCRIBE] < reads  # refreshed, not described per read
        finish.set()
        assert (await task.result()).structured_content == {"result": "done"}
        await no_workflow_running(temporal, task_queue)  # while the worker still runs: it closes them


async def test_a_message_after_a_silence_is_stamped_and_shows_on_every_server(
    temporal_server: DevServer,
    task_queue: str,
    make_extension: Callable[..., TemporalTasksExtension],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leg's message after it stood still (here: any) is stamped on its task (a `progressed`
    signal, and `McpTaskChangedAt` in its upsert), which every server following the task sees."""
    monkeypatch.setattr(_progress, "PROGRESS_STAMP_AFTER", timedelta(0))
    monkeypatch.setattr(_progress, "FIRST_MESSAGE_STAMP_AFTER", timedelta(0))
    go, finish = anyio.Event(), anyio.Event()
    reports = reporting_once(go, finish, "after a silence")

    requests = TemporalRequests()
    worker = server_with(make_extension(progress_refresh=NEVER), reports, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, reports, progress_refresh=NEVER)
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "reports")
        await _every_server_shows([one, two], task.task_id, "working")
        handle = temporal.get_workflow_handle(anonymous_workflow_id(task.task_id))
        await _leg_started(handle)
        before = await _history_length(handle)
        go.set()
        await _every_server_shows([one, two], task.task_id, "working", lambda read: read.status_message is not None)
        with anyio.fail_after(DEADLINE):
            while not (stamps := await _progressed_signals(handle)):
                await anyio.sleep(0.05)
        assert len(stamps) == 1 and stamps[0].event_id > before
        stamp_time = stamps[0].event_time.ToDatetime(tzinfo=timezone.utc)
        with anyio.fail_after(DEADLINE):  # the workflow task that applies the signal upserts it
            while ((await handle.describe()).typed_search_attributes.get(CHANGED_AT_ATTRIBUTE) or stamp_time) <= stamp_time:
                await anyio.sleep(0.05)
        finish.set()
        assert (await task.result()).structured_content == {"result": "done"}


async def test_a_leg_that_reports_steadily_stamps_nothing(make_extension: Callable[..., TemporalTasksExtension]) -> None:
    """Messages that follow each other (and the leg's start) closely cost no signal: only a
    message after `PROGRESS_STAMP_AFTER` of stillness is stamped."""
    go = anyio.Event()

    async def reports(ctx: Context) -> str:
        for step in range(5):
            await ctx.report_progress(step, 5, f"step {step}")
        await go.wait()
        return "done"

    extension = make_extension()
    async with Client(server_with(extension, reports)) as client:
        task = await call_tool_task(client, "reports")
        with anyio.fail_after(DEADLINE):
            while (await tasks_get(client, task.task_id)).status_message != "step 4":
                await anyio.sleep(0.05)
        go.set()
        assert (await task.result()).structured_content == {"result": "done"}
        assert await _progressed_signals(task_handle(extension, task.task_id)) == []


async def test_a_silent_leg_is_reread_only_until_its_first_message_would_be_stamped(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """A leg that reports nothing costs a client polling it a `describe()` per heartbeat only until
    a first message would be stamped (`FIRST_MESSAGE_STAMP_AFTER` and a heartbeat window), not for
    as long as a message could go unstamped (`PROGRESS_STAMP_AFTER`); the message it then reports is
    stamped on its task, and shows with no re-read due."""
    go, finish = anyio.Event(), anyio.Event()
    reports = reporting_once(go, finish, "after a silence")

    requests = TemporalRequests()
    worker = server_with(make_extension(), reports, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, reports, progress_refresh=NEVER)
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "reports")
        handle = temporal.get_workflow_handle(anonymous_workflow_id(task.task_id))
        await _leg_started(handle)
        started = anyio.current_time()
        # a heartbeat a window (1.6 s: make_extension's 2 s heartbeat_timeout) past the first stamp's
        # threshold tells the server; it lands within another window, and is re-read within a third
        quiet_from = started + _progress.FIRST_MESSAGE_STAMP_AFTER.total_seconds() + 3 * 1.6
        await _poll_until(two, task.task_id, quiet_from)
        before = requests.count()[DESCRIBE]
        await _poll_until(two, task.task_id, quiet_from + 10)  # re-read every 3.2 s, were a message unstamped
        assert requests.count()[DESCRIBE] - before <= 1

        go.set()
        with anyio.fail_after(DEADLINE):
            while (await tasks_get(two, task.task_id)).status_message != "after a silence":
                await anyio.sleep(0.05)
        assert len(await _progressed_signals(handle)) == 1
        finish.set()
        assert (await task.result()).structured_content == {"result": "done"}


async def _poll_until(client: Client, task_id: str, until: float) -> None:
    """Read the task as a polling client does, its next read one advertised interval after each answer."""
    while anyio.current_time() < until:
        answer = await tasks_get(client, task_id)
        assert answer.status == "working"
        await anyio.sleep((answer.poll_interval_ms or 0) / 1000)


async def _history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return (await handle.describe()).raw_description.workflow_execution_info.history_length


async def _progressed_signals(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [
        event
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == PROGRESSED_SIGNAL
    ]


async def _leg_started(handle: WorkflowHandle[Any, Any]) -> None:
    with anyio.fail_after(DEADLINE):
        while not any(
            leg.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for leg in (await handle.describe()).raw_description.pending_activities
        ):
            await anyio.sleep(0.05)


async def test_every_server_follows_a_reset_task_to_its_new_run(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """A reset re-runs a completed task in a new run of its workflow: the server that had read
    (and cached) its first close, and one that had not, both answer the new run's result."""
    runs = 0

    async def counted() -> str:
        nonlocal runs
        runs += 1
        return f"run {runs}"

    requests = TemporalRequests()
    worker = server_with(make_extension(), counted, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, counted)
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "counted")
        assert (await task.result()).structured_content == {"result": "run 1"}
        (first,) = await _every_server_shows([one], task.task_id, "completed")
        assert first.result["structuredContent"] == {"result": "run 1"}
        handle = task_handle(temporal, task.task_id)
        first_run = (await handle.describe()).run_id

        await reset_workflow(temporal_server, handle.id)
        again = await _every_server_shows([one, two], task.task_id, "completed", _result("run 2"))
        assert [read.result["structuredContent"] for read in again] == [{"result": "run 2"}] * 2
        assert runs == 2
        # re-checked for a newer run once per poll interval (5 s) at most, not per read
        assert await _requests_for_reads(requests, two, task.task_id, "completed") <= 2
        latest = await handle.describe()
        assert latest.run_id != first_run and latest.status == WorkflowExecutionStatus.COMPLETED
        await no_workflow_running(temporal, task_queue)


def _result(text: str) -> Callable[[ClientGetTaskResult], bool]:
    return lambda read: (read.result or {}).get("structuredContent") == {"result": text}


async def test_a_reset_task_asks_again_and_takes_new_answers(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """The new run does not reuse the first run's answers (Temporal re-applies their signals
    before it asks anything): it asks again, and a new answer completes it."""
    requests = TemporalRequests()
    worker = server_with(make_extension(), parks, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, parks)
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "parks")
        (parked,) = await _every_server_shows([one], task.task_id, "input_required", asking("name"))
        await tasks_update(one, task.task_id, {only_key(parked): accept("first")})
        await _every_server_shows([one, two], task.task_id, "completed")

        await reset_workflow(temporal_server, anonymous_workflow_id(task.task_id))
        (parked, _) = await _every_server_shows([one, two], task.task_id, "input_required", asking("name"))
        await tasks_update(two, task.task_id, {only_key(parked): accept("second")})
        await _every_server_shows([one, two], task.task_id, "completed")
        history = task_handle(temporal, task.task_id).fetch_history_events()
        signaled = [e async for e in history if e.HasField("workflow_execution_signaled_event_attributes")]
        assert len(signaled) == 2  # the first run's answer, re-applied by the reset (ignored); the new one
        await no_workflow_running(temporal, task_queue)


async def test_a_task_reset_while_running_is_followed_to_its_new_run(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """Reset in its leg: Temporal terminates the run (its tool is cancelled), and every server
    that followed the old run answers the new one's result."""
    runs, cancelled = 0, anyio.Event()
    first_started = anyio.Event()

    async def counted() -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            first_started.set()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()
        return f"run {runs}"

    requests = TemporalRequests()
    worker = server_with(make_extension(), counted, name="worker")
    api, temporal = await _api_server(temporal_server, task_queue, requests, counted)
    async with Client(worker) as one, Client(api) as two:
        task = await call_tool_task(one, "counted")
        with anyio.fail_after(DEADLINE):
            await first_started.wait()
        await _every_server_shows([one, two], task.task_id, "working")

        await reset_workflow(temporal_server, anonymous_workflow_id(task.task_id))
        await _every_server_shows([one, two], task.task_id, "completed", _result("run 2"))
        with anyio.fail_after(DEADLINE):
            await cancelled.wait()
        assert runs == 2
        await no_workflow_running(temporal, task_queue)
