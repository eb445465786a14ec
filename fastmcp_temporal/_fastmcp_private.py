"""The adapters through which this package reaches what FastMCP, fastmcp-tasks and their
dependencies offer without a public promise.

FastMCP ships no public task-backend API, so a backend must reach internals: private
functions and attributes, a `Context` subclass, Docket's progress ContextVar, the
reference's wire models (in fastmcp-tasks modules its package does not export) and the
exact text of a few messages, matched in their errors or written as they write them. Each
is used here, behind a function or class the rest of the package calls, and nowhere else
but in `_upstream_check.py`, which lists every one in `RELIANCES` (why it is used, what
breaks without it) and verifies them when a `TemporalTasksExtension` or a `McpTasksPlugin`
is created. This module holds the adapters only; importing it raises `UpstreamChanged`
when a fastmcp-tasks module it reads is gone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from fastmcp.exceptions import ValidationError
from fastmcp.server.context import Context
from fastmcp.server.extensions import ServerExtension
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.exceptions import get_http_status_code, is_timeout_error
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import to_jsonable_python
from starlette.routing import Route

if TYPE_CHECKING:
    import anyio
    from fastmcp import FastMCP
    from fastmcp.server.http import StarletteWithLifespan
    from fastmcp.tools.base import Tool
    from mcp.server.session import ServerSession
    from mcp.shared.exceptions import MCPError
    from mcp_types import LoggingLevel
    from pydantic import TypeAdapter


class UpstreamChanged(RuntimeError):
    """The installed FastMCP or fastmcp-tasks no longer has what this package relies on."""


# --- the wire models and helpers of fastmcp-tasks (modules its package does not export) ---

try:
    from fastmcp_tasks.context import TaskContextSnapshot, get_task_scope
    from fastmcp_tasks.creation import registered_component_for_key
    from fastmcp_tasks.encryption import SnapshotDecryptionError, snapshot_codec
    from fastmcp_tasks.input_store import result_type_for_method
    from fastmcp_tasks.models import (
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        CancelTaskParams,
        CancelTaskResult,
        CreateTaskResult,
        GetTaskParams,
        GetTaskResult,
        TaskStatus,
        UpdateTaskParams,
        UpdateTaskResult,
        missing_capability_error_data,
    )
except ImportError as missing:
    raise UpstreamChanged(f"{missing}") from missing

__all__ = [
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "CancelTaskParams",
    "CancelTaskResult",
    "CreateTaskResult",
    "GetTaskParams",
    "GetTaskResult",
    "SnapshotDecryptionError",
    "TaskContextSnapshot",
    "TaskStatus",
    "UpdateTaskParams",
    "UpdateTaskResult",
    "get_task_scope",
    "missing_capability_error_data",
    "registered_component_for_key",
    "result_type_for_method",
    "snapshot_codec",
]


# --- the caller, the server and the hooks of a background task ---------------------


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


def cancel_requested(context: Context) -> anyio.Event | None:
    """Set when the caller sends `notifications/cancelled` for this request: mcp keeps the event on
    the request's dispatch context, which FastMCP's `Context` reaches only through the session's
    private `_request_outbound`; None outside a request."""
    request = context.request_context
    return request.session._request_outbound.cancel_requested if request is not None else None


def connection_of(session: ServerSession) -> object:
    """The connection a request came on: mcp builds a `ServerSession` per request, and keeps the
    connection it proxies, the one thing two requests of one session share, in `_connection`."""
    return session._connection


def holds_get_stream(request: Any) -> bool | None:
    """Whether the streamable-HTTP session `request` came on holds its GET stream, the one mcp sends a
    server-to-client message on when no request's stream carries it (and drops it when there is
    none); None where that cannot be told (another transport, or an app this does not recognise).
    mcp keeps each session's transport in its session manager's `_server_instances`, and the
    transport its open streams in `_request_streams`."""
    from mcp.server.streamable_http import GET_STREAM_KEY, MCP_SESSION_ID_HEADER
    from starlette.requests import Request

    if not isinstance(request, Request):
        return None
    try:
        session_app = _session_app(streamable_http_route(request.app))
    except (KeyError, AttributeError, RuntimeError):
        return None
    sessions = getattr(getattr(session_app, "session_manager", None), "_server_instances", None)
    if not isinstance(sessions, dict):
        return None
    transport = sessions.get(request.headers.get(MCP_SESSION_ID_HEADER))
    return transport is not None and GET_STREAM_KEY in transport._request_streams


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


class TaskContext(Context):
    """A background-task `Context` that logs to the server and knows the caller's extensions.

    The task has no session to notify, so the reference engine's `ctx.log` raises;
    here it reaches `fastmcp_temporal.task` tagged with the task id instead. The
    extensions the caller declared at submission answer `client_supports_extension`.
    In the leg of a durable synchronous call, `ctx.log` and `ctx.report_progress` also go
    to `_notices`, which the call's server relays to its caller. All override `Context`
    methods by name and signature.
    """

    _client_extensions: frozenset[str] = frozenset()
    _notices: Notices | None = None

    def client_supports_extension(self, extension_id: str) -> bool:
        return extension_id in self._client_extensions

    async def log(
        self,
        message: str,
        level: LoggingLevel | None = None,
        logger_name: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if self._notices is not None:
            self._notices.log(level or "info", message, logger_name, extra)
        numeric = logging.getLevelName((level or "info").upper())
        if not isinstance(numeric, int):
            numeric = logging.WARNING
        logging.getLogger(logger_name or "fastmcp_temporal.task").log(
            numeric, "[task %s] %s", self.task_id, message, extra={"task_extra": extra}
        )

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._notices is not None:
            self._notices.report(progress, total, message)
        await super().report_progress(progress, total, message)


class Notices(Protocol):
    """Where a durable call's leg puts what its caller is sent (`worker/_notices.LegNotices`)."""

    def log(self, level: str, message: str, logger: str | None, extra: Mapping[str, Any] | None) -> None: ...

    def report(self, progress: float, total: float | None, message: str | None) -> None: ...


