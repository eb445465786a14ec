"""A tasked call returns exactly what a synchronous call returns.

Every test registers the same tool body (from `result_cases`) on two servers, once
`task=True` with its tasks on Temporal and once `task=False`, calls both over the MCP
wire with a real `fastmcp.Client`, and compares what the client gets: the
`CallToolResult` (content, structuredContent, isError, meta) and the parsed `call_tool`
result. The tasked side is read through `call_tool_task` + `tasks/get`, which fails
unless it really ran as a task. Covered: every return type, tool errors and masking,
protocol errors (`failed`), argument coercion and rejection at submission (the
synchronous call's error, word for word), the tool's own `timeout=`, and
`ctx.lifespan_context` (behaviour doc §2.5, §3.4-§3.6, §9).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import TemporalTasksExtension
from helpers.results import (
    ERROR_CASES,
    INVALID_CALLS,
    RETURN_CASES,
    SERVER_INFO,
    raises_protocol_error,
    sleeps_past_timeout,
    wire,
)
from helpers.servers import square
from helpers.waits import DEADLINE

pytestmark = pytest.mark.anyio


# --- helpers ---------------------------------------------------------------------------


def parsed(result: Any) -> dict[str, Any]:
    """What `client.call_tool` hands the caller, minus the runner's serverInfo stamp."""
    return {
        "data": result.data,
        "content": [block.model_dump(mode="json") for block in result.content],
        "structured_content": result.structured_content,
        "is_error": result.is_error,
        "meta": {k: v for k, v in (result.meta or {}).items() if k != SERVER_INFO},
    }


@dataclass
class Clients:
    tasked: Client
    sync: Client


@asynccontextmanager
async def both(
    make_extension: Callable[..., TemporalTasksExtension],
    register: Callable[[FastMCP, bool], None],
    **server_options: Any,
) -> AsyncIterator[Clients]:
    """Two connected clients: one to the tool registered `task=True`, one `task=False`."""
    async with AsyncExitStack() as stack:
        clients = []
        for task in (True, False):
            server = FastMCP("results", **server_options)
            server.add_extension(make_extension())
            register(server, task)
            clients.append(await stack.enter_async_context(Client(server)))
        yield Clients(*clients)


def tool(fn: Callable[..., Any], **options: Any) -> Callable[[FastMCP, bool], None]:
    """Register `fn` as tool "x"."""

    def register(server: FastMCP, task: bool) -> None:
        server.tool(fn, name="x", task=task, **options)

    return register


async def run_as_task(client: Client, args: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Run "x" explicitly as a task (raises if the server ran it inline).

    Returns the parsed result the caller gets and the final `tasks/get`.
    """
    task = await call_tool_task(client, "x", args or {}, raise_on_error=False)
    with anyio.fail_after(DEADLINE):
        result = await task.result()
    return result, await task.status()


def same_bytes(tasked: dict[str, Any], sync: dict[str, Any]) -> bool:
    """The same JSON text, key order included."""
    return json.dumps(tasked) == json.dumps(sync)


async def assert_same_result(clients: Clients, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assert the tasked and the sync "x" give the client identical results; return the wire form."""
    args = args or {}
    tasked, final = await run_as_task(clients.tasked, args)
    assert final.status == "completed"
    expected = wire(await clients.sync.call_tool_mcp("x", args))
    assert same_bytes(wire(mcp_types.CallToolResult.model_validate(final.result)), expected)
    assert parsed(tasked) == parsed(await clients.sync.call_tool("x", args, raise_on_error=False))
    return expected


# --- 1. return types -------------------------------------------------------------------


@pytest.mark.parametrize(("fn", "options", "expect"), RETURN_CASES)
async def test_tasked_result_equals_sync_result(make_extension, fn, options, expect) -> None:
    async with both(make_extension, tool(fn, **options)) as clients:
        result = await assert_same_result(clients)
    assert expect.items() <= result.items()


# --- 2. errors -------------------------------------------------------------------------


@ERROR_CASES
async def test_a_tool_error_is_the_result_a_sync_call_gets(make_extension, fn, mask, text) -> None:
    async with both(make_extension, tool(fn), mask_error_details=mask) as clients:
        result = await assert_same_result(clients)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": text}]


async def test_protocol_error_fails_the_task_with_code_and_data(make_extension) -> None:
    async with both(make_extension, tool(raises_protocol_error)) as clients:
        _, final = await run_as_task(clients.tasked)
        assert final.status == "failed"
        assert final.error == {"code": -32042, "message": "protocol fault", "data": {"x": 1}}
        assert final.status_message == "protocol fault"
        assert final.result is None
        with pytest.raises(ToolError, match="protocol fault"):
            await clients.tasked.call_tool("x")


# --- 3. argument coercion and validation -----------------------------------------------


async def test_lax_coercion_runs_the_task(make_extension) -> None:
    async with both(make_extension, tool(square)) as clients:
        await assert_same_result(clients, {"n": "6"})
        assert (await clients.tasked.call_tool("x", {"n": "6"})).data == 36


@INVALID_CALLS
async def test_invalid_arguments_are_rejected_at_submission_as_sync_rejects_them(
    make_extension, args, strict
) -> None:
    async with both(make_extension, tool(square), strict_input_validation=strict) as clients:
        with pytest.raises(ToolError, match="did not run as a task"):
            await call_tool_task(clients.tasked, "x", args)
        tasked = wire(await clients.tasked.call_tool_mcp("x", args))
        sync = wire(await clients.sync.call_tool_mcp("x", args))
    assert tasked["isError"] is True
    assert tasked == sync


# --- 4. the tool's own timeout ---------------------------------------------------------


async def test_timeout_ends_the_task_with_an_error(make_extension) -> None:
    """Both paths stop the body at its `timeout=` and the caller gets a timeout error."""
    async with both(make_extension, tool(sleeps_past_timeout, timeout=0.5)) as clients:
        for client in (clients.sync, clients.tasked):
            with anyio.fail_after(DEADLINE), pytest.raises(ToolError, match=r"timed out after 0\.5s"):
                await client.call_tool("x")


async def test_timeout_result_equals_sync_result(make_extension) -> None:
    async with both(make_extension, tool(sleeps_past_timeout, timeout=0.5), mask_error_details=True) as clients:
        with anyio.fail_after(DEADLINE):
            await assert_same_result(clients)


# --- 5. lifespan_context ---------------------------------------------------------------


@asynccontextmanager
async def lifespan(server: FastMCP) -> AsyncIterator[dict[str, str]]:
    yield {"db": "ok"}


async def reads_lifespan(ctx: Context) -> str:
    return ctx.lifespan_context["db"]


async def test_task_sees_the_server_lifespan_context(make_extension) -> None:
    async with both(make_extension, tool(reads_lifespan), lifespan=lifespan) as clients:
        result = await assert_same_result(clients)
    assert result["content"] == [{"type": "text", "text": "ok"}]
