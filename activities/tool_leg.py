"""`run_tool_leg`: the activity that runs one leg of a FastMCP tool.

It runs in a worker that has entered the server's lifespan, so the tool sees the
same `lifespan_context`, dependencies and `Context` API as in the reference engine.
Before the body runs it restores the submitting caller (token, headers, session)
from the task's snapshot; it heartbeats on its own so a cancelled task reaches the
body as `CancelledError` and a dead worker's leg is retried elsewhere. It returns
only JSON: a converted result, a protocol error, or the requests of an ask; whatever
the body raises, `BaseException`s included, is such a result and never a retry. The
leg of a synchronous call (`sync_calls="workflow"`) answers as FastMCP's inline call
does: errors become the same `isError` text, and an ask is the call's result, unless the
caller's connection carries server-to-client requests: then the ask parks the workflow as a
task's does, and the waiting server relays it. Such a leg also collects the body's log
messages and progress for the caller (`worker/_notices.py`).

A body that blocks the event loop past the heartbeat timeout makes Temporal give up
on its attempt and start another, which would run the body again. So the body runs
in its own asyncio task, registered by leg: a later attempt on this worker joins it
instead of running it, and the abandoned attempt hands its outcome to the workflow
by the `leg_outcome` signal, which the workflow takes once.

A leg whose input was stored (arguments or answers of 256 KiB or more) gets a reference
to it, and reads it while it heartbeats; keeping the outcome (its size check, and storing
a large one in the payload store) is a step of its own after the body. Both wait for a
store that is away, heartbeating, until it answers or the leg's deadline comes
(`worker/_store_outage`): an outage spends no attempt and runs no body twice. An
attempt whose keep step failed otherwise fails, and its retry keeps the same outcome
again without running the body. A leg's registry entry goes when an attempt returns,
when the leg is cancelled, and `_UNCOLLECTED_KEPT` after the last attempt that failed
or was given up on, so no entry outlives its leg.

A local attempt (`execution_policy(leg="local")`) runs inside the workflow task of the
worker that scheduled it. It cannot heartbeat (its progress never reaches `tasks/get`,
its checkpoints stay in this process), and Temporal starts no other attempt while it
runs, so it runs the body directly, with none of the joining above; the task's cancel
reaches the body as the local activity's cancel.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import mcp_types
from fastmcp.exceptions import FastMCPError, ValidationError
from fastmcp.server.transforms.visibility import is_enabled
from fastmcp.tools.base import InputRequiredToolResult, Tool
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import (
    SnapshotDecryptionError,
    TaskContextSnapshot,
    inline_error_text,
    registered_component_for_key,
    snapshot_codec,
    tool_error_text,
    unresolved_dependencies_text,
)
from fastmcp_temporal._policy import policy_of
from fastmcp_temporal._wire import (
    call_tool_result_json,
    decode_answers,
    error_result_json,
    input_required_json,
    serialize_requests,
)
from fastmcp_temporal.connection._leg_inputs import StoredLegInput, fetch_leg_input
from fastmcp_temporal.worker._heartbeat import HeartbeatCadence, Ticker
from fastmcp_temporal.worker._leg_context import RunningLeg, leg_scope
from fastmcp_temporal.worker._loop_lag import timed_steps
from fastmcp_temporal.worker._metrics import label_leg
from fastmcp_temporal.worker._notices import LegNotices
from fastmcp_temporal.worker._outcome import keepable
from fastmcp_temporal.worker._progress import LegProgress, progress_scope
from fastmcp_temporal.worker._store_outage import until_store_answers
from fastmcp_temporal.workflows.arguments import Joined, is_joined
from fastmcp_temporal.workflows.models import (
    LEG_OUTCOME_SIGNAL,
    REFUSED_ASK,
    RUN_TOOL_LEG,
    LateLegOutcome,
    LegInput,
    LegOutcome,
    ToolCall,
    UnreadablePayload,
)

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from temporalio.client import WorkflowHandle

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
_TASK_CLOSED = "The task closed while this leg ran (cancelled, expired or terminated); the leg stopped."


MAX_INPUT_REQUESTS = 100
"""The most input requests one round may ask. Each is a key the workflow carries, a memo
field once answered and one `tasks/update` validation. At this many, a round's surfaced
keys fit the 16 KiB a payload leaves under Temporal's 2 MiB limits: in the memo event of
asks as large as `payload_limit` takes, and in the input of a run continued inside the round."""


def _too_many_requests(count: int) -> str:
    return (
        f"The tool asked for {count} input requests in one round; a task takes at most "
        f"{MAX_INPUT_REQUESTS} (MAX_INPUT_REQUESTS). Ask for several values in one form "
        "(one elicitation's requestedSchema holds many fields), or ask over several rounds."
    )


class SnapshotRestoreError(RuntimeError):
    """The caller's identity could not be restored and the task must not run without it."""


