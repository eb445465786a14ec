"""What a task bills on Temporal Cloud, counted in its real history by the benchmark's rules.

A trivial task costs what a bare workflow + activity does: its start and its leg, 2
Actions (a `leg="local"` one: its start and the leg's marker). Its success is not
upserted to `McpTaskStatus`, since the closed execution's status says it, and operators
still find it as completed with `fastmcp-temporal tasks`. A task that ends with an error
outcome closes COMPLETED too, so its `failed` is still published, and it lists as failed.
"""

from __future__ import annotations

import json
import runpy
import uuid
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHistory

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from fastmcp_temporal.devserver import DevServer
from helpers.cli import cli, listed
from helpers.servers import server_with
from helpers.temporal import task_handle
from helpers.waits import finished

pytestmark = pytest.mark.anyio

UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
# The benchmark's own rules, read from their file: bench/ is never on the tests' sys.path.
billable_actions = runpy.run_path(str(Path(__file__).parents[1] / "bench" / "billing.py"))["billable_actions"]


async def _closed_task(
    extension: TemporalTasksExtension, task_id: str
) -> tuple[WorkflowExecutionDescription, WorkflowHistory]:
    handle = task_handle(extension, task_id)
    return await handle.describe(), await handle.fetch_history()


@pytest.mark.parametrize("leg", ["activity", "local"])
async def test_a_trivial_task_costs_two_actions_and_still_lists_as_completed(
    make_extension, temporal_server: DevServer, leg: str
) -> None:
    tool = f"square_{uuid.uuid4().hex[:8]}"
    extension = make_extension()
    mcp = server_with(extension)

    @mcp.tool(name=tool, task=True)
    @execution_policy(leg=leg)
    async def squared(n: int) -> int:
        return n * n

    async with Client(mcp) as client:
        task = await call_tool_task(client, tool, {"n": 4})
        assert (await finished(task)).status == "completed"
        description, history = await _closed_task(extension, task.task_id)

    assert description.status == WorkflowExecutionStatus.COMPLETED
    assert [event for event in history.events if event.event_type == UPSERT] == []
    assert billable_actions(history.events) == 2
    assert description.typed_search_attributes  # searchable: what the CLI filters on

    rows = await listed(temporal_server, "--tool", tool, "--status", "completed", until=lambda rows: bool(rows))
    assert [(row["taskId"], row["status"]) for row in rows] == [(task.task_id, "completed")]
    code, out, err = await cli(temporal_server, "show", "--json", "--", task.task_id)
    assert code == 0, err
    assert json.loads(out)["status"] == "completed"


async def test_a_task_that_ends_with_an_error_is_published_failed_and_lists_as_failed(
    make_extension, temporal_server: DevServer
) -> None:
    tool = f"refuse_{uuid.uuid4().hex[:8]}"
    extension = make_extension()
    mcp = server_with(extension)

    @mcp.tool(name=tool, task=True)
    async def refuse() -> str:
        raise MCPError(code=INTERNAL_ERROR, message="refused")

    async with Client(mcp) as client:
        task = await call_tool_task(client, tool)
        assert (await finished(task)).status == "failed"
        description, history = await _closed_task(extension, task.task_id)

    assert description.status == WorkflowExecutionStatus.COMPLETED  # the outcome holds the error
    assert len([event for event in history.events if event.event_type == UPSERT]) == 1
    assert billable_actions(history.events) == 3

    rows = await listed(temporal_server, "--tool", tool, "--status", "failed", until=lambda rows: bool(rows))
    assert [(row["taskId"], row["status"]) for row in rows] == [(task.task_id, "failed")]
    code, out, err = await cli(temporal_server, "list", "--json", "--tool", tool, "--status", "completed")
    assert code == 0, err
    assert json.loads(out) == []
