"""The `tools/call` decision rules and the `tasks/*` gates, over the MCP wire.

Proves the Temporal engine reproduces the reference's protocol surface (behaviour doc
§2.1-2.4, §2.8, §2.9, §3.8, §7 items 21-23): the capability it advertises; when a call
becomes a task (tool mode x client opt-in x protocol era x nested call x version);
the exact shape of the create result (advertising the short interval a waiting client's
held reads are paced at); the errors `tasks/*` answers for an unknown
id (-32602), a missing capability (-32021), a legacy era (-32601) and a mismatched
HTTP `Mcp-Name` header (-32020); that invalid arguments get the synchronous call's
error and start no workflow; and that root middleware post-processing results
tolerates a task. Everything goes through a real `fastmcp.Client` against a real
Temporal dev server.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID, TaskConfig
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import (
    ClientCreateTaskResult,
)
from mcp.shared.exceptions import MCPError

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.server._holds import HELD_POLL_INTERVAL
from helpers.servers import NoTasksClient, http_client, serving_http
from helpers.waits import DEADLINE, polled_until
from helpers.wire import TASK_METHODS, send_task_method, tasks_get

pytestmark = pytest.mark.anyio

MISSING_CAPABILITY_DATA = {"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}}
TASK_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")
REQUIRED_POLL = timedelta(milliseconds=250)
OWN_MS = 5000  # a tool's poll interval by default
# While the server holds a waiting client's reads, it asks the client to come straight back.
HELD_MS = HELD_POLL_INTERVAL // timedelta(milliseconds=1)
TASKS_OPT_IN_META = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}}


@pytest.fixture
def extension(make_extension: Callable[..., TemporalTasksExtension]) -> TemporalTasksExtension:
    return make_extension()


@pytest.fixture
def gate() -> asyncio.Event:
    """Holds `gated` tool bodies until the test sets it."""
    return asyncio.Event()


@pytest.fixture
def server(extension: TemporalTasksExtension, gate: asyncio.Event) -> FastMCP:
    """One tool per task mode, plus a gated task and a relay that calls tools from its body."""
    mcp = FastMCP("protocol")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def optional_echo(n: int) -> int:
        return n

    @mcp.tool(task=TaskConfig(mode="required", poll_interval=REQUIRED_POLL))
    async def required_echo(n: int) -> int:
        return n

    @mcp.tool(task=TaskConfig(mode="forbidden"))
    async def forbidden_echo(n: int) -> int:
        return n

    @mcp.tool
    async def plain_echo(n: int) -> int:
        return n

    @mcp.tool(task=True)
    async def gated(n: int) -> int:
        await gate.wait()
        return n

    @mcp.tool
    async def relay(name: str, ctx: Context) -> int:
        result = await ctx.fastmcp.call_tool(name, {"n": 7})
        return result.structured_content["result"]

    return mcp


async def raw_call(client: Client, name: str, arguments: dict[str, Any], **kwargs: Any) -> mcp_types.Result:
    """`tools/call` returning the claimed create result as is, instead of driving it."""
    return await client.session.call_tool(name, arguments, allow_claimed=True, **kwargs)


def assert_foreground(result: mcp_types.Result, value: int) -> None:
    assert isinstance(result, mcp_types.CallToolResult), f"expected a foreground result, got {result!r}"
    assert not result.is_error
    assert result.structured_content == {"result": value}


async def workflow_count(extension: TemporalTasksExtension, queue: str) -> int:
    assert extension.client is not None
    return (await extension.client.count_workflows(f'TaskQueue="{queue}"')).count


async def wait_for_workflow_count(extension: TemporalTasksExtension, queue: str, at_least: int) -> int:
    with anyio.fail_after(DEADLINE):
        while (count := await workflow_count(extension, queue)) < at_least:
            await anyio.sleep(0.1)
    return count


# --- capabilities -------------------------------------------------------------------


async def test_server_advertises_the_tasks_extension_with_empty_settings(server: FastMCP) -> None:
    async with Client(server) as client:
        capabilities = client.server_capabilities
    assert capabilities is not None and capabilities.extensions is not None
    assert capabilities.extensions[TASKS_EXTENSION_ID] == {}


async def test_tools_list_shows_task_support_per_tool(server: FastMCP) -> None:
    # `Tool.execution` exists only on the 2025-11-25 wire; the SDK drops it on 2026-07-28.
    async with Client(server, mode="legacy") as client:
        execution = {tool.name: tool.execution for tool in await client.list_tools()}
    assert execution["optional_echo"].task_support == "optional"
    assert execution["required_echo"].task_support == "required"
    assert execution["plain_echo"] is None


# --- modes x opt-in ---------------------------------------------------------------


async def test_optional_tool_with_opt_in_returns_a_task(server: FastMCP) -> None:
    async with Client(server) as client:
        created = await raw_call(client, "optional_echo", {"n": 4})
        assert isinstance(created, ClientCreateTaskResult)
        assert TASK_ID.match(created.task_id)
        assert created.status == "working"
        assert created.result_type == "task"
        assert created.created_at == created.last_updated_at
        assert type(created.ttl_ms) is int and created.ttl_ms == 900_000
        assert type(created.poll_interval_ms) is int and created.poll_interval_ms == HELD_MS

        final = await polled_until(lambda: tasks_get(client, created.task_id), "completed")
    assert final.status == "completed"
    assert final.result["structuredContent"] == {"result": 4}


async def test_required_tool_with_opt_in_returns_a_task_polled_no_slower_than_its_poll_interval(
    server: FastMCP,
) -> None:
    async with Client(server) as client:
        task = await call_tool_task(client, "required_echo", {"n": 5})
        assert task.create_result.poll_interval_ms == min(REQUIRED_POLL // timedelta(milliseconds=1), HELD_MS)
        with anyio.fail_after(DEADLINE):
            result = await task.result()
    assert result.data == 5


@pytest.mark.parametrize(
    ("client_type", "tool"),
    [
        (Client, "forbidden_echo"),
        (Client, "plain_echo"),
        (NoTasksClient, "optional_echo"),
        (NoTasksClient, "forbidden_echo"),
    ],
)
async def test_runs_in_the_foreground_unless_both_tool_and_client_opt_in(
    server: FastMCP, client_type: type[Client], tool: str
) -> None:
    async with client_type(server) as client:
        assert_foreground(await raw_call(client, tool, {"n": 3}), 3)


async def test_required_tool_without_opt_in_is_missing_capability(server: FastMCP) -> None:
    async with NoTasksClient(server) as client:
        with pytest.raises(MCPError) as raised:
            await raw_call(client, "required_echo", {"n": 1})
    assert raised.value.code == -32021
    assert raised.value.data == MISSING_CAPABILITY_DATA


async def test_required_tool_called_without_a_task_on_2025_11_25_is_method_not_found(server: FastMCP) -> None:
    # That era's tasks (test_tasks_2025_11_25) say so; the fix is that era's `task`, not the extension.
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await raw_call(client, "required_echo", {"n": 1})
    assert raised.value.code == -32601
    assert "call it with `task`" in raised.value.error.message


async def test_legacy_client_opt_in_is_ignored(server: FastMCP) -> None:
    async with Client(server, mode="legacy") as client:
        result = await raw_call(client, "optional_echo", {"n": 8}, meta=TASKS_OPT_IN_META)
    assert_foreground(result, 8)


async def test_task_ids_are_distinct_and_timings_stay_integers(server: FastMCP, gate: asyncio.Event) -> None:
    async with Client(server) as client:
        first = await call_tool_task(client, "gated", {"n": 1})
        second = await call_tool_task(client, "gated", {"n": 2})
        assert first.task_id != second.task_id

        working = await first.status()
        assert working.status == "working"
        gate.set()
        with anyio.fail_after(DEADLINE):
            completed = await first.wait(state="completed")
            await second.wait(state="completed")
    for seen, interval_ms in ((first.create_result, HELD_MS), (working, HELD_MS), (completed, OWN_MS)):
        assert type(seen.ttl_ms) is int and seen.ttl_ms == 900_000
        assert type(seen.poll_interval_ms) is int and seen.poll_interval_ms == interval_ms


# --- nested calls and versions ----------------------------------------------------


async def test_nested_call_of_an_optional_tool_runs_inline(
    server: FastMCP, extension: TemporalTasksExtension, task_queue: str
) -> None:
    async with Client(server) as client:
        result = await client.call_tool("relay", {"name": "optional_echo"})
        assert result.data == 7
        # A workflow started by the nested call would be listed no later than this task's.
        await call_tool_task(client, "optional_echo", {"n": 1})
        assert await wait_for_workflow_count(extension, task_queue, at_least=1) == 1


async def test_nested_call_of_a_required_tool_is_a_tool_error(server: FastMCP) -> None:
    async with Client(server) as client:
        with pytest.raises(ToolError, match="only runs as a background task"):
            await client.call_tool("relay", {"name": "required_echo"})


async def test_version_targeting_runs_the_requested_version(extension: TemporalTasksExtension) -> None:
    mcp = FastMCP("versions")
    mcp.add_extension(extension)

    @mcp.tool(name="versioned", version="1", task=True)
    async def versioned_v1() -> str:
        return "one"

    @mcp.tool(name="versioned", version="2", task=True)
    async def versioned_v2() -> str:
        return "two"

    async with Client(mcp) as client:
        task = await call_tool_task(client, "versioned", {}, version="1")
        with anyio.fail_after(DEADLINE):
            assert (await task.result()).data == "one"
            assert (await client.call_tool("versioned", {}, version="1")).data == "one"
            assert (await client.call_tool("versioned", {})).data == "two"


# --- tasks/* gates ------------------------------------------------------------------


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_unknown_task_id_is_not_found(server: FastMCP, method: str) -> None:
    unknown = "x" * 43
    async with Client(server) as client:
        with pytest.raises(MCPError) as raised:
            await send_task_method(client, method, unknown)
    assert raised.value.code == -32602
    assert raised.value.message == f"Task {unknown} not found"


@pytest.mark.parametrize("method", TASK_METHODS)
async def test_task_methods_without_the_capability_are_refused(server: FastMCP, method: str) -> None:
    async with Client(server) as client:
        task = await call_tool_task(client, "optional_echo", {"n": 1})
        async with NoTasksClient(server) as bare:
            with pytest.raises(MCPError) as raised:
                await send_task_method(bare, method, task.task_id)
        assert raised.value.code == -32021
        assert raised.value.data == MISSING_CAPABILITY_DATA
        with anyio.fail_after(DEADLINE):
            assert (await task.result()).data == 1  # the refused call changed nothing


async def test_tasks_get_at_2025_11_25_does_not_find_a_2026_07_28_task(server: FastMCP) -> None:
    # That era's tasks/get serves that era's tasks (test_tasks_2025_11_25), not this one's.
    async with Client(server) as client:
        task = await call_tool_task(client, "optional_echo", {"n": 1})
        async with Client(server, mode="legacy") as legacy:
            with pytest.raises(MCPError) as raised:
                await send_task_method(legacy, "tasks/get", task.task_id)
    assert raised.value.code == -32602


async def test_http_mcp_name_header_must_match_the_task_id(server: FastMCP) -> None:
    async with serving_http(server) as url:
        async with http_client(url) as client:
            task = await call_tool_task(client, "optional_echo", {"n": 9})
            await task.wait(state="completed", timeout=DEADLINE)

        async with http_client(url, headers={"Mcp-Name": "wrong"}) as mismatched:
            with pytest.raises(MCPError) as raised:
                await tasks_get(mismatched, task.task_id)
        assert raised.value.code == -32020

        async with http_client(url, headers={"Mcp-Name": task.task_id}) as matched:
            got = await tasks_get(matched, task.task_id)
    assert got.status == "completed"
    assert got.result["structuredContent"] == {"result": 9}


# --- creation errors and middleware ------------------------------------------------


async def test_invalid_arguments_give_the_sync_error_and_start_no_workflow(
    server: FastMCP, extension: TemporalTasksExtension, task_queue: str
) -> None:
    bad = {"n": "not a number"}
    async with Client(server) as client, NoTasksClient(server) as sync_client:
        await call_tool_task(client, "optional_echo", {"n": 1})
        await wait_for_workflow_count(extension, task_queue, at_least=1)

        tasked = await raw_call(client, "optional_echo", bad)
        sync = await raw_call(sync_client, "optional_echo", bad)
        assert isinstance(tasked, mcp_types.CallToolResult) and tasked.is_error
        assert tasked.content == sync.content  # the synchronous call's validation error, word for word

        # A workflow started by the bad call would be listed no later than this one.
        await call_tool_task(client, "optional_echo", {"n": 2})
        assert await wait_for_workflow_count(extension, task_queue, at_least=2) == 2


async def test_root_middleware_that_post_processes_results_tolerates_a_task(server: FastMCP) -> None:
    seen: list[str] = []

    class Stamp(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            result = await call_next(context)
            seen.append(type(result).__name__)
            if isinstance(result, ToolResult):
                result.content.append(mcp_types.TextContent(type="text", text="stamped"))
            return result

    server.add_middleware(Stamp())
    async with Client(server) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("optional_echo", {"n": 6})
    assert result.data == 6
    assert seen and seen[0] != "ToolResult"
