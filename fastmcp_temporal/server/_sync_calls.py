"""Durable synchronous calls: a plain `tools/call` served by a task workflow.

A client that did not opt in to tasks still gets one `tools/call` answer, but with
`sync_calls="workflow"` the tool runs on the workers exactly as a task would (same
workflow, policy, caller snapshot and scope), under an `mcp-call/<scope>/<id>`
workflow id with memo `kind: call`. The server long-polls the workflow's result and
answers with the result an inline call would have sent. A caller that withdraws the
request cancels the workflow; a server that dies leaves it to finish on its own. A
workflow that closes without a result (the TTL of an unanswered question, a cancel, a
terminate, a reset) ends the call at once, with an error that names the cause.
While it waits, the server relays the body's log messages, progress and questions to
the caller (`_relay.py`). On a 2026-07-28 connection a tool's ask (`InputRequiredResult`)
ends the run and goes back to the caller, as an inline call's does, and the caller's
next call carries the answers.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp.shared.exceptions import MCPError
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError, TerminatedError
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import cancel_requested
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._creation import start_tool_workflow, task_component, tool_policy
from fastmcp_temporal.server._known import described
from fastmcp_temporal.server._relay import AskNotCarried, CallerChannel, Relay
from fastmcp_temporal.server._scope import workflow_id
from fastmcp_temporal.workflows.models import REFUSED_ASK, TaskOutcome

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.context import Context
    from fastmcp.tools.base import Tool

# How long a withdrawn call may spend telling Temporal to cancel its workflow.
_CANCEL_DEADLINE = 10


async def runs_as_workflow(settings: TemporalTasksSettings, server: FastMCP, tool: Tool) -> bool:
    """Whether a caller that did not opt in gets this tool through a workflow."""
    return ((await tool_policy(server, tool)).sync_calls or settings.sync_calls) == "workflow"


async def call_through_workflow(
    backend: Backend, tool: Tool, arguments: dict[str, Any] | None, context: Context
) -> ToolResult:
    """Run the call as a workflow and answer as the inline call would."""
    channel = CallerChannel.of(context)
    ttl = backend.settings.task_ttl
    call = None
    if (await tool_policy(context.fastmcp, tool)).rejoin:
        call = backend.call_id((await task_component(context.fastmcp, tool)).key, dict(arguments or {}))
    rejoin = call is not None
    ended = await _recently_completed(backend, call, ttl) if call is not None else None
    if ended is not None:
        handle, input_bytes = ended
    else:
        # Shielded: a request withdrawn while Temporal starts the workflow gets the workflow
        # cancelled in `_outcome`, instead of the start being abandoned with the workflow running.
        with anyio.CancelScope(shield=True):
            started = await start_tool_workflow(
                backend, tool, arguments, context, kind="call", relay=channel, call_id=call
            )
        handle, input_bytes = started.handle, started.input_bytes
    relay = Relay(backend, context, channel, input_bytes)
    try:
        withdrawn = None if rejoin else cancel_requested(context)
        outcome = await _outcome(handle, withdrawn, relay, cancel_when_withdrawn=not rejoin)
        return _answer(outcome, handle.id, ttl)
    except AskNotCarried as refused:
        return InputRequiredToolResult(refused.ask)  # FastMCP refuses it as it refuses an inline ask


async def _recently_completed(
    backend: Backend, call: str, ttl: timedelta
) -> tuple[WorkflowHandle[Any, TaskOutcome], int] | None:
    """The rejoinable call `call`'s workflow, if it completed within `ttl`, and its input's size: a
    repeat gets its outcome again. None when there is none, it runs (the start joins it), or it
    closed without completing (cancelled, terminated, timed out: the repeat runs the tool again)."""
    handle: WorkflowHandle[Any, TaskOutcome] = backend.client.get_workflow_handle(
        workflow_id(backend.caller_scope().tag, call, "call"), result_type=TaskOutcome
    )
    try:
        description, memo = await described(handle)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    ended_at = description.close_time
    completed = description.status == WorkflowExecutionStatus.COMPLETED
    if not completed or ended_at is None or ended_at + ttl < datetime.now(timezone.utc):
        return None
    return handle, memo.input_bytes


async def _outcome(
    handle: WorkflowHandle[Any, TaskOutcome],
    withdrawn: anyio.Event | None,
    relay: Relay,
    *,
    cancel_when_withdrawn: bool = True,
) -> TaskOutcome:
    """The workflow's result, relayed as it goes; a withdrawn request cancels the workflow
    (unless not `cancel_when_withdrawn`: a rejoinable call runs on for the caller's repeat).

    mcp applies a caller's `notifications/cancelled` by cancelling the request (seen here as
    cancellation) or, on a connection that only signals it, by setting `withdrawn`: the
    workflow is cancelled either way, and its cancelled result then ends the call. So is
    an ask the caller cannot answer, or answered with an error.
    """
    watch = asyncio.create_task(_cancel_when_set(withdrawn, handle)) if withdrawn is not None else None
    try:
        return await relay.follow(handle)
    except anyio.get_cancelled_exc_class():
        if cancel_when_withdrawn:
            await _cancel(handle)
        raise
    except (MCPError, AskNotCarried):
        await _cancel(handle)
        raise
    except WorkflowFailureError as exc:
        ended_by = await _ended_by(relay.run or handle, exc.cause)
        raise MCPError(code=mcp_types.INTERNAL_ERROR, message=ended_by) from None
    finally:
        if watch is not None:
            watch.cancel()


async def _cancel_when_set(withdrawn: anyio.Event, handle: WorkflowHandle[Any, TaskOutcome]) -> None:
    await withdrawn.wait()
    await _cancel(handle)


async def _cancel(handle: WorkflowHandle[Any, TaskOutcome]) -> None:
    with anyio.move_on_after(_CANCEL_DEADLINE, shield=True), suppress(RPCError):
        await handle.cancel()  # fails harmlessly when the workflow has just closed


async def _ended_by(run: WorkflowHandle[Any, Any], cause: BaseException | None) -> str:
    """Why the call's workflow closed without a result, as its close event says (`cause`); a
    terminated run the workflow's description says was reset, as a reset."""
    if isinstance(cause, CancelledError):
        how = "was cancelled (tasks/cancel, or an operator in Temporal)"
    elif isinstance(cause, TerminatedError):
        reset_to = await _reset_to(run)
        by = f"reset by an operator, who started it again as run {reset_to}" if reset_to else "terminated"
        how = f"was {by} (reason: {cause.message})"
    elif isinstance(cause, WorkflowTimeoutError):
        how = "timed out"
    else:
        how = f"failed ({cause})"
    return f"The call's workflow {run.id} {how} before the tool finished; call the tool again."


