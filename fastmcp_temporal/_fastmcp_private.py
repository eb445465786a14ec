"""Everything of FastMCP, fastmcp-tasks and their dependencies that this package relies on
without a public promise, in one place, checked at start-up.

FastMCP ships no public task-backend API, so a backend must reach internals: private
functions and attributes, a `Context` subclass, Docket's progress ContextVar, the
reference's wire models (in fastmcp-tasks modules its package does not export) and the
exact text of a few messages, matched in their errors or written as they write them. Each
is used here, and only here, and each is listed in `RELIANCES` with why it is used and what
breaks without it. `check_upstream()` runs when a `TemporalTasksExtension` or a
`McpTasksPlugin` is created: if an upgrade of FastMCP or fastmcp-tasks moved any of them it
fails, naming the installed versions and every item that moved, instead of letting a task
break later, some of them silently (answers that stop reaching the tool, progress that
disappears). `pyproject.toml` declares ranges, not pins, so the package installs beside the
FastMCP a user has; CI runs this check and the protocol tests on the lowest and the newest
releases in those ranges (`.ci/run`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache, partial
from importlib import import_module, metadata
from types import CodeType, FunctionType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from fastmcp.exceptions import ValidationError
from fastmcp.server.context import Context
from fastmcp.server.extensions import ServerExtension
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.exceptions import get_http_status_code, is_timeout_error
from packaging.requirements import Requirement
from packaging.version import Version
from pydantic import ValidationError as PydanticValidationError
from starlette.routing import Route

if TYPE_CHECKING:
    import anyio
    from fastmcp import FastMCP
    from fastmcp.server.http import StarletteWithLifespan
    from fastmcp.tools.base import Tool
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

_UNRESOLVED_DEPENDENCY_TEXT = ("Failed to resolve dependency '", "' for ")
_UNRESOLVED_DEPENDENCY = re.compile(
    re.escape(_UNRESOLVED_DEPENDENCY_TEXT[0])
    + r"(?P<parameter>[^']+)"
    + re.escape(_UNRESOLVED_DEPENDENCY_TEXT[1])
)


def unresolved_dependency(exc: RuntimeError) -> str | None:
    """The parameter whose `Depends(...)` failed: FastMCP says so only in this error's message."""
    match = _UNRESOLVED_DEPENDENCY.match(str(exc))
    return match["parameter"] if match and exc.__cause__ is not None else None


_TOOL_TIMEOUT_TEXT = ("Tool '", "' execution timed out after ", "s")


def is_tool_timeout(tool: Tool, exc: MCPError) -> bool:
    """Whether `exc` is FastMCP's report of the tool's own `timeout=`: an MCPError told apart
    from others only by its message."""
    timeout = getattr(tool, "timeout", None)
    if timeout is None:
        return False
    opening, middle, closing = _TOOL_TIMEOUT_TEXT
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


_UNRESOLVED_DEPENDENCIES_TEXT = "Failed to resolve dependencies for parameter(s): "


def unresolved_dependencies_text(parameter: str) -> str:
    """The message of the exception group Docket raises when the `Depends(...)` of `parameter`
    fails, which the reference's task reports as its error."""
    return f"{_UNRESOLVED_DEPENDENCIES_TEXT}{parameter} (1 sub-exception)"


# --- argument validation, as fastmcp-tasks' `coerce_task_arguments` does it ---------

_PROBE_NAME = "call[probe]"


def validate_call(tool: Tool, arguments: dict[str, Any], *, strict: bool) -> None:
    """Reject arguments `tool` does not accept with the error a synchronous call gives.

    Validates as fastmcp-tasks' `coerce_task_arguments` does, through the same call-shape
    probe, but with the probe's TypeAdapter built once per tool function instead of per
    call (~3 ms each, and an entry in FastMCP's adapter cache each). The probe's error
    names a stand-in function `probe`; the synchronous error names the tool's function.
    Only a `FunctionTool` takes typed arguments; others accept any.

    Raises:
        ValidationError: the arguments do not fit the tool's parameters.
    """
    if not isinstance(tool, FunctionTool):
        return
    from fastmcp.tools.function_tool import _validate_input

    try:
        _validate_input(
            _call_shape_adapter(tool.fn, tool.run_in_thread), arguments, strict=True if strict else None
        )
    except PydanticValidationError as exc:
        function_name = getattr(tool.fn, "__name__", "probe")
        message = str(exc).replace(_PROBE_NAME, f"call[{function_name}]", 1)
        raise ValidationError(message, log_level=logging.WARNING) from exc


