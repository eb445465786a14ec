"""What an operator sees in Temporal: tasks findable by tool, status and hashed scope."""

from __future__ import annotations

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import ElicitRequest, InputRequiredResult
from task_wire import DEADLINE, status_becomes

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal._scope import ANONYMOUS_SCOPE_TAG

pytestmark = pytest.mark.anyio


async def _listed(extension: TemporalTasksExtension, query: str, count: int) -> list[str]:
    """The workflow ids matching a visibility query on this test's queue, once `count` show."""
    assert extension.client is not None
    scoped = f"TaskQueue = '{extension.temporal_settings.task_queue}' AND {query}"
    with anyio.fail_after(DEADLINE):
        while True:
            ids = [execution.id async for execution in extension.client.list_workflows(scoped)]
            if len(ids) >= count:
                return ids
            await anyio.sleep(0.1)


async def test_tasks_are_searchable_by_tool_status_and_scope(make_extension) -> None:
    extension = make_extension()
    mcp = FastMCP("operators")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def square(n: int) -> int:
        return n * n

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str | InputRequiredResult:
        question = ElicitRequest(
            method="elicitation/create",
            params={"mode": "form", "message": "?", "requestedSchema": {"type": "object", "properties": {}}},
        )
        return InputRequiredResult(result_type="input_required", input_requests={"q": question})

    async with Client(mcp) as client:
        done = await call_tool_task(client, "square", {"n": 3})
        await status_becomes(done, "completed")
        parked = await call_tool_task(client, "ask")
        await status_becomes(parked, "input_required")

        completed = await _listed(extension, "McpTool = 'square' AND McpTaskStatus = 'completed'", 1)
        waiting = await _listed(extension, "McpTool = 'ask' AND McpTaskStatus = 'input_required'", 1)
        anonymous = await _listed(extension, f"McpScope = '{ANONYMOUS_SCOPE_TAG}'", 2)

    assert [workflow.endswith(done.task_id) for workflow in completed] == [True]
    assert [workflow.endswith(parked.task_id) for workflow in waiting] == [True]
    assert len(anonymous) == 2
