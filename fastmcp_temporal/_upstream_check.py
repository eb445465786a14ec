"""The start-up check: every FastMCP / fastmcp-tasks internal the adapters in
`_fastmcp_private.py` rely on, listed in `RELIANCES` and verified when a
`TemporalTasksExtension` or a `McpTasksPlugin` is created.

Each `Reliance` names what is used, why, and what breaks without it, with a further check
where presence is not enough (a signature, a message text matched word for word, answers
still reaching `ctx.input_responses`, error texts still written as FastMCP writes them).
If an upgrade of FastMCP or fastmcp-tasks moved any of them, `check_upstream()` fails,
naming the installed versions and every item that moved, instead of letting a task break
later, some of them silently (answers that stop reaching the tool, progress that
disappears). The check runs once per process; the constructions after the first cost
nothing. `pyproject.toml` declares ranges, not pins, so the package installs beside the
FastMCP a user has; CI runs this check and the protocol tests on the lowest and the newest
releases in those ranges (`.ci/run`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from functools import cache, partial
from importlib import metadata
from typing import TYPE_CHECKING, Any

from fastmcp.server.context import Context
from packaging.requirements import Requirement
from packaging.version import Version
from pydantic import ValidationError as PydanticValidationError

from fastmcp_temporal._fastmcp_private import (
    DOCKET_PROGRESS_MEMBERS,
    PROBE_NAME,
    TOOL_TIMEOUT_TEXT,
    UNRESOLVED_DEPENDENCIES_TEXT,
    UNRESOLVED_DEPENDENCY_TEXT,
    TaskContext,
    UpstreamChanged,
    call_shape_adapter,
    inline_error_text,
    set_pending_input,
    tool_error_text,
)
from fastmcp_temporal._reliance import Reliance, is_context_var, parameters, reads, run_isolated, says

if TYPE_CHECKING:
    from fastmcp import FastMCP


def check_upstream() -> None:
    """Fail when the installed FastMCP / fastmcp-tasks moved anything in `RELIANCES`.

    The check runs once per process (`upstream_failure`): what is installed cannot change
    under a running process, and the live probes start throwaway FastMCP servers.

    Raises:
        UpstreamChanged: naming the installed versions and every item that moved, each time
            it is called in a process whose check failed.
    """
    failure = upstream_failure()
    if failure is not None:
        raise UpstreamChanged(failure)


@cache
def upstream_failure() -> str | None:
    """What `check_upstream` raises, worked out once per process; `None` when nothing moved.

    The texts written as FastMCP writes them are checked by calling FastMCP with a tool that raises,
    on an event loop in a thread of its own, with FastMCP's spans and logs of those calls left out.
    `upstream_failure.cache_clear()` makes the next check run again.
    """
    moved = [
        f"- {reliance.target}: {problem}. It is used to {reliance.why}; without it {reliance.breaks}."
        for reliance in RELIANCES
        if (problem := reliance.problem()) is not None
    ]
    if not moved:
        return None
    return (
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


def _docket_progress_shape(protocol: Any) -> str | None:
    members = {name for name in vars(protocol) if not name.startswith("_")}
    return None if members == DOCKET_PROGRESS_MEMBERS else f"its members are now {sorted(members)}"


def _probe_names_the_stand_in(_: Any) -> str | None:
    from fastmcp.tools.function_tool import _validate_input

    try:
        _validate_input(call_shape_adapter(_needs_one, False), {}, strict=None)
    except PydanticValidationError as exc:
        return None if PROBE_NAME in str(exc) else f"its validation errors no longer say {PROBE_NAME!r}"
    return "it accepted a call without a required argument"


def _needs_one(value: int) -> None:
    """A function with one required parameter, which the check validates a call without."""


def _check_server(*, masked: bool) -> FastMCP:
    from fastmcp import FastMCP

    return FastMCP("fastmcp-temporal upstream check", mask_error_details=masked)


def _inline_calls_answer_as_ours(_: Any) -> str | None:
    """A tool that raises answers FastMCP's inline call with the text `inline_error_text` writes."""
    return run_isolated(_inline_error_differences)


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
    """What a tool raises that FastMCP's inline call words differently, by the name of a tool raising it."""
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
    return run_isolated(partial(_task_error_differences, error_result))


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

_GET_STREAM = (
    "ask a 2025-11-25 task's question on a session's GET stream only while it holds one",
    "a polling client without a GET stream is never asked its task's question",
)
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
        parameters("fastmcp", "session", "task_id", "origin_request_id"),
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
        parameters("extension_id"),
    ),
    Reliance(
        "fastmcp.server.context:Context.report_progress",
        "receive ctx.report_progress in a task",
        _PROGRESS,
        reads("current_execution"),
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
        reads("current_execution"),
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
        is_context_var,
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
        says(*UNRESOLVED_DEPENDENCY_TEXT),
    ),
    Reliance(
        "fastmcp.tools.function_tool:FunctionTool",
        "tell a tool's own timeout= (an isError result, as a "
        "synchronous call gives) from other protocol errors",
        "a tool's timeout fails its task instead",
        says(*TOOL_TIMEOUT_TEXT[:2]),
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
        says(UNRESOLVED_DEPENDENCIES_TEXT),
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
        reads("serialize_server_result"),
    ),
    Reliance(
        "fastmcp.server.extensions:ServerExtension._bind",
        "raise the HTTP request cap before FastMCP builds its app",
        "requests over mcp's 4 MiB cap are refused",
        parameters("self", "server"),
    ),
    Reliance(
        "mcp.server.session:ServerSession.__init__",
        "see a caller's notifications/cancelled for a durable synchronous call",
        "every durable synchronous call fails",
        reads("_request_outbound"),
    ),
    Reliance("mcp.server.streamable_http_manager:StreamableHTTPSessionManager.__init__", *_GET_STREAM,
             reads("_server_instances")),
    Reliance("mcp.server.streamable_http:StreamableHTTPServerTransport.__init__", *_GET_STREAM,
             reads("_request_streams")),
    Reliance("fastmcp.server.context:Context._input_response_params", "see a 2025-11-25 tools/call's `task`",
             "a 2025-11-25 client's tools/call with `task` runs inline, not as a task", reads("_srctx")),
    Reliance(
        "mcp.server.session:ServerSession.__init__",
        "ask a 2025-11-25 task's question once on each session that reads it",
        "a question read on several sessions is asked on one of them only",
        reads("_connection"),
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
        "fastmcp.server.server:FastMCP",
        "serve subscriptions/listen on the server's low-level server (FastMCP's MethodBinding refuses "
        "a spec method), so task statuses are pushed, and answer a 2025-11-25 task-augmented "
        "tools/call from its middleware",
        "no server can be created with the extension",
        _has_instance_attributes("_mcp_server"),
    ),
    Reliance("fastmcp.server.http:StreamableHTTPASGIApp", "find the MCP route to raise its request cap",
             "HTTP servers cannot start"),
    Reliance("fastmcp.server.auth.middleware:RequireAuthMiddleware",
             "find the MCP route behind its auth guard", "HTTP servers with auth cannot start"),
    Reliance("mcp.server.transport_security:RequestBodyLimitMiddleware", "raise mcp's request size cap",
             "HTTP servers cannot start"),
)
