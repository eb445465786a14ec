"""A task's life beyond the happy path, over the MCP wire on a real Temporal server.

Proves that a running tool can be cancelled (the body sees `CancelledError`, the task
reads `cancelled`), that a cancelled parked task never resumes, and that finished tasks
stay finished; that `tasks/get` answers with no worker online and a worker started
later picks the task up (or never runs it, if it was cancelled meanwhile); that tasks
survive a server restart (finished ones keep their result, parked ones can still be
answered, running ones are re-run); that a finished task disappears `ttlMs` after it
stopped; and that shutting a server down with a running or parked task does not hang.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import ToolTask, call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ErrorData,
    InputRequiredResult,
)

from helpers.servers import server_with, square
from helpers.temporal import workflow_closed
from helpers.waits import DEADLINE, eventually, status_becomes
from helpers.wire import ask as asking_for
from helpers.wire import tasks_cancel, tasks_get, text_of

pytestmark = pytest.mark.anyio


# --- helpers -----------------------------------------------------------------


async def until_not_found(task: ToolTask) -> ErrorData:
    """Poll `tasks/get` until the server no longer knows the task; return its error."""
    with anyio.fail_after(20):
        while True:
            try:
                await task.status()
            except MCPError as exc:
                return exc.error
            await anyio.sleep(0.2)


def asker(legs: list[int] | None = None) -> Callable[..., Awaitable[Any]]:
    """A tool that parks on its first leg asking for a name, then greets; records each leg."""
    legs = [] if legs is None else legs

    async def ask(ctx: Context) -> str | InputRequiredResult:
        legs.append(1)
        if ctx.input_responses is None:
            return asking_for("name")
        return f"hi {ctx.input_responses['name'].content['value']}"

    return ask


async def fault() -> str:
    raise MCPError(code=-32001, message="protocol fault")


# --- cancellation ------------------------------------------------------------


def cancellable_sleeper(events: list[str]) -> Callable[..., Awaitable[str]]:
    async def sleeper(ctx: Context) -> str:
        events.append(f"started:{ctx.task_id}")
        try:
            await anyio.sleep(60)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        events.append("finished")
        return "slept"

    return sleeper


async def test_cancel_reaches_the_running_tool_body(make_extension) -> None:
    events: list[str] = []
    server = server_with(make_extension(), cancellable_sleeper(events))
    async with Client(server) as client:
        task = await call_tool_task(client, "sleeper")
        await eventually(lambda: f"started:{task.task_id}" in events)

        assert await task.cancel() is None  # an empty ack

        await status_becomes(task, "cancelled")
        await eventually(lambda: "cancelled" in events)
        assert "finished" not in events
        assert await task.cancel() is None  # cancelling again is still acknowledged
        assert (await task.status()).status == "cancelled"
        with pytest.raises(ToolError, match="was cancelled"):
            await task.result()


async def test_a_cancelled_running_leg_stops_without_a_warning_from_the_worker(
    make_extension, caplog: pytest.LogCaptureFixture
) -> None:
    # the cancel closes the task without waiting for the leg, whose next heartbeat finds no task
    caplog.set_level(logging.DEBUG, logger="temporalio.activity")
    events: list[str] = []
    server = server_with(make_extension(), cancellable_sleeper(events))
    async with Client(server) as client:
        task = await call_tool_task(client, "sleeper")
        await eventually(lambda: f"started:{task.task_id}" in events)
        await task.cancel()
        await status_becomes(task, "cancelled")
        await eventually(lambda: any(_completing(record) for record in caplog.records))

    assert "cancelled" in events
    completions = [record for record in caplog.records if _completing(record)]
    assert [record.levelname for record in completions] == ["DEBUG"], [r.getMessage() for r in completions]


def _completing(record: logging.LogRecord) -> bool:
    """The SDK's line for how it completed an activity attempt."""
    return record.name == "temporalio.activity" and record.getMessage().startswith("Completing")


async def test_transparent_call_of_a_cancelled_task_raises_tool_error(make_extension) -> None:
    events: list[str] = []
    server = server_with(make_extension(), cancellable_sleeper(events))
    async with Client(server) as client:
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await client.call_tool("sleeper")
            except ToolError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await eventually(lambda: any(e.startswith("started:") for e in events))
            task_id = events[0].removeprefix("started:")
            await tasks_cancel(client, task_id)
            await eventually(lambda: bool(outcome))

    assert f"Task {task_id} was cancelled" in str(outcome[0])


@pytest.mark.parametrize(
    ("tool", "arguments", "state"), [(square, {"n": 7}, "completed"), (fault, {}, "failed")]
)
async def test_cancelling_a_finished_task_changes_nothing(
    make_extension, tool: Callable[..., Awaitable[Any]], arguments: dict[str, Any], state: str
) -> None:
    server = server_with(make_extension(), tool)
    async with Client(server) as client:
        task = await call_tool_task(client, tool.__name__, arguments)
        done = await task.wait(timeout=DEADLINE)
        assert done.status == state

        assert await task.cancel() is None
        assert await task.cancel() is None  # cancelling twice is acknowledged too

        after = await task.status()
    assert (after.status, after.result, after.error) == (state, done.result, done.error)


