"""A durable call a client's timeout cut short, joined by the client's repeat (`execution_policy(rejoin=True)`).

Proves, over the MCP wire on a real Temporal server: a client with no tasks whose request
timeout (2 s) is shorter than the tool (6 s) calls again each time its request times out,
and gets the tool's result; in Temporal, one `mcp-call/` workflow with one run and one leg,
whose body ran once, although every timed-out request was withdrawn. A repeat after the end
(within `task_ttl`) gets the same result from that workflow, with no new run; other
arguments are another call; and a tool without `rejoin` still has its workflow cancelled
by a withdrawn request, and runs again when called again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from mcp.shared.exceptions import MCPError
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.servers import NoTasksClient, server_with
from helpers.temporal import temporal_client, workflows_listed
from helpers.waits import DEADLINE

pytestmark = pytest.mark.anyio

TOOL_SECONDS = 6
CLIENT_TIMEOUT = 2


def _tools(runs: list[str]) -> list[Callable[..., Any]]:
    @execution_policy(rejoin=True)
    async def slow_report(name: str) -> str:
        runs.append(name)
        await anyio.sleep(TOOL_SECONDS)
        return f"report {name}"

    async def slow_once(name: str) -> str:
        runs.append(f"once {name}")
        await anyio.sleep(TOOL_SECONDS)
        return f"once {name}"

    return [slow_report, slow_once]


async def _until_answered(client: NoTasksClient, tool: str, name: str) -> tuple[str, int]:
    """Call until a call is answered: its text, and how many calls timed out first."""
    timed_out = 0
    with anyio.fail_after(DEADLINE):
        while True:
            try:
                result = await client.call_tool(tool, {"name": name})
            except (MCPError, TimeoutError):
                timed_out += 1
                continue
            return result.content[0].text, timed_out


async def _runs_and_legs(extension: TemporalTasksExtension, workflow_id: str) -> tuple[int, int]:
    temporal = temporal_client(extension)
    runs = [w async for w in temporal.list_workflows(f"WorkflowId = '{workflow_id}'")]
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    legs = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    return len(runs), len(legs)


async def test_a_client_whose_timeout_is_shorter_than_the_tool_gets_its_result_by_calling_again(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    server: FastMCP = server_with(extension, *_tools(runs))
    async with NoTasksClient(server, timeout=CLIENT_TIMEOUT) as client:
        text, timed_out = await _until_answered(client, "slow_report", "q3")
        assert text == "report q3" and timed_out >= 2
        (workflow_id,) = await workflows_listed(extension, 1)
        assert workflow_id.startswith("mcp-call/")
        assert await _runs_and_legs(extension, workflow_id) == (1, 1)

        again, timed_out = await _until_answered(client, "slow_report", "q3")  # after the end: the same result
        assert (again, timed_out) == ("report q3", 0)
        assert await _runs_and_legs(extension, workflow_id) == (1, 1)
        assert runs == ["q3"]

        other, _ = await _until_answered(client, "slow_report", "q4")
        assert other == "report q4" and runs == ["q3", "q4"]


async def test_a_call_without_rejoin_is_still_cancelled_when_withdrawn(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with NoTasksClient(server_with(extension, *_tools(runs)), timeout=CLIENT_TIMEOUT) as client:
        with pytest.raises((MCPError, TimeoutError)):
            await client.call_tool("slow_once", {"name": "q5"})
        (workflow_id,) = await workflows_listed(extension, 1)
        handle = temporal_client(extension).get_workflow_handle(workflow_id)
        with anyio.fail_after(DEADLINE):
            while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await anyio.sleep(0.1)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
