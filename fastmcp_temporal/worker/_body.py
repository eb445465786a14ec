"""A leg's body: the tool's run, and what it returns or raises as the leg's outcome.

The outcome is only JSON: a converted result, a protocol error, or the requests of an
ask. Whatever the body raises, `BaseException`s included, is such an outcome and never
a retry; only the leg's own cancel of its body (`stop_body`: the task's cancel, the
worker's shutdown) ends it without one. The body of a synchronous call
(`sync_calls="workflow"`) answers as FastMCP's inline call does: errors become the same
`isError` text, and an ask is the call's result, unless the caller's connection carries
server-to-client requests: then the ask parks the workflow as a task's does, and the
waiting server relays it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

import mcp_types
from fastmcp.exceptions import FastMCPError
from fastmcp.tools.base import InputRequiredToolResult, Tool
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import inline_error_text, tool_error_text, unresolved_dependencies_text
from fastmcp_temporal._task_json import (
    call_tool_result_json,
    error_result_json,
    input_required_json,
    serialize_requests,
)
from fastmcp_temporal.workflows.models import REFUSED_ASK, LegOutcome, ToolCall

if TYPE_CHECKING:
    from fastmcp import FastMCP

logger = logging.getLogger(__name__)

_STATE_ONLY_ERROR = (
    "A background task returned a state-only InputRequiredResult (request_state "
    "with no input_requests). Tasks cannot continue without asking the client "
    "something; include at least one input request, or run the tool synchronously."
)
_ELICIT_IN_A_CALL = (
    "ctx.elicit() cannot ask from a durable call (sync_calls=\"workflow\"): the tool runs on a worker, "
    "which does not hold the caller's connection. Ask with the guard pattern instead: return an "
    "InputRequiredResult (with input_requests) and read ctx.input_responses when the tool runs again; "
    "the call relays the question to its caller. Or serve the tool inline: "
    "@execution_policy(sync_calls=\"inline\")."
)

MAX_INPUT_REQUESTS = 100
"""The most input requests one round may ask. Each is a key the workflow carries, a memo
field once answered and one `tasks/update` validation. At this many, a round's surfaced
keys fit the 16 KiB a payload leaves under Temporal's 2 MiB limits: in the memo event of
asks as large as `payload_limit` takes, and in the input of a run continued inside the round."""

_stopped_bodies: weakref.WeakSet[asyncio.Future[LegOutcome]] = weakref.WeakSet()


def _too_many_requests(count: int) -> str:
    return (
        f"The tool asked for {count} input requests in one round; a task takes at most "
        f"{MAX_INPUT_REQUESTS} (MAX_INPUT_REQUESTS). Ask for several values in one form "
        "(one elicitation's requestedSchema holds many fields), or ask over several rounds."
    )


async def run_body(component: Tool, owner: FastMCP, call: ToolCall) -> LegOutcome:
    """Run the tool with the call's arguments; what it returned or raised, as the leg's outcome."""
    synchronous = call.synchronous
    try:
        value = await component.run(call.arguments)
    except FastMCPError as exc:
        if synchronous and _fastmcp_private.is_task_elicit_refusal(exc):
            return LegOutcome(result=error_result_json(_ELICIT_IN_A_CALL))
        return LegOutcome(result=error_result_json(str(exc)))
    except RuntimeError as exc:
        failed = _fastmcp_private.unresolved_dependency(exc)
        if failed is None:
            return _raised(component, owner, exc, synchronous)
        return LegOutcome(error=_unresolved_dependency_error(failed))
    except MCPError as exc:
        if _fastmcp_private.is_tool_timeout(component, exc):
            return LegOutcome(result=error_result_json(tool_error_text(owner, component.name, exc)))
        logger.exception("Task tool %r raised a protocol error", component.name)
        if synchronous and exc.error.code != MISSING_REQUIRED_CLIENT_CAPABILITY:
            return LegOutcome(result=error_result_json(inline_error_text(owner, component.name, exc)))
        return LegOutcome(error=protocol_error(exc))
    except asyncio.CancelledError as exc:
        if asyncio.current_task() in _stopped_bodies:
            raise
        return _raised(component, owner, exc, synchronous)
    except BaseException as exc:  # a tool's SystemExit or KeyboardInterrupt must not end the worker
        return _raised(component, owner, exc, synchronous)
    ask = _input_required(value)
    if ask is None:
        return LegOutcome(result=call_tool_result_json(component, value))
    if synchronous and _not_carried(ask, call.carried_asks):
        return LegOutcome(error=_refused_ask(component.name, ask))
    if synchronous and not (call.relay_asks and ask.input_requests):
        return LegOutcome(result=input_required_json(ask))  # the caller answers and calls again (SEP-2322)
    if not ask.input_requests:
        return LegOutcome(result=error_result_json(_STATE_ONLY_ERROR))
    if len(ask.input_requests) > MAX_INPUT_REQUESTS:
        return LegOutcome(result=error_result_json(_too_many_requests(len(ask.input_requests))))
    return LegOutcome(
        input_requests=serialize_requests(ask.input_requests),
        request_state=ask.request_state,
    )


def stop_body(body: asyncio.Future[LegOutcome]) -> None:
    """Cancel the body for the leg's own cancel (the task's, or the worker's shutdown): it raises
    the `CancelledError` instead of answering it as the tool's own."""
    _stopped_bodies.add(body)
    body.cancel()


def protocol_error(exc: Exception) -> dict[str, Any]:
    """The JSON-RPC error a leg's outcome carries for `exc`."""
    if isinstance(exc, MCPError):
        return {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}
    return {"code": mcp_types.INTERNAL_ERROR, "message": str(exc)}


def _not_carried(ask: mcp_types.InputRequiredResult, carried: list[str] | None) -> bool:
    """Whether a 2025-11-25-era caller cannot answer the ask (`carried` None: a 2026-07-28 caller can)."""
    if carried is None:
        return False
    return not ask.input_requests or any(request.method not in carried for request in ask.input_requests.values())


def _refused_ask(tool: str, ask: mcp_types.InputRequiredResult) -> dict[str, Any]:
    """The error that fails a durable call whose caller cannot answer its tool's ask (`REFUSED_ASK`)."""
    methods = sorted({request.method for request in (ask.input_requests or {}).values()}) or ["state only"]
    message = (
        f"Tool {tool!r} asked its caller ({', '.join(methods)}), but the caller's connection cannot "
        "carry that request (a 2025-11-25-era client that did not declare the capability, or stateless "
        "HTTP); the call was refused as the same call inline is."
    )
    return {"code": mcp_types.INVALID_PARAMS, "message": message, "data": {REFUSED_ASK: input_required_json(ask)}}


def _raised(component: Tool, owner: FastMCP, exc: BaseException, synchronous: bool) -> LegOutcome:
    """What a synchronous call answers for an exception: the masked `isError` result."""
    logger.error("Task tool %r raised", component.name, exc_info=exc)
    error_text = inline_error_text if synchronous else tool_error_text
    return LegOutcome(result=error_result_json(error_text(owner, component.name, exc)))


def _unresolved_dependency_error(parameter: str) -> dict[str, Any]:
    """The reference's protocol error when a `Depends(...)` fails: Docket's exception group."""
    return {"code": mcp_types.INTERNAL_ERROR, "message": unresolved_dependencies_text(parameter)}


def _input_required(value: Any) -> mcp_types.InputRequiredResult | None:
    if isinstance(value, InputRequiredToolResult):
        return value.input_required
    if isinstance(value, mcp_types.InputRequiredResult):
        return value
    return None