async def test_a_tool_that_swallows_cancellation_still_ends_cancelled(make_extension) -> None:
    events: list[str] = []

    async def stubborn() -> str:
        events.append("started")
        try:
            await anyio.sleep(60)
        except asyncio.CancelledError:
            events.append("swallowed")
        return "finished anyway"

    extension = make_extension()
    async with Client(server_with(extension, stubborn)) as client:
        task = await call_tool_task(client, "stubborn")
        await eventually(lambda: "started" in events)
        await task.cancel()
        await eventually(lambda: "swallowed" in events)
        await workflow_closed(extension, task.task_id)
        assert (await task.status()).status == "cancelled"


# --- reads with no worker online ----------------------------------------------


async def test_tasks_get_answers_without_a_worker_and_a_late_worker_finishes_the_task(
    make_extension,
) -> None:
    api_only = server_with(make_extension(worker=False), square)
    async with Client(api_only) as api:
        with anyio.fail_after(10):  # creation needs no worker
            task = await call_tool_task(api, "square", {"n": 9})
        for _ in range(3):
            assert (await task.status()).status == "working"

        async with Client(server_with(make_extension(), square)):  # its lifespan runs a worker
            done = await status_becomes(task, "completed")
            assert text_of(done) == "81"

        after = await task.status()  # the worker is gone again
        assert after.status == "completed"
        assert after.result == done.result


async def test_a_task_cancelled_with_no_worker_never_runs(make_extension) -> None:
    events: list[str] = []
    sleeper = cancellable_sleeper(events)
    async with Client(server_with(make_extension(worker=False), sleeper)) as api:
        task = await call_tool_task(api, "sleeper")
        await task.cancel()
        assert (await task.status()).status == "cancelled"

        worker = make_extension()
        async with Client(server_with(worker, sleeper)):
            await workflow_closed(worker, task.task_id)
        assert (await task.status()).status == "cancelled"
    assert events == []  # the tool body never started


# --- restarts -------------------------------------------------------------------


async def test_a_finished_task_is_readable_after_a_server_restart(make_extension) -> None:
    async with Client(server_with(make_extension(), square)) as client:
        task = await call_tool_task(client, "square", {"n": 5})
        before = await task.wait(timeout=DEADLINE)
        assert before.status == "completed"

    async with Client(server_with(make_extension(), square)) as client:
        after = await tasks_get(client, task.task_id)
    assert after.status == "completed"
    assert after.result == before.result
    assert text_of(after) == "25"


async def test_a_task_running_at_shutdown_is_rerun_after_the_restart(make_extension) -> None:
    runs: list[int] = []

    async def flaky_first(n: int) -> int:
        runs.append(n)
        if len(runs) == 1:
            await anyio.sleep(60)  # the first server stops while this runs
        return n + 1

    async with Client(server_with(make_extension(), flaky_first)) as client:
        task = await call_tool_task(client, "flaky_first", {"n": 1})
        await eventually(lambda: len(runs) == 1)

    async with Client(server_with(make_extension(), flaky_first)) as client:
        revived = ToolTask(client, "flaky_first", task.create_result)
        done = await status_becomes(revived, "completed")
    assert text_of(done) == "2"
    assert len(runs) >= 2  # at-least-once: the interrupted body ran again


async def test_a_parked_task_can_be_answered_after_a_server_restart(make_extension) -> None:
    legs: list[int] = []
    async with Client(server_with(make_extension(), asker(legs))) as client:
        task = await call_tool_task(client, "ask")
        await status_becomes(task, "input_required")

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> dict[str, str]:
        return {"value": "Ada"}

    async with Client(server_with(make_extension(), asker(legs)), elicitation_handler=answer) as client:
        revived = ToolTask(client, "ask", task.create_result)
        with anyio.fail_after(DEADLINE):
            result = await revived.result()
    assert result.data == "hi Ada"
    assert len(legs) == 2


# --- TTL ------------------------------------------------------------------------


async def test_a_finished_task_expires_ttl_after_it_stopped(make_extension) -> None:
    # a parked task's expiry: test_input.py::test_a_task_parked_longer_than_its_ttl_is_not_found
    server = server_with(make_extension(task_ttl=timedelta(seconds=2)), square)
    async with Client(server) as client:
        task = await call_tool_task(client, "square", {"n": 3})
        assert task.create_result.ttl_ms == 2000
        stopped = await status_becomes(task, "completed")
        assert stopped.ttl_ms == 2000

        expired = await until_not_found(task)  # polling does not keep it alive
        with pytest.raises(MCPError) as unknown:
            await tasks_get(client, "no-such-task")

    assert expired.code == -32602
    assert expired.message == f"Task {task.task_id} not found"
    assert unknown.value.error.code == -32602
    assert unknown.value.error.message == "Task no-such-task not found"


# --- shutdown ---------------------------------------------------------------------


@pytest.mark.parametrize("grace", [timedelta(0), timedelta(seconds=1)])
async def test_shutdown_with_running_and_parked_tasks_returns_promptly(
    make_extension, grace: timedelta
) -> None:
    started = anyio.Event()

    async def busy() -> str:
        started.set()
        await anyio.sleep(60)
        return "never"

    client = Client(server_with(make_extension(shutdown_grace=grace), busy, asker()))
    with anyio.fail_after(DEADLINE):
        await client.__aenter__()
    try:
        running = await call_tool_task(client, "busy")
        parked = await call_tool_task(client, "ask")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        await status_becomes(parked, "input_required")
        assert (await running.status()).status == "working"
    finally:
        with anyio.fail_after(15):
            await client.__aexit__(None, None, None)
