"""Conversions between FastMCP objects and the JSON a task stores in Temporal.

Everything a workflow carries is plain JSON: results are serialized
`CallToolResult`s (converted exactly as a synchronous `tools/call` would), input
requests their wire form, and answers `{"type", "data"}` pairs that a later leg
turns back into the typed results `ctx.input_responses` promises.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp.tools.base import Tool, ToolResult

from fastmcp_temporal._fastmcp_private import result_type_for_method

_ANSWER_TYPES: dict[str, type[mcp_types.Result]] = {
    cls.__name__: cls
    for cls in (
        mcp_types.ElicitResult,
        mcp_types.CreateMessageResult,
        mcp_types.CreateMessageResultWithTools,
        mcp_types.ListRootsResult,
    )
}


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def call_tool_result_json(tool: Tool, value: Any) -> dict[str, Any]:
    """A tool's return value as the `CallToolResult` a synchronous call would send."""
    mcp_result = tool.convert_result(value).to_mcp_result()
    if isinstance(mcp_result, mcp_types.CallToolResult):
        return _dump(mcp_result)
    if isinstance(mcp_result, tuple):
        content, structured = mcp_result
        return _dump(mcp_types.CallToolResult(content=content, structured_content=structured))
    return _dump(mcp_types.CallToolResult(content=mcp_result))


def error_result_json(message: str) -> dict[str, Any]:
    """An `isError` result, the shape of a tool error on the synchronous path."""
    result = ToolResult(content=[mcp_types.TextContent(type="text", text=message)], is_error=True)
    return _dump(result.to_mcp_result())


def input_required_json(ask: mcp_types.InputRequiredResult) -> dict[str, Any]:
    """An ask as the `InputRequiredResult` a synchronous `tools/call` answers with."""
    return _dump(ask)


def serialize_requests(requests: mcp_types.InputRequests) -> dict[str, dict[str, Any]]:
    return {key: _dump(request) for key, request in requests.items()}


def encode_answer(request: dict[str, Any], raw: Any) -> dict[str, Any]:
    """Validate a client's answer against its request's method; raises on a bad answer."""
    result_type = result_type_for_method(request.get("method", "elicitation/create"))
    answer = result_type.model_validate(raw)
    return {"type": type(answer).__name__, "data": _dump(answer)}


def encode_answers(responses: mcp_types.InputResponses) -> dict[str, dict[str, Any]]:
    """A continuation call's `inputResponses`, stored as a leg's answers."""
    return {key: {"type": type(answer).__name__, "data": _dump(answer)} for key, answer in responses.items()}


def decode_answers(stored: dict[str, dict[str, Any]] | None) -> dict[str, mcp_types.Result] | None:
    if stored is None:
        return None
    return {
        key: _ANSWER_TYPES[entry["type"]].model_validate(entry["data"])
        for key, entry in stored.items()
    }