# --- progress: Docket's `current_execution`, the only place FastMCP reads it from ---

# What FastMCP's `Progress()` and `ctx.report_progress` call on `current_execution.get().progress`.
DOCKET_PROGRESS_MEMBERS = frozenset({"current", "total", "message", "set_total", "increment", "set_message"})


@dataclass
class _ExecutionStandIn:
    key: str
    progress: Any


@contextmanager
def docket_progress(task_id: str, progress: Any) -> Iterator[None]:
    """While it is open, FastMCP's progress reports of this context land in `progress`
    (which has `DOCKET_PROGRESS_MEMBERS`), as they land in a Docket execution's."""
    from docket.dependencies import current_execution

    token = current_execution.set(_ExecutionStandIn(key=task_id, progress=progress))  # type: ignore[arg-type]
    try:
        yield
    finally:
        current_execution.reset(token)


# --- messages matched word for word ---------------------------------------------

UNRESOLVED_DEPENDENCY_TEXT = ("Failed to resolve dependency '", "' for ")
_UNRESOLVED_DEPENDENCY = re.compile(
    re.escape(UNRESOLVED_DEPENDENCY_TEXT[0])
    + r"(?P<parameter>[^']+)"
    + re.escape(UNRESOLVED_DEPENDENCY_TEXT[1])
)


def unresolved_dependency(exc: RuntimeError) -> str | None:
    """The parameter whose `Depends(...)` failed: FastMCP says so only in this error's message."""
    match = _UNRESOLVED_DEPENDENCY.match(str(exc))
    return match["parameter"] if match and exc.__cause__ is not None else None


TOOL_TIMEOUT_TEXT = ("Tool '", "' execution timed out after ", "s")


def is_tool_timeout(tool: Tool, exc: MCPError) -> bool:
    """Whether `exc` is FastMCP's report of the tool's own `timeout=`: an MCPError distinguished
    from others only by its message."""
    timeout = getattr(tool, "timeout", None)
    if timeout is None:
        return False
    opening, middle, closing = TOOL_TIMEOUT_TEXT
    return exc.error.message == f"{opening}{tool.name}{middle}{timeout}{closing}"


# --- messages written as FastMCP and Docket write them -----------------------------------


def tool_error_text(server: FastMCP, tool_name: str, exc: BaseException) -> str:
    """The `isError` text of a tool that raised, as the reference's tasks and FastMCP's inline
    call word it: the tool's name, and the error unless `server` masks error details (a policy
    FastMCP gives no public reader)."""
    if server._mask_error_details:
        return f"Error calling tool {tool_name!r}"
    return f"Error calling tool {tool_name!r}: {exc}"


def inline_error_text(server: FastMCP, tool_name: str, exc: BaseException) -> str:
    """FastMCP's `isError` text for an error out of an inline call: upstream 429s and timeouts
    say so, even masked."""
    if get_http_status_code(exc) == 429:
        return "Rate limited by upstream API, please retry later"
    if is_timeout_error(exc):
        return "Upstream request timed out, please retry"
    return tool_error_text(server, tool_name, exc)


def is_task_elicit_refusal(exc: Exception) -> bool:
    """Whether `exc` is FastMCP's refusal of `ctx.elicit()` in a background task, known by its text."""
    from fastmcp.server.context import _TASK_ELICIT_ERROR

    return str(exc) == _TASK_ELICIT_ERROR


