"""A tasked call returns exactly what a synchronous call returns.

Every test defines the same tool body twice, once `task=True` on a server whose tasks
run on Temporal and once `task=False`, calls both over the MCP wire with a real
`fastmcp.Client`, and compares what the client gets: the `CallToolResult` (content,
structuredContent, isError, meta) and the parsed `call_tool` result. The tasked side
is also read through `call_tool_task` + `tasks/get`, which proves it really ran as a
task. Covered: every return type, tool errors and masking, protocol errors (`failed`),
argument coercion and rejection at submission, the tool's own `timeout=`, and
`ctx.lifespan_context` (behaviour doc §2.5, §3.4-§3.6, §9).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.types import Audio, File, Image
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

from fastmcp_temporal import TemporalTasksExtension

pytestmark = pytest.mark.anyio

# The SDK runner stamps this on every response it sends; it describes the server,
# not the tool's result, and a tasked result (read from `tasks/get`) never has it.
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
PNG = b"\x89PNG\r\n\x1a\n-not-really"
WAV = b"RIFF....WAVE"
PDF = b"%PDF-1.4 ..."


class Point(BaseModel):
    x: int
    y: int


@dataclass
class Pair:
    left: str
    right: list[int]


# --- tool bodies: each is registered as tool "x", once tasked and once not -------------


async def returns_str() -> str:
    return "hello"


async def returns_int() -> int:
    return 36


async def returns_float() -> float:
    return 2.5


async def returns_bool() -> bool:
    return True


async def returns_dict() -> dict[str, Any]:
    return {"zeta": 1, "nested": {"b": [1, 2], "a": 0}}  # keys out of order, kept as built


async def returns_list() -> list[int]:
    return [1, 2, 3]


async def returns_model() -> Point:
    return Point(x=1, y=2)


async def returns_dataclass() -> Pair:
    return Pair(left="l", right=[4, 5])


async def returns_none() -> None:
    return None


async def returns_bytes() -> bytes:
    return b"\x00\x01binary\xff"


async def returns_image() -> Image:
    return Image(data=PNG, format="png")


async def returns_audio() -> Audio:
    return Audio(data=WAV, format="wav")


async def returns_file() -> File:
    return File(data=PDF, format="pdf", name="report")


async def returns_content_blocks() -> list[Any]:
    return [
        mcp_types.TextContent(type="text", text="caption"),
        Image(data=PNG, format="png"),
        {"k": "v"},
    ]


async def returns_text_content() -> mcp_types.TextContent:
    return mcp_types.TextContent(type="text", text="direct")


async def returns_tool_result() -> ToolResult:
    return ToolResult(
        content=[mcp_types.TextContent(type="text", text="custom")],
        structured_content={"total": 7},
        meta={"trace": "abc", "nested": {"n": 1}},
    )


async def returns_call_tool_result() -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="raw")],
        structured_content={"raw": True},
        _meta={"origin": "mcp"},
    )


async def returns_error_call_tool_result() -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="soft failure")], is_error=True
    )


async def returns_annotated() -> Annotated[int, Field(description="the answer", ge=0)]:
    return 42


async def returns_with_output_schema() -> dict[str, Any]:
    return {"total": 3, "unit": "kg"}


OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"total": {"type": "integer"}, "unit": {"type": "string"}},
    "required": ["total"],
}

PNG_B64 = base64.b64encode(PNG).decode()
IMAGE = {"type": "image", "data": PNG_B64, "mimeType": "image/png"}
AUDIO = {"type": "audio", "data": base64.b64encode(WAV).decode(), "mimeType": "audio/wav"}
FILE = {
    "type": "resource",
    "resource": {"uri": "file:///report.pdf", "mimeType": "application/pdf", "blob": base64.b64encode(PDF).decode()},
}
WRAPPED = {"fastmcp": {"wrap_result": True}}

# (body, tool options, keys the wire result must have on both paths)
RETURN_CASES = [
    pytest.param(returns_str, {}, {"content": [{"type": "text", "text": "hello"}]}, id="str"),
    pytest.param(returns_int, {}, {"structuredContent": {"result": 36}, "_meta": WRAPPED}, id="int"),
    pytest.param(returns_float, {}, {"structuredContent": {"result": 2.5}}, id="float"),
    pytest.param(returns_bool, {}, {"structuredContent": {"result": True}}, id="bool"),
    pytest.param(returns_dict, {}, {"structuredContent": {"zeta": 1, "nested": {"b": [1, 2], "a": 0}}}, id="dict"),
    pytest.param(returns_list, {}, {"structuredContent": {"result": [1, 2, 3]}}, id="list"),
    pytest.param(returns_model, {}, {"structuredContent": {"x": 1, "y": 2}}, id="pydantic"),
    pytest.param(returns_dataclass, {}, {"structuredContent": {"left": "l", "right": [4, 5]}}, id="dataclass"),
    pytest.param(returns_none, {}, {"content": [], "isError": False}, id="none"),
    pytest.param(returns_bytes, {}, {"content": [{"type": "text", "text": "AAFiaW5hcnn/"}]}, id="bytes"),
    pytest.param(returns_image, {}, {"content": [IMAGE]}, id="image"),
    pytest.param(returns_audio, {}, {"content": [AUDIO]}, id="audio"),
    pytest.param(returns_file, {}, {"content": [FILE]}, id="file"),
    pytest.param(
        returns_content_blocks,
        {},
        {"content": [{"type": "text", "text": "caption"}, IMAGE, {"type": "text", "text": '{"k":"v"}'}]},
        id="content-blocks",
    ),
    pytest.param(returns_text_content, {}, {"content": [{"type": "text", "text": "direct"}]}, id="text-content"),
    pytest.param(
        returns_tool_result,
        {},
        {"structuredContent": {"total": 7}, "_meta": {"trace": "abc", "nested": {"n": 1}}},
        id="tool-result",
    ),
    pytest.param(
        returns_call_tool_result, {}, {"structuredContent": {"raw": True}, "_meta": {"origin": "mcp"}}, id="call-tool-result"
    ),
    pytest.param(returns_error_call_tool_result, {}, {"isError": True}, id="call-tool-result-error"),
    pytest.param(returns_annotated, {}, {"structuredContent": {"result": 42}}, id="annotated"),
    pytest.param(
        returns_with_output_schema,
        {"output_schema": OUTPUT_SCHEMA},
        {"structuredContent": {"total": 3, "unit": "kg"}},
        id="output-schema",
    ),
]


# --- helpers ---------------------------------------------------------------------------


def wire(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The result as the client sees it on the wire, minus the runner's serverInfo stamp."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    meta = {k: v for k, v in dumped.pop("_meta", {}).items() if k != SERVER_INFO}
    return {**dumped, **({"_meta": meta} if meta else {})}


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
    with anyio.fail_after(30):
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


async def raises_tool_error() -> str:
    raise ToolError("kaboom")


async def raises_value_error(ctx: Context) -> str:
    raise ValueError("secret")


async def raises_value_error_without_ctx() -> str:
    raise ValueError("secret")


async def raises_protocol_error() -> str:
    raise MCPError(code=-32042, message="protocol fault", data={"x": 1})


async def test_tool_error_completes_with_its_message_verbatim(make_extension) -> None:
    async with both(make_extension, tool(raises_tool_error)) as clients:
        result = await assert_same_result(clients)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "kaboom"}]


@pytest.mark.parametrize("fn", [raises_value_error, raises_value_error_without_ctx], ids=["ctx", "no-ctx"])
@pytest.mark.parametrize(
    ("mask", "text"),
    [(True, "Error calling tool 'x'"), (False, "Error calling tool 'x': secret")],
    ids=["masked", "unmasked"],
)
async def test_unexpected_error_is_masked_like_sync(make_extension, fn, mask, text) -> None:
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


async def square(n: int) -> int:
    return n * n


async def test_lax_coercion_runs_the_task(make_extension) -> None:
    async with both(make_extension, tool(square)) as clients:
        await assert_same_result(clients, {"n": "6"})
        assert (await clients.tasked.call_tool("x", {"n": "6"})).data == 36


INVALID_CALLS = pytest.mark.parametrize(
    ("args", "strict"),
    [
        pytest.param({"n": "6"}, True, id="strict-string-for-int"),
        pytest.param({"n": "abc"}, False, id="not-an-int"),
        pytest.param({"n": 6, "extra": 1}, False, id="unknown-argument"),
        pytest.param({}, False, id="missing-argument"),
    ],
)


@INVALID_CALLS
async def test_invalid_arguments_are_rejected_at_submission(make_extension, args, strict) -> None:
    async with both(make_extension, tool(square), strict_input_validation=strict) as clients:
        with pytest.raises(ToolError, match="did not run as a task"):
            await call_tool_task(clients.tasked, "x", args)
        tasked = wire(await clients.tasked.call_tool_mcp("x", args))
        sync = wire(await clients.sync.call_tool_mcp("x", args))
    assert tasked["isError"] is sync["isError"] is True
    # The same pydantic errors, line for line, under the validation summary line.
    (tasked_text,), (sync_text,) = ([block["text"] for block in r["content"]] for r in (tasked, sync))
    assert tasked_text.splitlines()[1:] == sync_text.splitlines()[1:]


@INVALID_CALLS
async def test_rejection_equals_sync_rejection(make_extension, args, strict) -> None:
    async with both(make_extension, tool(square), strict_input_validation=strict) as clients:
        tasked = wire(await clients.tasked.call_tool_mcp("x", args))
        assert tasked == wire(await clients.sync.call_tool_mcp("x", args))


# --- 4. the tool's own timeout ---------------------------------------------------------


async def sleeps_past_timeout() -> str:
    await anyio.sleep(30)
    return "too late"


async def test_timeout_ends_the_task_with_an_error(make_extension) -> None:
    """Both paths stop the body at its `timeout=` and the caller gets a timeout error."""
    async with both(make_extension, tool(sleeps_past_timeout, timeout=0.5)) as clients:
        for client in (clients.sync, clients.tasked):
            with anyio.fail_after(30), pytest.raises(ToolError, match=r"timed out after 0\.5s"):
                await client.call_tool("x")


async def test_timeout_result_equals_sync_result(make_extension) -> None:
    async with both(make_extension, tool(sleeps_past_timeout, timeout=0.5), mask_error_details=True) as clients:
        with anyio.fail_after(30):
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