@lru_cache(maxsize=1024)
def _call_shape_adapter(fn: Callable[..., Any], run_in_thread: bool) -> TypeAdapter[Any]:
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


# --- the start-up check ------------------------------------------------------------------


@dataclass(frozen=True)
class Reliance:
    """One thing of FastMCP's (or fastmcp-tasks', Docket's, mcp's) that no public API promises.

    Args:
        target: `module:attribute.path` of what is used.
        why: what this package uses it for.
        breaks: what goes wrong without it.
        holds: a further check of `target` once found: `None` when it holds, else what changed.
    """

    target: str
    why: str
    breaks: str
    holds: Callable[[Any], str | None] | None = None

    def problem(self) -> str | None:
        """What moved, or `None` when the installed packages still have it as used here."""
        module_name, _, path = self.target.partition(":")
        try:
            found: Any = import_module(module_name)
        except ImportError:
            return f"module {module_name} is gone"
        for attribute in path.split(".") if path else []:
            try:
                found = inspect.getattr_static(found, attribute)
            except AttributeError:
                return f"{self.target} is gone"
        return self.holds(found) if self.holds is not None else None


def check_upstream() -> None:
    """Fail when the installed FastMCP / fastmcp-tasks moved anything in `RELIANCES`.

    The texts written as FastMCP writes them are checked by calling FastMCP with a tool that raises,
    on an event loop in a thread of its own, with FastMCP's spans and logs of those calls left out.

    Raises:
        UpstreamChanged: naming the installed versions and every item that moved.
    """
    moved = [
        f"- {reliance.target}: {problem}. It is used to {reliance.why}; without it {reliance.breaks}."
        for reliance in RELIANCES
        if (problem := reliance.problem()) is not None
    ]
    if moved:
        raise UpstreamChanged(
            f"fastmcp-temporal {_installed('fastmcp-temporal')} cannot run on the installed "
            f"{_installed_upstream()}: what it relies on moved:\n" + "\n".join(moved) + "\n"
            f"Install versions in the ranges it declares ({_declared()}; the lowest: "
            f'pip install "fastmcp[tasks]=={_lowest_fastmcp()}"), or a fastmcp-temporal release made '
            "for these."
        )


def _installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _installed_upstream() -> str:
    # fastmcp-slim ships the `fastmcp` module; the `fastmcp` distribution only pins a fastmcp-slim.
    names = ("fastmcp-slim", "fastmcp-tasks", "mcp", "pydocket")
    return ", ".join(f"{name} {_installed(name)}" for name in names)


def _upstream_requirements() -> list[Requirement]:
    try:
        required = metadata.requires("fastmcp-temporal") or []
    except metadata.PackageNotFoundError:
        return []
    upstream = [Requirement(line) for line in required]
    return [r for r in upstream if r.name in ("fastmcp", "fastmcp-slim", "fastmcp-tasks") and not r.marker]


def _declared() -> str:
    return ", ".join(str(r) for r in _upstream_requirements()) or "see pyproject.toml"


def _lowest_fastmcp() -> str:
    lower_bounds = [
        spec.version
        for requirement in _upstream_requirements()
        for spec in requirement.specifier
        if spec.operator in (">=", "==")
    ]
    return min(lower_bounds, key=Version, default="<the version in pyproject.toml>")


