"""Bring your own worker: `McpTasksPlugin` in a Temporal worker the user builds.

An API-only MCP server (`worker=False`) creates tasks; the user's own
`temporalio.worker.Worker`, loaded with the plugin, runs them: inside the server
definition's lifespan, with the extension's encryption on the client it connects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks import call_tool_task
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension
from fastmcp_temporal.connection._codec import ENCODING
from fastmcp_temporal.devserver import DevServer
from helpers.temporal import task_handle

pytestmark = pytest.mark.anyio

KEY = "a-test-key-of-at-least-thirty-two-characters"
WORKER_IDENTITY = "team-worker@test"


def server_definition(extension: TemporalTasksExtension) -> FastMCP:
    """What both the API server and the worker load (in production: the same module)."""

    @asynccontextmanager
    async def lifespan(server: FastMCP) -> AsyncIterator[dict[str, str]]:
        yield {"database": "warehouse"}

    mcp = FastMCP("byo-worker", lifespan=lifespan)

    @mcp.tool(task=True)
    async def count_rows(table: str, ctx: Context) -> str:
        return f"{ctx.lifespan_context['database']}.{table}: 42 rows"

    mcp.add_extension(extension)
    return mcp


async def test_a_user_built_worker_with_the_plugin_runs_the_api_servers_tasks(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    api = server_definition(make_extension(worker=False, encryption_key=KEY))
    hosted = server_definition(make_extension(encryption_key=KEY))
    temporal = await TemporalClient.connect(temporal_server.address, plugins=[McpTasksPlugin(hosted)])
    async with Worker(temporal, task_queue=task_queue, identity=WORKER_IDENTITY), Client(api) as client:
        task = await call_tool_task(client, "count_rows", {"table": "orders"})
        assert (await task.result()).data == "warehouse.orders: 42 rows"

    plain = await TemporalClient.connect(temporal_server.address)
    history = await task_handle(plain, task.task_id).fetch_history()
    started = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    assert [e.activity_task_started_event_attributes.identity for e in started] == [WORKER_IDENTITY]
    (completed,) = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    (payload,) = completed.activity_task_completed_event_attributes.result.payloads
    assert payload.metadata["encoding"] == ENCODING  # the plugin put the extension's codec on the client


async def test_the_plugin_refuses_a_worker_on_another_task_queue(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    temporal = await TemporalClient.connect(temporal_server.address)
    plugin = McpTasksPlugin(server_definition(make_extension()))
    with pytest.raises(ValueError, match=f"submits its tasks to '{task_queue}'; pass task_queue="):
        Worker(temporal, task_queue="somewhere-else", plugins=[plugin])


async def test_the_plugin_refuses_a_client_that_would_store_tasks_in_clear(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    temporal = await TemporalClient.connect(temporal_server.address)
    plugin = McpTasksPlugin(server_definition(make_extension(encryption_key=KEY)))
    with pytest.raises(RuntimeError, match=r"no payload codec or stores failure messages in clear; connect it with plugins=\[.*McpTasksPlugin"):
        Worker(temporal, task_queue=task_queue, plugins=[plugin])


def test_the_plugin_needs_a_server_with_the_temporal_extension() -> None:
    with pytest.raises(ValueError, match="has no TemporalTasksExtension; add `mcp.add_extension"):
        McpTasksPlugin(FastMCP("plain"))