@dataclass
class _LegRun:
    """One execution of a leg's body in this process, which a retry of the same leg joins."""

    tool: str
    call: ToolCall
    body: asyncio.Future[LegOutcome]
    progress: LegProgress
    cadence: HeartbeatCadence
    leg: int
    kept: asyncio.Future[LegOutcome | RawValue] | None = None
    """The outcome as it will be kept: in flight or done, shared by the attempts until it fails."""
    expiry: asyncio.TimerHandle | None = None
    delivered_late: bool = False

    @classmethod
    def settled(
        cls, tool: str, leg: LegInput, outcome: LegOutcome, progress: LegProgress, cadence: HeartbeatCadence
    ) -> _LegRun:
        """A leg whose outcome is known before any body runs."""
        body = asyncio.get_running_loop().create_future()
        body.set_result(outcome)
        return cls(tool, leg.call, body, progress, cadence, leg.leg)

    def keeping(self) -> asyncio.Future[LegOutcome | RawValue]:
        """The keep step of the body's outcome: the one in flight or done, or a new one after a failure."""
        if self.kept is None or (self.kept.done() and (self.kept.cancelled() or self.kept.exception())):
            self.kept = asyncio.create_task(_kept_outcome(self.body, self.call, self.progress))
        return self.kept


_LegKey = tuple[str, str, str]
_runs: dict[_LegKey, _LegRun] = {}
_deliveries: set[asyncio.Task[None]] = set()
_cancelled_bodies: weakref.WeakSet[asyncio.Future[LegOutcome]] = weakref.WeakSet()
# A leg's outcome waits this long on this worker for a retry of the leg to collect it,
# after an attempt that Temporal gave up on or that failed to keep the outcome.
_UNCOLLECTED_KEPT = timedelta(minutes=10)