def _functions(owner: Any) -> Iterator[FunctionType]:
    """The functions of a function, property, class or module (only those defined in it)."""
    owner = getattr(owner, "__func__", owner)
    if isinstance(owner, property):
        owner = owner.fget
    if isinstance(owner, FunctionType):
        yield inspect.unwrap(owner)
    elif isinstance(owner, (type, ModuleType)):
        home = owner.__name__ if isinstance(owner, ModuleType) else owner.__module__
        for member in vars(owner).values():
            defined_here = getattr(getattr(member, "__func__", member), "__module__", None) == home
            if isinstance(member, (property, staticmethod, classmethod)) or (
                defined_here and isinstance(member, FunctionType)
            ):
                yield from _functions(member)
            elif defined_here and isinstance(member, type) and isinstance(owner, ModuleType):
                yield from _functions(member)


def _code_words(owner: Any) -> set[str]:
    """Every string constant and name in the code of `owner`, nested functions included."""
    pending: list[CodeType] = [function.__code__ for function in _functions(owner)]
    words: set[str] = set()
    while pending:
        code = pending.pop()
        words.update(code.co_names)
        for constant in code.co_consts:
            if isinstance(constant, str):
                words.add(constant)
            elif isinstance(constant, CodeType):
                pending.append(constant)
    return words


def _says(*pieces: str) -> Callable[[Any], str | None]:
    """Holds when the code of the target still has every fixed piece of a message we match."""

    def check(owner: Any) -> str | None:
        missing = [piece for piece in pieces if piece not in _code_words(owner)]
        return f"its code no longer says {missing!r}" if missing else None

    return check


def _reads(name: str) -> Callable[[Any], str | None]:
    def check(owner: Any) -> str | None:
        return None if name in _code_words(owner) else f"it no longer reads {name}"

    return check


def _parameters(*names: str) -> Callable[[Any], str | None]:
    def check(function: Any) -> str | None:
        present = set(inspect.signature(getattr(function, "__func__", function)).parameters)
        missing = [name for name in names if name not in present]
        return f"it no longer takes {missing}" if missing else None

    return check


def _overridden_signature(function: Any) -> str | None:
    """A `Context` method still takes what `TaskContext`'s override takes, so ours still replaces it."""
    theirs = list(inspect.signature(function).parameters)
    ours = list(inspect.signature(getattr(TaskContext, function.__name__)).parameters)
    return None if theirs == ours else f"it now takes {theirs}, TaskContext.{function.__name__} takes {ours}"


def _answers_reach_the_tool(context_class: Any) -> str | None:
    """Answers set by `set_pending_input` are what the tool reads as `ctx.input_responses`."""
    from fastmcp import FastMCP

    ctx = context_class(fastmcp=FastMCP("fastmcp-temporal upstream check"))
    answers: dict[str, Any] = {"check": None}
    set_pending_input(ctx, answers, "state")
    if ctx.input_responses is not answers or ctx.request_state != "state":
        return "ctx.input_responses / ctx.request_state no longer fall back to what set_pending_input sets"
    return None


def _has_instance_attributes(*names: str) -> Callable[[Any], str | None]:
    def check(server_class: Any) -> str | None:
        server = server_class("fastmcp-temporal upstream check")
        missing = [name for name in names if not hasattr(server, name)]
        return f"a FastMCP server no longer has {missing}" if missing else None

    return check


def _context_var(found: Any) -> str | None:
    return None if isinstance(found, ContextVar) else f"it is a {type(found).__name__}, not a ContextVar"


def _docket_progress_shape(protocol: Any) -> str | None:
    members = {name for name in vars(protocol) if not name.startswith("_")}
    return None if members == DOCKET_PROGRESS_MEMBERS else f"its members are now {sorted(members)}"


def _probe_names_the_stand_in(_: Any) -> str | None:
    from fastmcp.tools.function_tool import _validate_input

    try:
        _validate_input(_call_shape_adapter(_needs_one, False), {}, strict=None)
    except PydanticValidationError as exc:
        return None if _PROBE_NAME in str(exc) else f"its validation errors no longer say {_PROBE_NAME!r}"
    return "it accepted a call without a required argument"


def _needs_one(value: int) -> None:
    """A function with one required parameter, which the check validates a call without."""


# Set in the thread where a check runs FastMCP (which needs an event loop of its own).
_checking: ContextVar[bool] = ContextVar("fastmcp_temporal_upstream_check", default=False)


