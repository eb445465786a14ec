"""Per-tool execution policy on a real Temporal server, seen over the MCP wire.

Proves that a leg outliving its `@execution_policy(start_to_close_timeout=...)` with one
attempt ends the task `failed` with a message that says so, that tool errors
(`ToolError`, any exception) are results, never retried, and that an option the policy does
not have is refused by its name, with the nearest one it has. What Temporal records for a
leg's policy is in `test_long_tools.py`; a tool's own `timeout=` in `test_results.py`.
"""

from __future__ import annotations

import re
from datetime import timedelta

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import execution_policy
from helpers.waits import finished

pytestmark = pytest.mark.anyio


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


@pytest.mark.parametrize(
    ("option", "fix"),
    [("heartbeat", "did you mean heartbeat_timeout?"), ("color", "its options are start_to_close_timeout, ")],
)
def test_an_option_the_policy_does_not_have_is_refused_by_name(option: str, fix: str) -> None:
    with pytest.raises(TypeError, match=re.escape(f"execution_policy() has no option '{option}': {fix}")):
        execution_policy(**{option: timedelta(seconds=5)})
