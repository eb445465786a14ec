"""Per-tool execution policy on a real Temporal server, seen over the MCP wire.

Proves that a leg outliving its `@execution_policy(start_to_close_timeout=...)` with one
attempt ends the task `failed` with a message that says so; that a tool's own `timeout=`
is enforced (the `isError` result a synchronous call returns); that tool errors
(`ToolError`, any exception) are results, never retried; and that Temporal schedules
each leg with the extension's defaults unless the tool's policy overrides them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import ToolTask, call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from temporalio.api.workflow.v1 import PendingActivityInfo

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from fastmcp_temporal._scope import ANONYMOUS_SCOPE_TAG, workflow_id

pytestmark = pytest.mark.anyio

DEADLINE = 30


async def finished(task: ToolTask) -> ClientGetTaskResult:
    """Poll `tasks/get` until the task is terminal."""
    with anyio.fail_after(DEADLINE):
        while (current := await task.status()).status not in ("completed", "failed", "cancelled"):
            await anyio.sleep(0.05)
    return current


async def running_leg(extension: TemporalTasksExtension, task: ToolTask) -> PendingActivityInfo:
    """The task's tool leg as Temporal has it scheduled, once it is running."""
    assert extension.client is not None
    handle = extension.client.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id))
    with anyio.fail_after(DEADLINE):
        while not (pending := (await handle.describe()).raw_description.pending_activities):
            await anyio.sleep(0.05)
    return pending[0]


def server_with(extension: TemporalTasksExtension) -> FastMCP:
    server = FastMCP("policy")
    server.add_extension(extension)
    return server


async def test_a_leg_over_its_start_to_close_timeout_fails_the_task_saying_so(mcp: FastMCP) -> None:
    @mcp.tool(task=True)
    @execution_policy(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=1)
    async def stuck() -> str:
        await anyio.sleep(60)
        return "never"

    async with Client(mcp) as client:
        final = await finished(await call_tool_task(client, "stuck"))
    assert final.status == "failed"
    assert final.status_message == (
        "The tool did not finish within its start_to_close_timeout of 1s, after 1 attempt(s)."
    )


async def test_a_tools_own_timeout_is_enforced_as_a_synchronous_call_would(mcp: FastMCP) -> None:
    @mcp.tool(task=True, timeout=0.5)
    async def slow() -> str:
        await anyio.sleep(60)
        return "never"

    async with Client(mcp) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("slow", raise_on_error=False)
    assert result.is_error
    assert "Tool 'slow' execution timed out after 0.5s" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (ToolError("out of stock"), "out of stock"),
        (ValueError("bad sku"), "Error calling tool 'order': bad sku"),
    ],
)
async def test_a_tool_error_is_a_result_and_never_retried(
    mcp: FastMCP, error: Exception, shown: str
) -> None:
    runs = 0

    @mcp.tool(task=True)
    async def order() -> str:
        nonlocal runs
        runs += 1
        raise error

    async with Client(mcp) as client:
        result = await client.call_tool("order", raise_on_error=False)
    assert result.is_error
    assert result.content[0].text == shown  # type: ignore[union-attr]
    assert runs == 1


async def test_legs_use_the_extension_defaults_unless_the_tool_overrides_them(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension(heartbeat_timeout=timedelta(seconds=3), maximum_attempts=7)
    server = server_with(extension)
    release = anyio.Event()

    @server.tool(task=True)
    async def plain() -> str:
        await release.wait()
        return "plain"

    @server.tool(task=True)
    @execution_policy(heartbeat_timeout=timedelta(seconds=9), maximum_attempts=2)
    async def tuned() -> str:
        await release.wait()
        return "tuned"

    async with Client(server) as client:
        plain_task = await call_tool_task(client, "plain")
        tuned_task = await call_tool_task(client, "tuned")
        plain_leg = await running_leg(extension, plain_task)
        tuned_leg = await running_leg(extension, tuned_task)
        release.set()
        assert (await plain_task.result()).data == "plain"
        assert (await tuned_task.result()).data == "tuned"

    assert plain_leg.activity_options.heartbeat_timeout.ToTimedelta() == timedelta(seconds=3)
    assert plain_leg.maximum_attempts == 7
    assert tuned_leg.activity_options.heartbeat_timeout.ToTimedelta() == timedelta(seconds=9)
    assert tuned_leg.maximum_attempts == 2