async def _reset_to(run: WorkflowHandle[Any, Any]) -> str:
    """The run a reset started in place of `run`; empty when it was not reset (or cannot be read now)."""
    try:
        return (await run.describe()).raw_description.workflow_extended_info.reset_run_id
    except RPCError:
        return ""


def _answer(outcome: TaskOutcome, call_workflow_id: str, ttl: timedelta) -> ToolResult:
    """The inline call's answer: its result, its ask, or its JSON-RPC error."""
    if outcome.expired:
        raise MCPError(
            code=mcp_types.INTERNAL_ERROR,
            message=(
                f"The tool's question expired: the caller did not answer within the call's task_ttl of "
                f"{ttl.total_seconds():g}s, so its workflow {call_workflow_id} ended; call the tool again."
            ),
        )
    if outcome.error is not None:
        error = outcome.error
        if (refused := (error.get("data") or {}).get(REFUSED_ASK)) is not None:
            return InputRequiredToolResult(mcp_types.InputRequiredResult.model_validate(refused))  # refused inline
        raise MCPError(code=error["code"], message=error["message"], data=error.get("data"))
    if outcome.result is None:
        raise MCPError(code=mcp_types.INTERNAL_ERROR, message="The call's workflow ended without a result.")
    if outcome.result.get("resultType") == "input_required":
        return InputRequiredToolResult(mcp_types.InputRequiredResult.model_validate(outcome.result))
    return ToolResult.from_mcp_result(mcp_types.CallToolResult.model_validate(outcome.result))
