"""A demo MCP server whose background tasks run on Temporal.

    python examples/server.py            # HTTP on http://127.0.0.1:8000/mcp ($PORT to change)

With no Temporal address configured (FASTMCP_TEMPORAL_ADDRESS, TEMPORAL_ADDRESS or a
temporal.toml profile), an embedded Temporal dev server starts and its UI URL is
logged; otherwise tasks run on that server. Drive it with examples/client.py.
"""

from __future__ import annotations

import os

import anyio
from fastmcp import Context, FastMCP
from mcp_types import ElicitRequest, InputRequiredResult

from fastmcp_temporal import TemporalTasksExtension

mcp = FastMCP("fastmcp-temporal demo")
mcp.add_extension(TemporalTasksExtension())


@mcp.tool(task=True)
async def crunch(n: int, ctx: Context) -> int:
    """Square n slowly, reporting progress as it goes (clients see it as the task's statusMessage)."""
    steps = 5
    for step in range(steps):
        await ctx.report_progress(step, steps, f"{step}/{steps} crunching {n}")
        await anyio.sleep(0.6)
    return n * n


@mcp.tool(task=True)
async def greet(ctx: Context) -> str | InputRequiredResult:
    """Ask the caller for a name mid-task, then greet them."""
    if ctx.input_responses is None:
        ask = ElicitRequest(
            method="elicitation/create",
            params={
                "mode": "form",
                "message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        )
        return InputRequiredResult(result_type="input_required", input_requests={"name": ask})
    return f"Hello, {ctx.input_responses['name'].content['name']}!"


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
