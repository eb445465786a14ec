"""Durable synchronous calls: a plain `tools/call` served by a task workflow.

A client that did not opt in to tasks still gets one `tools/call` answer, but with
`sync_calls="workflow"` the tool runs on the workers exactly as a task would (same
workflow, policy, caller snapshot and scope), under an `mcp-call/<scope>/<id>`
workflow id with memo `kind: call`. The server long-polls the workflow's result and
answers with the result an inline call would have sent. A caller that withdraws the
request cancels the workflow; a server that dies leaves it to finish on its own. A tool
with `execution_policy(rejoin=True)` is the exception: its call is named by its caller and
validated arguments, nobody cancels it, and a repeat joins it or gets the result nobody
received yet, once. Such a call still running at its deadline (`sync_call_answer_after`)
answers its request with an `isError` result that tells the caller to call again, before the
caller's own request timeout cuts it; the repeat joins the call. A
workflow that closes without a result (the TTL of an unanswered question, a cancel, a
terminate, a reset) ends the call at once, with an error that names the cause.
While it waits, the server relays the body's log messages, progress and questions to
the caller (`_relay.py`). On a 2026-07-28 connection a tool's ask (`InputRequiredResult`)
ends the run and goes back to the caller, as an inline call's does, and the caller's
next call carries the answers.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from dataclasses import asdict, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, TerminatedError, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import cancel_requested, validate_call
from fastmcp_temporal._policy import ExecutionPolicy
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._creation import StartedWorkflow, continuation_of, start_tool_workflow
from fastmcp_temporal.server._plan import CallPlan
from fastmcp_temporal.server._relay import AskNotCarried, CallerChannel, Relay, per_request_session
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from fastmcp_temporal.workflows.models import KIND_MEMO, REFUSED_ASK, WORKFLOW_NAME, TaskOutcome

if TYPE_CHECKING:
    from fastmcp.server.context import Context

logger = logging.getLogger("fastmcp_temporal")

# How long a withdrawn call may spend telling Temporal to cancel its workflow (or a delivered one to delete it).
_CANCEL_DEADLINE = 10
# Why a rejoinable call's last run was terminated before it started (`_mark_delivered`).
DELIVERED = "The call's result was delivered to its caller: the next call with the same arguments runs the tool again."
# Temporal's clock, by which a completed rejoinable call's age is read.
_clock = TemporalClock()


async def call_through_workflow(
    backend: Backend, plan: CallPlan, arguments: dict[str, Any] | None, context: Context
) -> ToolResult:
    """Run the call as a workflow and answer as the inline call would."""
    channel = CallerChannel.of(context)
    if plan.policy.rejoin:
        return await _rejoinable_call(backend, plan, arguments, context, channel)
    started = await _started(backend, plan, arguments, context, channel, None)
    relay = Relay(backend, context, channel, started.input_bytes)
    try:
        outcome = await _outcome(started.handle, cancel_requested(context), relay)
    except AskNotCarried as refused:
        return InputRequiredToolResult(refused.ask)  # FastMCP refuses it as it refuses an inline ask
    assert outcome is not None  # no deadline: followed to the end
    return _answer(outcome, started.handle.id, backend.settings.task_ttl)


async def _rejoinable_call(
    backend: Backend,
    plan: CallPlan,
    arguments: dict[str, Any] | None,
    context: Context,
    channel: CallerChannel,
) -> ToolResult:
    """A call a repeat of the same caller joins while it runs, or gets the result of once, if nobody
    got it yet; its leg collects progress for whichever request asks for it."""
    call = _rejoinable_call_id(backend, plan, arguments, context)
    ttl = backend.settings.task_ttl
    if (undelivered := await _undelivered_result(backend, call, ttl)) is not None:
        run, outcome = undelivered
    else:
        started = await _started(backend, plan, arguments, context, replace(channel, progress=True), call)
        relay = Relay(backend, context, channel, started.input_bytes, current_round_only=True)
        answer_after = _answer_after(backend, plan.policy, context)
        try:
            outcome = await _outcome(started.handle, None, relay, shared=True, answer_after=answer_after)
        except AskNotCarried as refused:
            return InputRequiredToolResult(refused.ask)
        if outcome is None:
            assert answer_after is not None
            return still_running(plan.tool.name, relay.status, answer_after)
        run = relay.run or started.handle
    answer = _answer(outcome, run.id, ttl)
    if _replayable(outcome):
        await _mark_delivered(backend, run)  # the next equal call runs the tool again
    return answer


async def _started(
    backend: Backend,
    plan: CallPlan,
    arguments: dict[str, Any] | None,
    context: Context,
    channel: CallerChannel,
    call: str | None,
) -> StartedWorkflow:
    """The call's workflow, started (or, for a rejoinable `call`, joined while it runs).

    Shielded: a request withdrawn while Temporal starts the workflow gets the workflow
    cancelled in `_outcome`, instead of the start being abandoned with the workflow running.
    """
    with anyio.CancelScope(shield=True):
        return await start_tool_workflow(
            backend, plan, arguments, context, kind="call", relay=channel, call_id=call
        )


def _rejoinable_call_id(
    backend: Backend, plan: CallPlan, arguments: dict[str, Any] | None, context: Context
) -> str:
    """The call's id: its tool, its validated arguments, the round it answers (a 2026-07-28
    caller's answers, which make each round its own call), and who may join it. Bad arguments
    are refused here, as the start refuses them."""
    strict = context.fastmcp.strict_input_validation
    validated = validate_call(plan.component, dict(arguments or {}), strict=strict)
    continuation = continuation_of(context)
    answers = asdict(continuation) if continuation is not None else None
    return backend.call_id(plan.component.key, validated, _joiner(backend, context), answers)


def _joiner(backend: Backend, context: Context) -> str:
    """Who may join the call under its scope tag: with auth, the tag says (every request of the
    caller); over stdio, the one client the process serves; otherwise the caller's MCP session,
    as anonymous callers share one tag (a 2026-07-28 connection is one request: never joined)."""
    if _caller_has_its_own_tag(backend, context):
        return ""
    return context.session_id


def _caller_has_its_own_tag(backend: Backend, context: Context) -> bool:
    return backend.caller_scope().tag != ANONYMOUS_SCOPE_TAG or context.transport == "stdio"


def _answer_after(backend: Backend, policy: ExecutionPolicy, context: Context) -> timedelta | None:
    """When a rejoinable call answers "call again": the tool's deadline, else the server's; None to
    wait for the end, and for a caller whose repeat could not join (without auth, a 2026-07-28
    connection or a stateless server's, where each request is its own session), which would be
    told to call again in vain."""
    deadline = policy.sync_call_answer_after
    if deadline is None:
        deadline = backend.settings.sync_call_answer_after
    if not deadline or not (_caller_has_its_own_tag(backend, context) or _session_outlives_request(context)):
        return None
    return deadline


def _session_outlives_request(context: Context) -> bool:
    request = context.request_context
    modern = request is not None and request.protocol_version in MODERN_PROTOCOL_VERSIONS
    return not modern and not per_request_session(context.session)


def still_running(tool: str, status: str | None, answer_after: timedelta) -> ToolResult:
    """The answer of a call still running at its deadline: what a model needs to get its result."""
    reported = f'Its last progress message: "{status}".' if status else "It has reported no progress yet."
    text = (
        f"The tool {tool} is still running: it has not finished within this request's "
        f"{answer_after.total_seconds():g} s, and it keeps running. {reported} To get its result, call "
        f"{tool} again with exactly the same arguments: that call joins the running one instead of starting "
        "it again, and answers with the result when the tool finishes, or with this message again if it "
        "is still running then."
    )
    content = [mcp_types.TextContent(type="text", text=text)]
    return ToolResult.from_mcp_result(mcp_types.CallToolResult(content=content, is_error=True))


async def _undelivered_result(
    backend: Backend, call: str, ttl: timedelta
) -> tuple[WorkflowHandle[Any, TaskOutcome], TaskOutcome] | None:
    """The rejoinable call `call`'s run and its outcome, if it completed within `ttl` (on Temporal's
    clock) with a result nobody received (a received one is forgotten): a repeat gets it. None
    when there is none, it runs (the start joins it), it closed without completing (cancelled,
    terminated, timed out) or with an error (never replayed): the repeat runs the tool again."""
    client = backend.client
    handle: WorkflowHandle[Any, TaskOutcome] = client.get_workflow_handle(
        workflow_id(backend.caller_scope().tag, call, "call"), result_type=TaskOutcome
    )
    try:
        description = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    await _clock.read_once(client)
    _clock.saw_description(description)
    ended_at = description.close_time
    if description.status != WorkflowExecutionStatus.COMPLETED or ended_at is None:
        return None
    if _clock.since_written(ended_at) > ttl:
        return None
    run = client.get_workflow_handle(handle.id, run_id=description.run_id, result_type=TaskOutcome)
    outcome = await run.result()
    return (run, outcome) if _replayable(outcome) else None


def _replayable(outcome: TaskOutcome) -> bool:
    """A result a repeat may be given: a tool's result that is not an error (nor its question's expiry)."""
    return (
        outcome.error is None
        and not outcome.expired
        and outcome.result is not None
        and not outcome.result.get("isError")
    )


async def _mark_delivered(backend: Backend, run: WorkflowHandle[Any, Any]) -> None:
    """Record that the call's result was delivered, so no repeat gets it again: a run of the same
    id after it, terminated before it could start (its start delayed), with `DELIVERED` as the
    reason. A repeat then finds the call's latest run closed without completing and runs the tool
    again. None is written when a new run of the call already runs (a repeat started it).
    Shielded: the answer is decided already."""
    with anyio.move_on_after(_CANCEL_DEADLINE, shield=True):
        try:
            marker = await backend.client.start_workflow(
                WORKFLOW_NAME,
                id=run.id,
                task_queue=backend.settings.task_queue,
                start_delay=backend.settings.task_ttl,
                memo={KIND_MEMO: "call"},
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                static_summary=DELIVERED,
            )
            await marker.terminate(reason=DELIVERED)
        except WorkflowAlreadyStartedError:
            pass
        except RPCError as exc:  # unrecorded: a repeat within task_ttl gets the result again
            logger.warning("Could not record that call %s was delivered: %s", run.id, exc)


async def _outcome(
    handle: WorkflowHandle[Any, TaskOutcome],
    withdrawn: anyio.Event | None,
    relay: Relay,
    *,
    shared: bool = False,
    answer_after: timedelta | None = None,
) -> TaskOutcome | None:
    """The workflow's result, relayed as it goes (None once `answer_after` passed: the workflow
    runs on); a withdrawn request cancels the workflow, unless it is `shared` (a rejoinable
    call, which runs on for the caller's repeat and which no caller cancels).

    mcp applies a caller's `notifications/cancelled` by cancelling the request (seen here as
    cancellation) or, on a connection that only signals it, by setting `withdrawn`: the
    workflow is cancelled either way, and its cancelled result then ends the call. So is
    an ask the caller cannot answer, or answered with an error.
    """
    watch = asyncio.create_task(_cancel_when_set(withdrawn, handle)) if withdrawn is not None else None
    try:
        return await relay.follow(handle, answer_after)
    except (anyio.get_cancelled_exc_class(), MCPError, AskNotCarried):
        if not shared:
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
