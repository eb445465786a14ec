"""Every private FastMCP and fastmcp-tasks symbol this package leans on, in one place.

FastMCP ships no public task-backend API, so a backend must reach a few internals.
Each is wrapped here with the reason it is needed; a FastMCP upgrade that moves one
breaks this module alone (`pyproject.toml` pins the compatible range).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fastmcp.server.extensions import ServerExtension
from starlette.routing import Route

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.context import Context
    from fastmcp.server.http import StarletteWithLifespan
    from fastmcp.tools.function_tool import FunctionTool
    from fastmcp_tasks.context import TaskContextSnapshot
    from pydantic import TypeAdapter


def is_client_tool_call() -> bool:
    """Whether this dispatch is the client's own call; nested calls must run inline."""
    from fastmcp.server.dependencies import _is_client_tool_call

    return _is_client_tool_call()


def apply_snapshot(snapshot: TaskContextSnapshot) -> None:
    """Restore token, headers and session id; the reference keeps the expiry check here."""
    from fastmcp_tasks.context import _apply_snapshot_to_context

    _apply_snapshot_to_context(snapshot)


async def resolve_owning_server(snapshot: TaskContextSnapshot | None) -> FastMCP | None:
    """The child server a mounted tool lives on (`FastMCPProviderTool._server`), from the root."""
    from fastmcp_tasks.context import _resolve_owning_server

    return await _resolve_owning_server(snapshot)


def set_pending_input(ctx: Context, responses: Any, request_state: str | None) -> None:
    """`ctx.input_responses`/`ctx.request_state` fall back to these in a task."""
    ctx._task_input_responses = responses
    ctx._task_request_state = request_state


def mask_error_details(server: FastMCP) -> bool:
    """The server's masking policy has no public reader."""
    return server._mask_error_details


def lifespan_manager(server: FastMCP) -> AbstractAsyncContextManager[Any]:
    """A worker process must enter the server's full lifespan without serving MCP."""
    return server._lifespan_manager()


def registered_extension(server: FastMCP, identifier: str) -> Any:
    """FastMCP has no public lookup of a registered extension by identifier."""
    return server._extensions.get(identifier)


def background_context_factory() -> Any:
    """The installed factory, so ours can chain to another tasks backend's."""
    from fastmcp.server import dependencies

    return dependencies._background_context_factory


def worker_server_resolver() -> Any:
    """The installed resolver, so ours can chain to another tasks backend's."""
    from fastmcp.server import dependencies

    return dependencies._worker_server_resolver


_UNRESOLVED_DEPENDENCY = re.compile(r"Failed to resolve dependency '(?P<parameter>[^']+)' for ")


def unresolved_dependency(exc: RuntimeError) -> str | None:
    """The parameter whose `Depends(...)` failed: FastMCP says so only in this error's message."""
    match = _UNRESOLVED_DEPENDENCY.match(str(exc))
    return match["parameter"] if match and exc.__cause__ is not None else None


def validate_call(tool: FunctionTool, arguments: dict[str, Any], *, strict: bool | None) -> None:
    """Validate a call as fastmcp-tasks' `coerce_task_arguments` does, through the same call-shape
    probe, but with the probe's TypeAdapter built once per tool function instead of per call
    (~3 ms each, and an entry in FastMCP's adapter cache each)."""
    from fastmcp.tools.function_tool import _validate_input

    _validate_input(_call_shape_adapter(tool.fn, tool.run_in_thread), arguments, strict=strict)


@lru_cache(maxsize=1024)
def _call_shape_adapter(fn: Callable[..., Any], run_in_thread: bool) -> TypeAdapter[Any]:
    from fastmcp.server.dependencies import without_injected_parameters
    from fastmcp.utilities.types import get_cached_typeadapter
    from fastmcp_tasks.components import _call_shape_probe

    return get_cached_typeadapter(_call_shape_probe(without_injected_parameters(fn, run_in_thread=run_in_thread)))


if "_bind" not in vars(ServerExtension):
    raise ImportError(
        "fastmcp_temporal needs FastMCP's ServerExtension._bind, which this FastMCP no longer has; "
        "install a FastMCP in the range pyproject.toml pins."
    )


class RegisteredExtension(ServerExtension):
    """A `ServerExtension` told when it is registered: FastMCP's private `_bind` is the only hook
    that runs before the server builds its HTTP app."""

    def _bind(self, server: FastMCP) -> None:
        super()._bind(server)
        self.registered(server)

    def registered(self, server: FastMCP) -> None:
        """Called once this extension is bound to `server`."""


def streamable_http_route(app: StarletteWithLifespan) -> Route:
    """The route serving MCP in a FastMCP streamable-HTTP app, whose session manager FastMCP builds
    with mcp's 4 MiB body cap and no way to pass another."""
    for route in app.routes:
        if isinstance(route, Route) and route.path == app.state.path and _session_app(route) is not None:
            return route
    raise RuntimeError(
        f"FastMCP's streamable-HTTP app has no MCP route at {app.state.path!r} that fastmcp_temporal "
        "recognises, so it cannot raise mcp's request size cap; install a FastMCP in the range "
        "pyproject.toml pins."
    )


def raise_session_body_limit(route: Route, limit: int) -> None:
    """Raise the body cap of the session manager behind `route` (built anew in each lifespan) to `limit`."""
    from mcp.server.transport_security import RequestBodyLimitMiddleware

    session_app = _session_app(route)
    manager = getattr(session_app, "session_manager", None)
    capped = getattr(manager, "asgi_app", None)
    if not isinstance(capped, RequestBodyLimitMiddleware):
        raise RuntimeError(
            "mcp's streamable-HTTP session manager no longer caps request bodies where fastmcp_temporal "
            "raises the cap (StreamableHTTPSessionManager.asgi_app); install an mcp in the range "
            "pyproject.toml pins."
        )
    capped.max_body_size = manager.max_request_body_size = limit


def _session_app(route: Route) -> Any:
    """FastMCP's `StreamableHTTPASGIApp` behind `route`, under its auth guard if there is one."""
    from fastmcp.server.auth.middleware import RequireAuthMiddleware
    from fastmcp.server.http import StreamableHTTPASGIApp

    endpoint = route.endpoint
    if isinstance(endpoint, RequireAuthMiddleware):
        endpoint = endpoint.app
    return endpoint if isinstance(endpoint, StreamableHTTPASGIApp) else None