UNRESOLVED_DEPENDENCIES_TEXT = "Failed to resolve dependencies for parameter(s): "


def unresolved_dependencies_text(parameter: str) -> str:
    """The message of the exception group Docket raises when the `Depends(...)` of `parameter`
    fails, which the reference's task reports as its error."""
    return f"{UNRESOLVED_DEPENDENCIES_TEXT}{parameter} (1 sub-exception)"


# --- argument validation, as fastmcp-tasks' `coerce_task_arguments` does it ---------

PROBE_NAME = "call[probe]"


def validate_call(tool: Tool, arguments: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    """Reject arguments `tool` does not accept with the error a synchronous call gives.

    Validates as fastmcp-tasks' `coerce_task_arguments` does, through the same call-shape
    probe, but with the probe's TypeAdapter built once per tool function instead of per
    call (~3 ms each, and an entry in FastMCP's adapter cache each). The probe's error
    names a stand-in function `probe`; the synchronous error names the tool's function.
    Only a `FunctionTool` takes typed arguments; others accept any.

    Returns:
        The arguments as validated, defaults filled in, in JSON form: one value for every
        spelling of the same call (`1` and `1.0` for a float, a default left out or given).

    Raises:
        ValidationError: the arguments do not fit the tool's parameters.
    """
    if not isinstance(tool, FunctionTool):
        return to_jsonable_python(arguments, fallback=str)
    from fastmcp.tools.function_tool import _validate_input

    try:
        validated = _validate_input(
            call_shape_adapter(tool.fn, tool.run_in_thread), arguments, strict=True if strict else None
        )
    except PydanticValidationError as exc:
        function_name = getattr(tool.fn, "__name__", "probe")
        message = str(exc).replace(PROBE_NAME, f"call[{function_name}]", 1)
        raise ValidationError(message, log_level=logging.WARNING) from exc
    return to_jsonable_python(validated, fallback=str)


@lru_cache(maxsize=1024)
def call_shape_adapter(fn: Callable[..., Any], run_in_thread: bool) -> TypeAdapter[Any]:
    """The adapter of fastmcp-tasks' call-shape probe of `fn`, which names the stand-in `probe`."""
    from fastmcp.server.dependencies import without_injected_parameters
    from fastmcp.utilities.types import get_cached_typeadapter
    from fastmcp_tasks.components import _call_shape_probe

    return get_cached_typeadapter(
        _call_shape_probe(without_injected_parameters(fn, run_in_thread=run_in_thread))
    )


# --- the task result on the wire -----------------------------------------------------


@contextmanager
def task_results_on_the_wire() -> Iterator[None]:
    """While a tasks server runs, a modern `tools/call` may answer with a `CreateTaskResult`:
    fastmcp-tasks' `wire_production` patch, without which the SDK strips the `taskId`."""
    from fastmcp_tasks import wire_production

    wire_production.install()
    try:
        yield
    finally:
        wire_production.uninstall()


# --- subscriptions/listen ----------------------------------------------------------------

LISTEN_METHOD = "subscriptions/listen"
ListenRequestHandler = Callable[[Any, Any], Awaitable[Any]]


def serve_subscriptions_listen(server: FastMCP, handler: ListenRequestHandler) -> bool:
    """Serve `subscriptions/listen` with `handler`, unless the server already does (then False).

    FastMCP's `MethodBinding` refuses a spec method, and its low-level server, where mcp
    registers request handlers, is reached only as `FastMCP._mcp_server`.
    """
    from mcp_types import SubscriptionsListenRequestParams

    lowlevel = server._mcp_server
    if lowlevel.get_request_handler(LISTEN_METHOD) is not None:
        return False
    lowlevel.add_request_handler(LISTEN_METHOD, SubscriptionsListenRequestParams, handler)
    return True


def add_server_middleware(server: FastMCP, middleware: Any) -> None:
    """Run `middleware` (mcp's `ServerMiddleware`) innermost around every request of `server`: mcp's runner
    sieves a 2025-11-25 `tools/call` result to that era's `CallToolResult`, and only a middleware of the
    low-level server, reached as `FastMCP._mcp_server`, sees the result after that sieve."""
    server._mcp_server.middleware.append(middleware)


def raw_request_params(context: Context) -> Mapping[str, Any]:
    """The params of the request `context` serves, as the client sent them (empty outside a request):
    FastMCP hands a `tools/call` interceptor params rebuilt without the 2025-11-25 `task`, and keeps the
    raw ones only on its request context's private `_srctx`, where its own `Context` reads them."""
    request = context.request_context
    params = request._srctx.params if request is not None else None
    return params if isinstance(params, Mapping) else {}


# --- the HTTP app ------------------------------------------------------------------------


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
