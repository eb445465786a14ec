"""A task's tool may change under it; a leg finds out before its body runs.

A server can be redeployed while a task is parked or waits for a retry: its tool removed,
renamed, disabled, or given arguments the task's no longer fit. The leg then ends the task
with an error that names the change and how to avoid it, as the reference engine does for a
key that no longer resolves, instead of running a body that is not the one the task started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types
from fastmcp.exceptions import ValidationError
from fastmcp.server.transforms.visibility import is_enabled
from fastmcp.tools.base import Tool
from mcp.shared.exceptions import MCPError

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import registered_component_for_key

if TYPE_CHECKING:
    from fastmcp import FastMCP


async def deployed_component(server: FastMCP, key: str) -> Tool:
    """The enabled task tool stored as `key`, or the reference's error for a key that does not
    resolve at re-entry (-32603), saying that the tool changed under the task."""
    try:
        component = await registered_component_for_key(server, key)
    except MCPError:
        component = None
    if component is None or not is_enabled(component):
        raise MCPError(code=mcp_types.INTERNAL_ERROR, message=_tool_gone(key))
    return component


def refused_arguments(component: Tool, arguments: dict[str, Any], *, strict: bool) -> str | None:
    """The `isError` text a call with the task's arguments gets from the tool as deployed now, if any."""
    try:
        _fastmcp_private.validate_call(component, arguments, strict=strict)
    except ValidationError as exc:
        changed = _tool_label(component.name, component.version)
        return (
            f"The arguments this task was started with no longer fit {changed},"
            f" which changed while the task was in flight:\n{exc}"
        )
    return None


def _tool_gone(key: str) -> str:
    name, _, version = key.partition(":")[2].rpartition("@")
    return (
        f"No task-enabled component found for {key!r}. This server no longer has"
        f" {_tool_label(name, version)} as an enabled task tool: it was removed, renamed, disabled, lost"
        " that version or task=True while the task was in flight. Keep a tool version deployed and"
        " enabled until its tasks have finished."
    )


def _tool_label(name: str, version: str | None) -> str:
    return f"tool {name!r}" + (f" version {version!r}" if version else "")