class ToolLegActivities:
    """Activities bound to the root server whose tools they run."""

    def __init__(self, server: FastMCP, cadence: HeartbeatCadence | None = None) -> None:
        self._server = server
        self._cadence = cadence or HeartbeatCadence()

    @activity.defn(name=RUN_TOOL_LEG)
    async def run_tool_leg(self, leg: RawValue) -> LegOutcome | RawValue | UnreadablePayload:
        """Run the leg's body once per process, however many attempts Temporal starts for it.

        An attempt first joins a body of its leg already running or finished here (Temporal
        retried it because the body blocked the event loop past the heartbeat timeout), and
        runs the body itself only when there is none. A local attempt runs the body in place.
        `leg` is a `LegInput`, or the reference to one in the payload store; a stored input
        the store lost is handed back, and the workflow ends the task with the reason.
        """
        info = activity.info()
        progress = LegProgress.resumed(_previous_attempt())
        if info.is_local:
            local_input = await self._input(leg, None)
            if isinstance(local_input, UnreadablePayload):
                return local_input
            label_leg(local_input.call.component_key)
            return await _outcome_in_place(await self._start(local_input, progress))
        key = (info.workflow_id, info.workflow_run_id, info.activity_id)
        run = _runs.get(key)
        if run is None:
            leg_input = await self._input(leg, progress)
            if isinstance(leg_input, UnreadablePayload):
                return leg_input
            run = _runs[key] = await self._start(leg_input, progress)
        else:
            logger.info("Attempt %d of a %r leg takes the outcome of its earlier attempt", info.attempt, run.tool)
            _disarm(run)
        label_leg(run.call.component_key)
        try:
            outcome, late = await self._attend(run, key)
        except Exception:
            _forget_unless_retried(key, run)
            raise
        if not late:
            _forget(key, run)
            return outcome
        if not run.delivered_late:
            run.delivered_late = True
            _deliver_late(run.leg, outcome)
        _expire(key, run)
        return outcome

    async def _input(self, leg: RawValue, progress: LegProgress | None) -> LegInput | UnreadablePayload:
        """The leg's input as Temporal delivered it, or read from the store first; with the call's
        arguments put back when the workflow joined them to it undecoded (`workflows/arguments`)."""
        payload = leg.payload
        if (reference := StoredLegInput.of(payload)) is not None:
            payload = await self._fetched(reference, progress)
        converter = activity.payload_converter()
        if not is_joined(payload):
            return converter.from_payload(payload, LegInput)
        parts = converter.from_payload(payload, Joined)
        return replace(parts.leg, call=replace(parts.leg.call, arguments=parts.arguments))

    async def _fetched(self, reference: StoredLegInput, progress: LegProgress | None) -> Payload:
        """The stored input, decoded by the codec; read heartbeating `progress` (none for a local
        attempt), and waiting while the store is away."""
        converter = activity.client().data_converter
        fetch = partial(fetch_leg_input, converter, reference)
        if progress is None:
            payload = await until_store_answers(fetch, "reading its stored input", None)
        else:
            async with Ticker("(reading its input)", progress, self._cadence).running():
                payload = await until_store_answers(fetch, "reading its stored input", progress)
            # Decoding a big input holds the loop, as Temporal's own decode did before the first beat.
            activity.heartbeat(progress.details())
        if converter.payload_codec is None:
            return payload
        (decoded,) = await converter.payload_codec.decode([payload])
        return decoded

    async def _start(self, leg: LegInput, progress: LegProgress) -> _LegRun:
        """Start the body in its own asyncio task, so it outlives an attempt Temporal gave up on.

        A tool the server no longer has, or arguments it no longer accepts (it was
        redeployed while the task was parked or waiting for a retry), end the task here.
        """
        call = leg.call
        try:
            snapshot = _restore_snapshot(call.snapshot)
            component = await _deployed_component(self._server, call.component_key)
        except (MCPError, SnapshotRestoreError) as exc:
            failed = LegOutcome(error=_protocol_error(exc))
            return _LegRun.settled(call.component_key, leg, failed, progress, self._cadence)
        refusal = _refused_arguments(component, call.arguments, strict=self._server.strict_input_validation)
        if refusal is not None:
            refused = LegOutcome(result=error_result_json(refusal))
            return _LegRun.settled(component.name, leg, refused, progress, self._cadence)
        if call.relay_logs or call.relay_progress:
            progress.notices = LegNotices(progress=call.relay_progress)
        owner = await _fastmcp_private.resolve_owning_server(snapshot) or self._server
        running = RunningLeg(
            task_id=call.task_id,
            server=owner,
            origin_request_id=snapshot.origin_request_id,
            client_extensions=frozenset(call.client_extensions),
            input_responses=decode_answers(leg.input_responses),
            request_state=leg.request_state,
            notices=progress.notices,
        )
        with leg_scope(running), progress_scope(call.task_id, progress):
            body = asyncio.create_task(timed_steps(_run_component(component, owner, call), component.name))
        return _LegRun(component.name, call, body, progress, _tool_cadence(component, self._cadence), leg.leg)

    async def _attend(self, run: _LegRun, key: _LegKey) -> tuple[LegOutcome | RawValue, bool]:
        """Heartbeat until the body's outcome; whether Temporal gave up on this attempt meanwhile.

        A real cancel (the task's, or the worker's shutdown) cancels the body; an attempt
        Temporal abandoned keeps waiting, so the body's work is not lost. A task that closed
        meanwhile (its cancel closes it without waiting for the leg) ends the attempt with a
        benign error, which the SDK logs at DEBUG: nothing failed, and nobody takes the outcome.
        """
        async with Ticker(run.tool, run.progress, run.cadence).running() as ticker:
            try:
                outcome, abandoned = await _outcome_of(run, ticker)
            except asyncio.CancelledError:
                await _stop_body(run)
                _forget(key, run)
                if _task_closed():
                    raise ApplicationError(_TASK_CLOSED, category=ApplicationErrorCategory.BENIGN) from None
                raise
        return outcome, abandoned or ticker.timed_out


def _task_closed() -> bool:
    """Whether Temporal stopped this attempt because it no longer knows it, with the worker up: its
    task closed (the ticker tells a timed-out attempt apart before this is asked)."""
    details = activity.cancellation_details()
    return details is not None and details.not_found and not activity.is_worker_shutdown()


async def _outcome_in_place(run: _LegRun) -> LegOutcome | RawValue:
    """The kept outcome for a local attempt: no heartbeats, no joining, nothing delivered late."""
    try:
        return await asyncio.shield(run.keeping())
    except asyncio.CancelledError:
        await _stop_body(run)
        raise


