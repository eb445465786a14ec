import pytest
from fastmcp import Client, FastMCP

pytestmark = pytest.mark.anyio


async def test_task_tool_returns_the_sync_result(mcp: FastMCP) -> None:
    @mcp.tool(task=True)
    async def crunch(n: int) -> int:
        return n * n

    async with Client(mcp) as client:
        result = await client.call_tool("crunch", {"n": 6})
    assert result.data == 36
