"""With `metrics_address` set, Prometheus scrapes the SDK's worker metrics and MCP task metrics.

Real tasks run through the MCP wire (completed, answered after an input round,
retried after a leg timed out, failed, cancelled), then the endpoint is scraped over
HTTP and every metric is checked per tool.
"""

from __future__ import annotations

from datetime import timedelta

import anyio
import httpx
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult

from fastmcp_temporal import execution_policy
from fastmcp_temporal.devserver import free_port
from helpers.metrics import sample
from helpers.servers import server_with, square
from helpers.temporal import start_broken_task
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import accept, ask, tasks_update

pytestmark = pytest.mark.anyio


def _server(extension: object, attempts: dict[str, int]) -> FastMCP:
    mcp = server_with(extension, square)

    @mcp.tool(task=True)
    async def confirm(ctx: Context) -> str | InputRequiredResult:
        return ask("ok") if ctx.input_responses is None else "confirmed"

    @mcp.tool(task=True)
    @execution_policy(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=2)
    async def flaky(label: str) -> str:
        attempts[label] = attempts.get(label, 0) + 1
        if label == "never" or attempts[label] == 1:
            await anyio.sleep(30)  # past start_to_close: Temporal retries the leg
        return label

    @mcp.tool(task=True)
    async def hold() -> str:
        await anyio.sleep(3600)
        return "never"

    return mcp


async def test_prometheus_serves_sdk_and_task_metrics_after_real_tasks(make_extension) -> None:
    address = f"127.0.0.1:{free_port()}"
    attempts: dict[str, int] = {}
    extension = make_extension(metrics_address=address)
    async with Client(_server(extension, attempts)) as client:
        await (await call_tool_task(client, "square", {"n": 4})).wait(timeout=DEADLINE)
        confirm = await call_tool_task(client, "confirm")
        (key,) = (await status_becomes(confirm, "input_required")).input_requests
        await tasks_update(client, confirm.task_id, {key: accept("yes")})
        await status_becomes(confirm, "completed")
        await status_becomes(await call_tool_task(client, "flaky", {"label": "twice"}), "completed")
        await status_becomes(await call_tool_task(client, "flaky", {"label": "never"}), "failed")
        held = await call_tool_task(client, "hold")
        await held.cancel()
        await status_becomes(held, "cancelled")
        await start_broken_task(extension, "broken-workflow-code")  # a bug in workflow code fails it too

        expected = {
            ("mcp_tasks_created", "square", ""): 2,
            ("mcp_tasks_finished", "square", "completed"): 1,
            ("mcp_tasks_finished", "square", "failed"): 1,
            ("mcp_tasks_finished", "confirm", "completed"): 1,
            ("mcp_task_input_rounds", "confirm", ""): 1,
            ("mcp_tasks_finished", "flaky", "completed"): 1,
            ("mcp_tasks_finished", "flaky", "failed"): 1,
            ("mcp_leg_retries", "flaky", ""): 2,
            ("mcp_tasks_finished", "hold", "cancelled"): 1,
            ("mcp_leg_duration_count", "square", ""): 1,
            ("mcp_leg_duration_count", "confirm", ""): 2,
        }
        async with httpx.AsyncClient() as http:
            with anyio.fail_after(DEADLINE):
                while True:
                    scraped = (await http.get(f"http://{address}/metrics")).text
                    seen = {
                        (name, tool, status): sample(
                            scraped, name, tool=tool, **({"status": status} if status else {})
                        )
                        for name, tool, status in expected
                    }
                    if seen == expected:
                        break
                    await anyio.sleep(0.2)

    assert sample(scraped, "temporal_workflow_completed", workflow_type="McpTaskWorkflow") >= 4
    assert sample(scraped, "temporal_activity_execution_latency_count", activity_type="run_tool_leg") >= 5
    assert sample(scraped, "mcp_leg_duration_count", tool="square", outcome="returned") == 1