def _run_apart(check: Callable[[], Coroutine[Any, Any, str | None]]) -> str | None:
    """Run `check` on an event loop of its own, whether or not the caller's thread runs one, with
    FastMCP's spans suppressed and what its server module logs during the check dropped."""
    from fastmcp import FastMCP

    def outside_the_check(record: logging.LogRecord) -> bool:
        return not _checking.get()

    server_log = logging.getLogger(FastMCP.__module__)
    server_log.addFilter(outside_the_check)
    try:
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(_run_unobserved, check).result()
    finally:
        server_log.removeFilter(outside_the_check)


def _run_unobserved(check: Callable[[], Coroutine[Any, Any, str | None]]) -> str | None:
    from fastmcp.telemetry import suppress_fastmcp_telemetry

    _checking.set(True)
    with suppress_fastmcp_telemetry():
        return asyncio.run(check())


def _check_server(*, masked: bool) -> FastMCP:
    from fastmcp import FastMCP

    return FastMCP("fastmcp-temporal upstream check", mask_error_details=masked)


def _inline_calls_answer_as_ours(_: Any) -> str | None:
    """A tool that raises answers FastMCP's inline call with the text `inline_error_text` writes."""
    return _run_apart(_inline_error_differences)


async def _inline_error_differences() -> str | None:
    differences = []
    for masked in (True, False):
        server = _check_server(masked=masked)
        for tool_name, failure in _tool_failures().items():
            server.tool(_raising(failure), name=tool_name)
            theirs = await _inline_answer(server, tool_name)
            ours = inline_error_text(server, tool_name, failure)
            if theirs != ours:
                differences.append(f"{tool_name} (masked={masked}): inline {theirs!r}, durable {ours!r}")
    return "; ".join(differences) or None


def _tool_failures() -> dict[str, BaseException]:
    """What a tool raises that FastMCP's inline call words apart, by the name of a tool raising it."""
    import httpx2

    request = httpx2.Request("GET", "https://upstream.invalid")
    rate_limited = httpx2.Response(429, request=request)
    return {
        "rate_limited": httpx2.HTTPStatusError("429", request=request, response=rate_limited),
        "timed_out": httpx2.ReadTimeout("timed out", request=request),
        "failed": ValueError("the upstream check's failure"),
    }


def _raising(failure: BaseException) -> Callable[[], Coroutine[Any, Any, None]]:
    async def body() -> None:
        raise failure

    return body


async def _inline_answer(server: FastMCP, tool_name: str) -> str:
    """The `isError` text of FastMCP's inline call of a tool that raises: its ToolError's text."""
    from fastmcp.exceptions import ToolError

    try:
        await server.call_tool(tool_name)
    except ToolError as error:
        return str(error)
    return "a result, not a ToolError"


def _tasks_answer_as_ours(error_result: Callable[[str, Exception], Any]) -> str | None:
    """A reference task whose tool raised answers with the text `tool_error_text` writes."""
    return _run_apart(partial(_task_error_differences, error_result))


async def _task_error_differences(error_result: Callable[[str, Exception], Any]) -> str | None:
    differences = []
    failure = ValueError("the upstream check's failure")
    for masked in (True, False):
        server = _check_server(masked=masked)
        async with Context(fastmcp=server):
            theirs = error_result("failed", failure).content[0].text
        ours = tool_error_text(server, "failed", failure)
        if theirs != ours:
            differences.append(f"masked={masked}: the reference's {theirs!r}, ours {ours!r}")
    return "; ".join(differences) or None


_ANSWERS = "answers stop reaching the tool, which asks its question again for ever"
_PROGRESS = "a task's progress and checkpoints silently stop reaching tasks/get, the UI and retries"

