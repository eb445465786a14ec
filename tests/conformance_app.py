"""The fixtures the official MCP conformance suite's tasks and tool scenarios call, on this engine.

`python tests/conformance_app.py` serves them over streamable HTTP on $PORT, with an
embedded worker, on the Temporal server of `FASTMCP_TEMPORAL_ADDRESS` and the queue of
`FASTMCP_TEMPORAL_TASK_QUEUE`. Every task tool runs as a task for a client that opted in to
tasks and as a durable call (`sync_calls="workflow"`) for one that did not, so the suite's
`tools-call-with-progress` measures a durable call's relay. Each fixture is the one its
scenario's description in `@modelcontextprotocol/conformance` asks for.
"""

from __future__ import annotations

import asyncio
import os

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, ElicitRequest, InputRequiredResult

from fastmcp_temporal import TemporalTasksExtension, execution_policy

mcp = FastMCP("fastmcp-temporal conformance")
mcp.add_extension(TemporalTasksExtension(sync_calls="workflow"))


def _ask(message: str, key: str = "answer") -> dict[str, ElicitRequest]:
    schema = {"type": "object", "properties": {key: {"type": "string"}}}
    params = {"mode": "form", "message": message, "requestedSchema": schema}
    return {key: ElicitRequest(method="elicitation/create", params=params)}


@mcp.tool
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@mcp.tool(task=True)
async def slow_compute(seconds: float = 0, label: str = "") -> str:
    await asyncio.sleep(seconds)
    return f"{label} computed after {seconds:g}s"


@mcp.tool(task=TaskConfig(mode="required"))
async def failing_job() -> str:
    await asyncio.sleep(1)
    raise ValueError("failing_job always fails")


@mcp.tool(task=True)
async def protocol_error_job() -> str:
    raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job fails with a protocol error")


@mcp.tool(task=True)
async def confirm_delete(ctx: Context, filename: str = "") -> str | InputRequiredResult:
    if ctx.input_responses is None:
        return InputRequiredResult(input_requests=_ask(f"Delete {filename}?"))
    return f"deleted {filename}"


@mcp.tool(task=True)
async def multi_input(ctx: Context) -> str | InputRequiredResult:
    if ctx.input_responses is None:
        return InputRequiredResult(input_requests={**_ask("First?", "first"), **_ask("Second?", "second")})
    return f"answered {len(ctx.input_responses)}"


@mcp.tool(task=TaskConfig(mode="required"))
@execution_policy(ask_before_task=True)
async def test_tool_with_task(ctx: Context) -> str | InputRequiredResult:
    if ctx.input_responses is None:
        return InputRequiredResult(input_requests=_ask("What is your name?", "user_name"))
    (answer,) = ctx.input_responses.values()
    return f"Hello, {' '.join(str(value) for value in (answer.content or {}).values())}!"


@mcp.tool(task=True)
async def test_tool_with_progress(ctx: Context) -> str:
    for done in (0, 50, 100):
        await ctx.report_progress(done, 100)
        if done < 100:
            await asyncio.sleep(0.05)
    return "progress reported"


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(os.environ["PORT"]))
