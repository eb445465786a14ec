"""A quiet task asks its clients to poll it less, and still shows every change at the next poll.

Proves, on a real Temporal server over the MCP wire, with two servers on one task queue
(one runs the worker and follows tasks with long polls; one is API-only and describes the
task at every read, as a server does once it has let a quiet task's watch go): a running
task whose answer reads the same for `quiet_poll_interval` advertises a longer
`pollIntervalMs` in its `tasks/get` answers, growing up to that setting, on both servers;
an ask the tool makes once released shows at the API server's very next poll (the ask is
first read back from the workflow's memo in Temporal), and that answer and the later ones
advertise the tool's own interval again; a close and a cancel made through the other
server, once Temporal shows them, show at the very next poll too. A server that follows a
task with a long poll of its history lets go of it once the task is quiet and the gap between
its reads there is longer than a long poll lasts (counted on that server's own Temporal client:
no long poll of the task left in flight), and still shows the task's close at the next read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from mcp_types import InputRequiredResult
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._quiet import LONG_POLL_PERIOD
from fastmcp_temporal.workflows.models import TaskMemo
from helpers.temporal import HistoryLongPolls, task_handle
from helpers.waits import DEADLINE, eventually
from helpers.wire import accept, ask, tasks_cancel, tasks_get, tasks_update

pytestmark = pytest.mark.anyio

OWN_MS = 200  # the tools' own poll interval
QUIET = timedelta(seconds=2)  # quiet_poll_interval: the longest interval a quiet task advertises
QUIET_MS = int(QUIET.total_seconds() * 1000)
SETTINGS: dict[str, Any] = {"quiet_poll_interval": QUIET, "reread_hold": timedelta(0)}


def _tools(release: anyio.Event) -> list[Callable[..., Awaitable[Any]]]:
    async def waits_then_asks(ctx: Context) -> str | InputRequiredResult:
        """Waits until released, then asks "name"; returns what it was told."""
        if ctx.input_responses is None:
            await release.wait()
            return ask("name")
        return "answered"

    async def waits() -> str:
        """Returns "done" once released."""
        await release.wait()
        return "done"

    return [waits_then_asks, waits]


def _server(extension: TemporalTasksExtension, release: anyio.Event, name: str) -> FastMCP:
    server = FastMCP(name)
    server.add_extension(extension)
    for tool in _tools(release):
        server.tool(tool, task=TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=OWN_MS)))
    return server


@asynccontextmanager
async def _two_servers(
    temporal_server: DevServer, make_extension: Callable[..., TemporalTasksExtension], release: anyio.Event
) -> AsyncIterator[tuple[Client, Client, TemporalTasksExtension]]:
    """A client of the worker server (watching), one of an API-only server (a describe per read)."""
    worker = make_extension(**SETTINGS)
    api = make_extension(**SETTINGS, worker=False, watched_tasks=0)
    async with Client(_server(worker, release, "worker")) as one, Client(_server(api, release, "api")) as two:
        yield one, two, worker


async def _grown(client: Client, task_id: str, status: str) -> list[int]:
    """Read the task until it advertises `quiet_poll_interval`; every interval it advertised on the way."""
    seen: list[int] = []
    with anyio.fail_after(DEADLINE):
        while not seen or seen[-1] < QUIET_MS:
            read = await tasks_get(client, task_id)
            assert read.status == status
            seen.append(read.poll_interval_ms or 0)
            await anyio.sleep(0.05)
    return seen


async def _quiet_on_both(one: Client, two: Client, task_id: str, status: str) -> None:
    """The task's interval grows from its own to `quiet_poll_interval` on each server, never past it."""
    for client in (one, two):
        seen = await _grown(client, task_id, status)
        assert seen[0] == OWN_MS and seen == sorted(seen) and seen[-1] == QUIET_MS
        assert any(OWN_MS < ms < QUIET_MS for ms in seen)  # it grew with the quiet, not at once


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until Temporal shows `what`."""
    try:
        with anyio.fail_after(DEADLINE):
            while not await check():
                await anyio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"Temporal never showed {what}") from None


async def test_a_quiet_task_asks_for_fewer_polls_and_its_ask_shows_at_the_next_poll(
    temporal_server: DevServer, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    release = anyio.Event()
    async with _two_servers(temporal_server, make_extension, release) as (one, two, worker):
        task = await call_tool_task(one, "waits_then_asks")
        await _quiet_on_both(one, two, task.task_id, "working")
        handle = task_handle(worker, task.task_id)

        release.set()

        async def asked() -> bool:
            return bool(TaskMemo.parse(await (await handle.describe()).memo()).open_requests())

        await _until(asked, "the ask in the workflow's memo")
        parked = await tasks_get(two, task.task_id)
        assert parked.status == "input_required" and list(parked.input_requests or {}) != []
        assert parked.poll_interval_ms == OWN_MS  # a change: the tool's own interval again
        with anyio.fail_after(DEADLINE):  # the watching server shows it once its long poll returns
            while (seen := await tasks_get(one, task.task_id)).status != "input_required":
                await anyio.sleep(0.05)
        assert seen.poll_interval_ms == OWN_MS

        (key,) = parked.input_requests or {}
        await tasks_update(one, task.task_id, {key: accept("Ada")})
        done = await task.wait(timeout=DEADLINE)
        assert done.status == "completed" and "answered" in str(done.result)
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_a_close_and_a_cancel_through_another_server_show_at_the_next_poll_of_a_quiet_task(
    temporal_server: DevServer, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    release = anyio.Event()
    async with _two_servers(temporal_server, make_extension, release) as (one, two, worker):
        closing = await call_tool_task(one, "waits")
        cancelled = await call_tool_task(one, "waits")
        for task in (closing, cancelled):
            await _quiet_on_both(one, two, task.task_id, "working")

        await tasks_cancel(one, cancelled.task_id)
        cancelled_handle = task_handle(worker, cancelled.task_id)

        async def cancel_shown() -> bool:
            return (await cancelled_handle.describe()).raw_description.workflow_extended_info.cancel_requested

        await _until(cancel_shown, "the cancel request on the workflow")
        assert (await tasks_get(two, cancelled.task_id)).status == "cancelled"

        release.set()
        closing_handle = task_handle(worker, closing.task_id)

        async def closed() -> bool:
            return (await closing_handle.describe()).status == WorkflowExecutionStatus.COMPLETED

        await _until(closed, "the workflow completed")
        final: ClientGetTaskResult = await tasks_get(two, closing.task_id)
        assert final.status == "completed"
        assert final.result is not None and "done" in str(final.result)


async def test_a_quiet_task_read_at_longer_gaps_than_a_long_poll_lasts_is_no_longer_long_polled(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    release = anyio.Event()
    temporal = await TemporalClient.connect(temporal_server.address)
    long_polls = HistoryLongPolls(temporal)  # the API server's own client: its watches' long polls
    api = TemporalTasksExtension(client=temporal, task_queue=task_queue, worker=False, **SETTINGS)
    async with (
        Client(_server(make_extension(**SETTINGS), release, "worker")),
        Client(_server(api, release, "api")) as reader,
    ):
        task = await call_tool_task(reader, "waits")
        workflow_id = task_handle(temporal, task.task_id).id
        assert (await tasks_get(reader, task.task_id)).poll_interval_ms == OWN_MS
        await eventually(lambda: long_polls.in_flight(workflow_id) == 1, what="the server to follow the task")

        await anyio.sleep(
            LONG_POLL_PERIOD.total_seconds() + 1
        )  # the next read comes after a long poll's span
        quiet = await tasks_get(reader, task.task_id)
        assert (quiet.status, quiet.poll_interval_ms) == ("working", QUIET_MS)
        await eventually(
            lambda: long_polls.in_flight(workflow_id) == 0,
            what="the server to let go of the quiet task's long poll",
        )

        release.set()
        closing = task_handle(temporal, task.task_id)

        async def closed() -> bool:
            return (await closing.describe()).status == WorkflowExecutionStatus.COMPLETED

        await _until(closed, "the workflow completed")
        final = await tasks_get(reader, task.task_id)  # a describe() answers it, with no watch
        assert final.status == "completed" and "done" in str(final.result)
        assert long_polls.in_flight(workflow_id) == 0