async def _stop_body(run: _LegRun) -> None:
    """Cancel the body and its keep step for the leg's own cancel (not the tool's); wait until they stop."""
    _cancelled_bodies.add(run.body)
    running = [future for future in (run.body, run.kept) if future is not None]
    for future in running:
        future.cancel()
    await asyncio.wait(running)


async def _outcome_of(run: _LegRun, ticker: Ticker) -> tuple[LegOutcome | RawValue, bool]:
    """The kept outcome, and whether Temporal abandoned this attempt while waiting for it.

    Temporal tells an attempt it no longer knows ("not found") both when its heartbeat
    timed out and when the task closed; only the ticker can tell the two apart.
    """
    abandoned = False
    kept = run.keeping()
    while True:
        try:
            return await asyncio.shield(kept), abandoned
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            gone = details is not None and (details.not_found or details.timed_out)
            if kept.done() or activity.is_worker_shutdown() or not (gone and ticker.timed_out):
                raise
            abandoned = True


def _deliver_late(leg: int, outcome: LegOutcome | RawValue) -> None:
    """Signal the outcome to the workflow, whose attempt of this leg Temporal gave up on.

    The signal is sent apart from the attempt, which Temporal may cancel any moment.
    """
    info = activity.info()
    client = activity.client()
    handle = client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    delivery = asyncio.create_task(_signal(handle, client.data_converter, leg, outcome))
    _deliveries.add(delivery)
    delivery.add_done_callback(_deliveries.discard)


async def _signal(
    handle: WorkflowHandle[Any, Any], converter: DataConverter, leg: int, outcome: LegOutcome | RawValue
) -> None:
    if isinstance(outcome, RawValue):  # already stored outside history: the signal stores it by reference
        (outcome,) = await converter.decode([outcome.payload], [LegOutcome])
    try:
        await handle.signal(LEG_OUTCOME_SIGNAL, LateLegOutcome(leg, outcome))
    except RPCError as exc:
        logger.info("The task moved on before its late leg outcome arrived (%s)", exc.message)


def _forget(key: _LegKey, run: _LegRun) -> None:
    _disarm(run)
    if _runs.get(key) is run:
        del _runs[key]


def _forget_unless_retried(key: _LegKey, run: _LegRun) -> None:
    """After a failed attempt: forget the leg now if it was the last, else once no retry came for it."""
    info = activity.info()
    most = info.retry_policy.maximum_attempts if info.retry_policy else 0
    if most and info.attempt >= most:
        _forget(key, run)
    else:
        _expire(key, run)


def _expire(key: _LegKey, run: _LegRun) -> None:
    """Forget the leg `_UNCOLLECTED_KEPT` from now, unless a retry joins it first."""
    _disarm(run)
    run.expiry = asyncio.get_running_loop().call_later(_UNCOLLECTED_KEPT.total_seconds(), _forget, key, run)


def _disarm(run: _LegRun) -> None:
    if run.expiry is not None:
        run.expiry.cancel()
        run.expiry = None


async def _deployed_component(server: FastMCP, key: str) -> Tool:
    """The enabled task tool stored as `key`, or the reference's error for a key that does not
    resolve at re-entry (-32603), saying that the tool changed under the task."""
    try:
        component = await registered_component_for_key(server, key)
    except MCPError:
        component = None
    if component is None or not is_enabled(component):
        raise MCPError(code=mcp_types.INTERNAL_ERROR, message=_tool_gone(key))
    return component


def _tool_gone(key: str) -> str:
    name, _, version = key.partition(":")[2].rpartition("@")
    return (
        f"No task-enabled component found for {key!r}. This server no longer has"
        f" {_tool_label(name, version)} as an enabled task tool: it was removed, renamed, disabled, lost"
        " that version or task=True while the task was in flight. Keep a tool version deployed and"
        " enabled until its tasks have finished."
    )


def _refused_arguments(component: Tool, arguments: dict[str, Any], *, strict: bool) -> str | None:
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


def _tool_label(name: str, version: str | None) -> str:
    return f"tool {name!r}" + (f" version {version!r}" if version else "")


def _tool_cadence(component: Tool, default: HeartbeatCadence) -> HeartbeatCadence:
    """The worker's cadence, with the tool's own `execution_policy(heartbeat_interval=...)`."""
    interval = policy_of(component).heartbeat_interval
    return replace(default, interval=interval) if interval is not None else default