RELIANCES: tuple[Reliance, ...] = (
    Reliance(
        "fastmcp.server.context:_TASK_ELICIT_ERROR",
        "tell FastMCP's refusal of ctx.elicit() in a durable call's leg apart, to word it for a call",
        "ctx.elicit() in a durable call is refused as in a background task, a task the caller never made",
        lambda text: None if isinstance(text, str) else "it is no longer a message string",
    ),
    Reliance(
        "fastmcp.server.context:Context",
        "read a task's answers through ctx.input_responses",
        _ANSWERS,
        _answers_reach_the_tool,
    ),
    Reliance(
        "fastmcp.server.context:Context.__init__",
        "make a task's Context (TaskContext)",
        "no tool in a task gets a Context",
        _parameters("fastmcp", "session", "task_id", "origin_request_id"),
    ),
    Reliance(
        "fastmcp.server.context:Context.log",
        "send ctx.log of a task to the server's log (TaskContext.log)",
        "ctx.log in a task raises as in the reference engine",
        _overridden_signature,
    ),
    Reliance(
        "fastmcp.server.context:Context.client_supports_extension",
        "answer ctx.client_supports_extension with the extensions the caller declared",
        "tools in a task see no client extension",
        _parameters("extension_id"),
    ),
    Reliance(
        "fastmcp.server.context:Context.report_progress",
        "receive ctx.report_progress in a task",
        _PROGRESS,
        _reads("current_execution"),
    ),
    Reliance(
        "fastmcp.server.context:Context.report_progress",
        "relay ctx.report_progress of a durable call's leg to its caller (TaskContext.report_progress)",
        "a durable call's progress no longer reaches its caller",
        _overridden_signature,
    ),
    Reliance(
        "fastmcp.server.dependencies:Progress.__aenter__",
        "receive Progress() reports in a task",
        _PROGRESS,
        _reads("current_execution"),
    ),
    Reliance(
        "fastmcp.server.dependencies:ProgressLike",
        "stand in for a Docket execution's progress",
        _PROGRESS,
        _docket_progress_shape,
    ),
    Reliance(
        "docket.dependencies:current_execution",
        "stand in for Docket's execution while a leg runs",
        _PROGRESS,
        _context_var,
    ),
    Reliance(
        "fastmcp.server.dependencies:_is_client_tool_call",
        "run a tool call made from inside a tool inline, as the reference does",
        "such a nested call fails",
    ),
    Reliance(
        "fastmcp.server.dependencies:_background_context_factory",
        "chain the task Context hook to another tasks backend's",
        "the embedded worker cannot start",
    ),
    Reliance(
        "fastmcp.server.dependencies:_worker_server_resolver",
        "chain the task server hook to another tasks backend's",
        "the embedded worker cannot start",
    ),
    Reliance(
        "fastmcp.server.dependencies:without_injected_parameters",
        "validate a call's arguments at creation",
        "no task can be created",
    ),
    Reliance(
        "fastmcp.server.dependencies",
        "tell a failed Depends(...) (a -32603 error, as the reference "
        "reports it) from a tool's own RuntimeError",
        "a failed dependency ends its task as a tool error instead",
        _says(*_UNRESOLVED_DEPENDENCY_TEXT),
    ),
    Reliance(
        "fastmcp.tools.function_tool:FunctionTool",
        "tell a tool's own timeout= (an isError result, as a "
        "synchronous call gives) from other protocol errors",
        "a tool's timeout fails its task instead",
        _says(*_TOOL_TIMEOUT_TEXT[:2]),
    ),
    Reliance(
        "fastmcp.server.server:FastMCP.call_tool",
        "answer a durable synchronous call whose tool raised as an inline call does "
        "(inline_error_text: upstream 429s, timeouts, masking)",
        "such a call answers differently from an inline one, and nothing else fails",
        _inline_calls_answer_as_ours,
    ),
    Reliance(
        "fastmcp_tasks.input_loop:_error_result",
        "answer a task whose tool raised as the reference's tasks do (tool_error_text)",
        "such a task answers differently from the reference's, and nothing else fails",
        _tasks_answer_as_ours,
    ),
    Reliance(
        "docket.worker:Worker",
        "fail a task whose Depends(...) failed with the error the reference's task fails with "
        "(unresolved_dependencies_text)",
        "such a task fails with another error than the reference's, and nothing else fails",
        _says(_UNRESOLVED_DEPENDENCIES_TEXT),
    ),
    Reliance(
        "fastmcp.tools.function_tool:_validate_input",
        "validate a call's arguments at creation and in every leg",
        "no task can be created",
    ),
    Reliance(
        "fastmcp_tasks.components:_call_shape_probe",
        "validate a call as the reference does, and name "
        "the tool's function in its error as a synchronous call does",
        "bad arguments get an error naming `probe`",
        _probe_names_the_stand_in,
    ),
    Reliance(
        "fastmcp.utilities.types:get_cached_typeadapter",
        "validate a call's arguments at creation",
        "no task can be created",
    ),
    Reliance(
        "fastmcp_tasks.context:_apply_snapshot_to_context",
        "restore the caller (token, headers, session) in a worker",
        "tools in a task run without their caller",
    ),
    Reliance(
        "fastmcp_tasks.context:_resolve_owning_server",
        "run a mounted tool on its own child server",
        "mounted tools run with the root server's state and masking",
    ),
    Reliance(
        "fastmcp_tasks.context:TaskContextSnapshot.capture",
        "snapshot the caller at creation",
        "no task can be created",
    ),
    Reliance(
        "fastmcp_tasks.context:get_task_scope",
        "scope tasks by the caller as the reference does",
        "no task can be read",
    ),
    Reliance(
        "fastmcp_tasks.creation:registered_component_for_key",
        "find a task's tool again in a worker",
        "no leg can run",
    ),
    Reliance(
        "fastmcp_tasks.encryption:snapshot_codec",
        "encrypt the caller snapshot as the reference does",
        "no task can be created",
    ),
    Reliance(
        "fastmcp_tasks.input_store:result_type_for_method",
        "decode answers into the types tools read",
        "no answer can be applied",
    ),
    Reliance(
        "fastmcp_tasks.models:CreateTaskResult",
        "answer tools/call and tasks/* with the reference's wire models",
        "no task can be created or read",
    ),
    Reliance(
        "fastmcp_tasks.wire_production:install",
        "let tools/call answer with a CreateTaskResult",
        "the SDK strips taskId from the create result",
    ),
    Reliance(
        "fastmcp_tasks.wire_production:uninstall",
        "remove that patch when the last server stops",
        "servers cannot stop",
    ),
    Reliance(
        "mcp.server.runner",
        "have the runner serialize results through the function wire_production wraps",
        "clients get no taskId",
        _reads("serialize_server_result"),
    ),
    Reliance(
        "fastmcp.server.extensions:ServerExtension._bind",
        "raise the HTTP request cap before FastMCP builds its app",
        "requests over mcp's 4 MiB cap are refused",
        _parameters("self", "server"),
    ),
    Reliance(
        "mcp.server.session:ServerSession.__init__",
        "see a caller's notifications/cancelled for a durable synchronous call",
        "every durable synchronous call fails",
        _reads("_request_outbound"),
    ),
    Reliance(
        "mcp.shared.dispatcher:DispatchContext.cancel_requested",
        "see a caller's notifications/cancelled for a durable synchronous call",
        "every durable synchronous call fails",
    ),
    Reliance(
        "fastmcp.server.server:FastMCP._lifespan_manager",
        "enter the server's lifespan in a worker",
        "workers cannot start",
    ),
    Reliance(
        "fastmcp.server.server:FastMCP",
        "read the masking policy and find the registered extension",
        "legs and the plugin fail",
        _has_instance_attributes("_mask_error_details", "_extensions"),
    ),
    Reliance(
        "fastmcp.server.http:StreamableHTTPASGIApp",
        "find the MCP route to raise its request cap",
        "HTTP servers cannot start",
    ),
    Reliance(
        "fastmcp.server.auth.middleware:RequireAuthMiddleware",
        "find the MCP route behind its auth guard",
        "HTTP servers with auth cannot start",
    ),
    Reliance(
        "mcp.server.transport_security:RequestBodyLimitMiddleware",
        "raise mcp's request size cap",
        "HTTP servers cannot start",
    ),
)
