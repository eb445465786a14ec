"""Tool bodies and the results a synchronous call gives for them, shared by the parity tests.

`test_results` runs each body as a task and `test_sync_calls` as a durable synchronous
call; both compare what the client gets with what the same body gives inline. Each
body is registered as tool "x". `RETURN_CASES` lists every return type FastMCP
converts, with the wire keys the result must have; `INVALID_CALLS` the arguments a
call must reject before it runs.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import mcp_types
import pytest
from fastmcp import Context
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.types import Audio, File, Image
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

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


# --- return types --------------------------------------------------------------------


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


def wire(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The result as the client sees it on the wire, minus the runner's serverInfo stamp."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    meta = {k: v for k, v in dumped.pop("_meta", {}).items() if k != SERVER_INFO}
    return {**dumped, **({"_meta": meta} if meta else {})}


# --- errors and timeouts -------------------------------------------------------------


async def raises_tool_error() -> str:
    raise ToolError("kaboom")


async def raises_value_error(ctx: Context) -> str:
    raise ValueError("secret")


async def raises_value_error_without_ctx() -> str:
    raise ValueError("secret")


async def raises_protocol_error() -> str:
    raise MCPError(code=-32042, message="protocol fault", data={"x": 1})


# (body, mask_error_details, the one text block the client gets with isError)
ERROR_CASES = pytest.mark.parametrize(
    ("fn", "mask", "text"),
    [
        pytest.param(raises_tool_error, True, "kaboom", id="tool-error-verbatim"),
        pytest.param(raises_value_error, True, "Error calling tool 'x'", id="ctx-masked"),
        pytest.param(raises_value_error, False, "Error calling tool 'x': secret", id="ctx-unmasked"),
        pytest.param(raises_value_error_without_ctx, True, "Error calling tool 'x'", id="no-ctx-masked"),
        pytest.param(
            raises_value_error_without_ctx, False, "Error calling tool 'x': secret", id="no-ctx-unmasked"
        ),
    ],
)


async def sleeps_past_timeout() -> str:
    await anyio.sleep(30)
    return "too late"


# --- arguments a call rejects: (args, strict_input_validation) of tool `square` ---------

INVALID_CALLS = pytest.mark.parametrize(
    ("args", "strict"),
    [
        pytest.param({"n": "6"}, True, id="strict-string-for-int"),
        pytest.param({"n": "abc"}, False, id="not-an-int"),
        pytest.param({"n": 6, "extra": 1}, False, id="unknown-argument"),
        pytest.param({}, False, id="missing-argument"),
    ],
)
