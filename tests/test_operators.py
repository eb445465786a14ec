"""What an operator sees in Temporal: tasks findable by tool, status and hashed scope."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, InputRequiredResult
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.cli._reading import STATUS_QUERIES
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG
from helpers.servers import server_with, square
from helpers.temporal import start_broken_task, task_handle, workflow_closed, workflows_listed
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import ask as asking_for
from helpers.wire import tasks_cancel, tasks_get

pytestmark = pytest.mark.anyio


async def _only_listed(extension: TemporalTasksExtension, query: str, task_id: str) -> None:
    """Wait until the query lists exactly this task (visibility catches up eventually)."""
    assert extension.client is not None
    scoped = f"TaskQueue = '{extension.temporal_settings.task_queue}' AND {query}"
    ids: list[str] = []
    with anyio.move_on_after(DEADLINE):
        while not (len(ids) == 1 and ids[0].endswith(task_id)):
            await anyio.sleep(0.1)
            ids = [execution.id async for execution in extension.client.list_workflows(scoped)]
    assert len(ids) == 1 and ids[0].endswith(task_id), (query, ids)


async def _published(extension: TemporalTasksExtension, task_id: str) -> str:
    """The task's McpTaskStatus search attribute; the memo never restates it (a billed event)."""
    handle = task_handle(extension, task_id)
    description = await handle.describe()
    assert "status" not in await description.memo()
    (indexed,) = description.search_attributes["McpTaskStatus"]
    return str(indexed)


async def test_tasks_are_searchable_by_tool_status_and_scope(make_extension) -> None:
    extension = make_extension()
    mcp = server_with(extension)

    mcp.tool(square, task=True)

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str | InputRequiredResult:
        return asking_for("q")

    async with Client(mcp) as client:
        done = await call_tool_task(client, "square", {"n": 3})
        await status_becomes(done, "completed")
        parked = await call_tool_task(client, "ask")
        await status_becomes(parked, "input_required")

        completed_square = f"McpTool = 'square' AND {STATUS_QUERIES['completed']}"
        completed = await workflows_listed(extension, 1, completed_square)
        waiting = await workflows_listed(extension, 1, "McpTool = 'ask' AND McpTaskStatus = 'input_required'")
        anonymous = await workflows_listed(extension, 2, f"McpScope = '{ANONYMOUS_SCOPE_TAG}'")

    assert [workflow.endswith(done.task_id) for workflow in completed] == [True]
    assert [workflow.endswith(parked.task_id) for workflow in waiting] == [True]
    assert len(anonymous) == 2


async def test_every_status_is_published_where_operators_search(make_extension) -> None:
    extension = make_extension()
    mcp = server_with(extension)
    release = asyncio.Event()

    @mcp.tool(task=True)
    async def hold() -> str:
        await release.wait()
        return "released"

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str | InputRequiredResult:
        return asking_for("q")

    mcp.tool(square, task=True)

    @mcp.tool(task=True)
    async def refuse() -> str:
        raise MCPError(code=INTERNAL_ERROR, message="refused")

    async with Client(mcp) as client:
        working = await call_tool_task(client, "hold")
        cancelled = await call_tool_task(client, "hold")
        parked = await call_tool_task(client, "ask")
        completed = await call_tool_task(client, "square", {"n": 3})
        failed = await call_tool_task(client, "refuse")
        await status_becomes(cancelled, "working")
        await tasks_cancel(client, cancelled.task_id)
        expected = {
            "working": working.task_id,
            "cancelled": cancelled.task_id,
            "input_required": parked.task_id,
            "completed": completed.task_id,
            "failed": failed.task_id,
        }
        for status, task_id in expected.items():
            await _only_listed(extension, STATUS_QUERIES[status], task_id)
            # success is not published (a billed Action): the execution's COMPLETED status says it
            assert await _published(extension, task_id) == ("working" if status == "completed" else status)
        release.set()


async def test_an_expired_parked_task_is_published_as_failed(make_extension) -> None:
    extension = make_extension(task_ttl=timedelta(seconds=1))
    mcp = server_with(extension)

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str | InputRequiredResult:
        return asking_for("q")

    async with Client(mcp) as client:
        parked = await call_tool_task(client, "ask")
        await _only_listed(extension, "McpTaskStatus = 'failed'", parked.task_id)
        assert await _published(extension, parked.task_id) == "failed"
        with pytest.raises(MCPError, match="not found"):
            await tasks_get(client, parked.task_id)


async def test_a_workflow_that_cannot_proceed_fails_instead_of_retrying_forever(make_extension) -> None:
    """An exception in the workflow's own code (here: a timeout no timedelta holds) ends the task failed."""
    extension = make_extension()
    mcp = server_with(extension)

    mcp.tool(square, task=True)

    async with Client(mcp):
        handle = await start_broken_task(extension, "broken")
        with pytest.raises(WorkflowFailureError), anyio.fail_after(DEADLINE):
            await handle.result()
        assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
        assert await _published(extension, "broken") == "failed"


async def test_a_cancelled_task_closes_even_when_its_tool_ignores_the_cancel(make_extension) -> None:
    extension = make_extension()
    mcp = server_with(extension)
    release = asyncio.Event()

    @mcp.tool(task=True)
    async def stubborn() -> str:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                pass
        return "late"

    async with Client(mcp) as client:
        task = await call_tool_task(client, "stubborn")
        await status_becomes(task, "working")
        await tasks_cancel(client, task.task_id)
        await workflow_closed(extension, task.task_id)
        handle = task_handle(extension, task.task_id)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        await _only_listed(extension, "McpTaskStatus = 'cancelled'", task.task_id)
        running = f"TaskQueue = '{extension.temporal_settings.task_queue}' AND ExecutionStatus = 'Running'"
        assert [execution.id async for execution in extension.client.list_workflows(running)] == []
        release.set()