async def _kept_outcome(
    body: asyncio.Future[LegOutcome], call: ToolCall, progress: LegProgress
) -> LegOutcome | RawValue:
    """The body's outcome as it will be kept: size-checked and stored while the leg still heartbeats,
    waiting for a store that is away.

    A durable call's outcome also carries the notices its last heartbeat may have missed.
    """
    outcome = await asyncio.shield(body)
    if progress.notices is not None:
        outcome = replace(outcome, notices=progress.notices.window())
    converter = activity.client().data_converter
    return await until_store_answers(
        lambda: keepable(outcome, call, converter), "storing the tool's result", progress
    )


async def _run_component(component: Tool, owner: FastMCP, call: ToolCall) -> LegOutcome:
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
        return LegOutcome(error=_protocol_error(exc))
    except asyncio.CancelledError as exc:
        if _cancelled_by_us():
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


def _not_carried(ask: mcp_types.InputRequiredResult, carried: list[str] | None) -> bool:
    """Whether a handshake-era caller cannot answer the ask (`carried` None: a 2026-07-28 caller can)."""
    if carried is None:
        return False
    return not ask.input_requests or any(request.method not in carried for request in ask.input_requests.values())


def _refused_ask(tool: str, ask: mcp_types.InputRequiredResult) -> dict[str, Any]:
    """The error that fails a durable call whose caller cannot answer its tool's ask (`REFUSED_ASK`)."""
    methods = sorted({request.method for request in (ask.input_requests or {}).values()}) or ["state only"]
    message = (
        f"Tool {tool!r} asked its caller ({', '.join(methods)}), but the caller's connection cannot "
        "carry that request (a handshake-era client that did not declare the capability, or stateless "
        "HTTP); the call was refused as the same call inline is."
    )
    return {"code": mcp_types.INVALID_PARAMS, "message": message, "data": {REFUSED_ASK: input_required_json(ask)}}


def _raised(component: Tool, owner: FastMCP, exc: BaseException, synchronous: bool) -> LegOutcome:
    """What a synchronous call answers for an exception: the masked `isError` result."""
    logger.error("Task tool %r raised", component.name, exc_info=exc)
    error_text = inline_error_text if synchronous else tool_error_text
    return LegOutcome(result=error_result_json(error_text(owner, component.name, exc)))


def _cancelled_by_us() -> bool:
    """Whether the leg cancelled the body (the task's cancel or the worker's shutdown)."""
    return asyncio.current_task() in _cancelled_bodies


def _unresolved_dependency_error(parameter: str) -> dict[str, Any]:
    """The reference's protocol error when a `Depends(...)` fails: Docket's exception group."""
    return {"code": mcp_types.INTERNAL_ERROR, "message": unresolved_dependencies_text(parameter)}


def _restore_snapshot(encoded: str) -> TaskContextSnapshot:
    """Decode the caller's snapshot and apply it, failing closed when encryption is on.

    Every leg applies a snapshot, an empty one when the stored one is unreadable
    and unprotected, so nothing from an earlier task on this worker leaks in.
    """
    codec = snapshot_codec()
    try:
        snapshot = TaskContextSnapshot.from_json(codec.decode(encoded))
    except SnapshotDecryptionError as exc:
        raise SnapshotRestoreError(
            "The task's caller snapshot could not be decrypted; every server and worker "
            "on this task queue must share the same FASTMCP_TASKS_ENCRYPTION_KEY."
        ) from exc
    except Exception as exc:
        if codec.protected:
            raise SnapshotRestoreError(f"The task's caller snapshot is unreadable: {exc}") from exc
        logger.warning("Unreadable task snapshot; running the task anonymously", exc_info=True)
        snapshot = TaskContextSnapshot()
    _fastmcp_private.apply_snapshot(snapshot)
    return snapshot


def _previous_attempt() -> dict[str, Any] | None:
    """What a crashed earlier attempt of this leg last heartbeated."""
    details = activity.info().heartbeat_details
    return details[0] if details and isinstance(details[0], dict) else None


def _input_required(value: Any) -> mcp_types.InputRequiredResult | None:
    if isinstance(value, InputRequiredToolResult):
        return value.input_required
    if isinstance(value, mcp_types.InputRequiredResult):
        return value
    return None


def _protocol_error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, MCPError):
        return {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}
    return {"code": mcp_types.INTERNAL_ERROR, "message": str(exc)}
