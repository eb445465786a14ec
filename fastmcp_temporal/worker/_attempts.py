"""A leg's body runs once per worker process, however many attempts Temporal starts for it.

A body that blocks the event loop past the heartbeat timeout makes Temporal give up
on its attempt and start another, which would run the body again. So the body runs
in its own asyncio task, registered by leg (`LegRun`): a later attempt on this worker
joins it instead of running it, and the abandoned attempt hands its outcome to the
workflow by the `leg_outcome` signal, which the workflow takes once.

An attempt whose keep step failed (`_outcome.kept_outcome`) fails, and its retry keeps
the same outcome again without running the body. A leg's registry entry goes when an
attempt returns, when the leg is cancelled, and `_UNCOLLECTED_KEPT` after the last
attempt that failed or was given up on, so no entry outlives its leg.

A local attempt (`execution_policy(leg="local")`) runs inside the workflow task of the
worker that scheduled it. It cannot heartbeat, and Temporal starts no other attempt while
it runs, so it joins nothing and is joined by nothing (`outcome_in_place`); the task's
cancel reaches the body as the local activity's cancel.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.common import RawValue
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError

from fastmcp_temporal.worker._body import stop_body
from fastmcp_temporal.worker._detached_signals import signal_detached
from fastmcp_temporal.worker._heartbeat import HeartbeatCadence, Ticker
from fastmcp_temporal.worker._leg_follow import following_close
from fastmcp_temporal.worker._outcome import kept_outcome
from fastmcp_temporal.worker._progress import LegProgress
from fastmcp_temporal.workflows.models import (
    LEG_OUTCOME_SIGNAL,
    LateLegOutcome,
    LegInput,
    LegOutcome,
    ToolCall,
)

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

logger = logging.getLogger(__name__)

_TASK_CLOSED = "The task closed while this leg ran (cancelled, expired or terminated); the leg stopped."


@dataclass
class LegRun:
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
    ) -> LegRun:
        """A leg whose outcome is known before any body runs."""
        body = asyncio.get_running_loop().create_future()
        body.set_result(outcome)
        return cls(tool, leg.call, body, progress, cadence, leg.leg)

    def keeping(self) -> asyncio.Future[LegOutcome | RawValue]:
        """The keep step of the body's outcome: the one in flight or done, or a new one after a failure."""
        if self.kept is None or (self.kept.done() and (self.kept.cancelled() or self.kept.exception())):
            self.kept = asyncio.create_task(kept_outcome(self.body, self.call, self.progress))
        return self.kept


LegKey = tuple[str, str, str]
_runs: dict[LegKey, LegRun] = {}
# A leg's outcome waits this long on this worker for a retry of the leg to collect it,
# after an attempt that Temporal gave up on or that failed to keep the outcome.
_UNCOLLECTED_KEPT = timedelta(minutes=10)


def this_leg() -> LegKey:
    """The key of the running attempt's leg, the same for all its attempts."""
    info = activity.info()
    return info.workflow_id, info.workflow_run_id, info.activity_id


def earlier_run(key: LegKey) -> LegRun | None:
    """The body an earlier attempt of the leg started here, which this attempt joins, if any."""
    run = _runs.get(key)
    if run is not None:
        logger.info("Attempt %d of a %r leg takes the outcome of its earlier attempt", activity.info().attempt, run.tool)
        _disarm(run)
    return run


def registered(key: LegKey, run: LegRun) -> LegRun:
    """`run`, which later attempts of the leg join from now on."""
    _runs[key] = run
    return run


async def attempt_outcome(key: LegKey, run: LegRun) -> LegOutcome | RawValue:
    """The kept outcome, heartbeating until it comes. When Temporal gave up on this attempt
    meanwhile, what it returns reaches nobody: the outcome is signalled to the workflow instead."""
    try:
        outcome, late = await _attend(run, key)
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


async def outcome_in_place(run: LegRun) -> LegOutcome | RawValue:
    """The kept outcome for a local attempt: no heartbeats, no joining, nothing delivered late."""
    try:
        return await asyncio.shield(run.keeping())
    except asyncio.CancelledError:
        await _stop(run)
        raise


async def _attend(run: LegRun, key: LegKey) -> tuple[LegOutcome | RawValue, bool]:
    """Heartbeat until the body's outcome; whether Temporal gave up on this attempt meanwhile.

    A real cancel (the task's, or the worker's shutdown) cancels the body; an attempt
    Temporal abandoned keeps waiting, so the body's work is not lost. A task that closed
    meanwhile (its cancel closes it without waiting for the leg) ends the attempt with a
    benign error, which the SDK logs at DEBUG: nothing failed, and nobody takes the outcome.
    The attempt hears of that close from a long poll (`_leg_follow`) and stops the body at
    once; it then records a heartbeat, whose answer at the SDK's next send ends the attempt
    as Temporal's cancel (so the SDK reports nothing for an attempt Temporal forgot).
    """
    closed = asyncio.Event()

    def stop_at_close() -> None:
        closed.set()
        stop_body(run.body)

    async with Ticker(run.tool, run.progress, run.cadence).running() as ticker, following_close(stop_at_close):
        try:
            outcome, abandoned = await _outcome_of(run, ticker)
        except asyncio.CancelledError:
            await _stop(run)
            _forget(key, run)
            if closed.is_set() and not activity.is_cancelled():
                await _temporal_cancel(ticker)
            if _task_closed():
                raise ApplicationError(_TASK_CLOSED, category=ApplicationErrorCategory.BENIGN) from None
            raise
    return outcome, abandoned or ticker.timed_out


async def _temporal_cancel(ticker: Ticker) -> None:
    """Wait for Temporal's cancel of an attempt whose task closed: the answer to the heartbeat
    recorded now, which the SDK sends at its window's end (or give up after two windows)."""
    ticker.record()
    try:
        await asyncio.sleep(2 * ticker.sent_within)
    except asyncio.CancelledError:
        return
    raise ApplicationError(_TASK_CLOSED, category=ApplicationErrorCategory.BENIGN)


def _task_closed() -> bool:
    """Whether Temporal stopped this attempt because it no longer knows it, with the worker up: its
    task closed (the ticker distinguishes a timed-out attempt before this is asked)."""
    details = activity.cancellation_details()
    return details is not None and details.not_found and not activity.is_worker_shutdown()


async def _stop(run: LegRun) -> None:
    """Cancel the body and its keep step for the leg's own cancel (not the tool's); wait until they stop."""
    stop_body(run.body)
    if run.kept is not None:
        run.kept.cancel()
    await asyncio.wait([future for future in (run.body, run.kept) if future is not None])


async def _outcome_of(run: LegRun, ticker: Ticker) -> tuple[LegOutcome | RawValue, bool]:
    """The kept outcome, and whether Temporal abandoned this attempt while waiting for it.

    Temporal tells an attempt it no longer knows ("not found") both when its heartbeat
    timed out and when the task closed; only the ticker can distinguish the two.
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

    The signal is sent from a task detached from the attempt, which Temporal may cancel any moment.
    """
    converter = activity.client().data_converter
    signal_detached(lambda handle: _signal(handle, converter, leg, outcome))


async def _signal(
    handle: WorkflowHandle[Any, Any], converter: DataConverter, leg: int, outcome: LegOutcome | RawValue
) -> None:
    if isinstance(outcome, RawValue):  # already stored outside history: the signal stores it by reference
        (outcome,) = await converter.decode([outcome.payload], [LegOutcome])
    try:
        await handle.signal(LEG_OUTCOME_SIGNAL, LateLegOutcome(leg, outcome))
    except RPCError as exc:
        logger.info("The task moved on before its late leg outcome arrived (%s)", exc.message)


def _forget(key: LegKey, run: LegRun) -> None:
    _disarm(run)
    if _runs.get(key) is run:
        del _runs[key]


def _forget_unless_retried(key: LegKey, run: LegRun) -> None:
    """After a failed attempt: forget the leg now if it was the last, else once no retry came for it."""
    info = activity.info()
    most = info.retry_policy.maximum_attempts if info.retry_policy else 0
    if most and info.attempt >= most:
        _forget(key, run)
    else:
        _expire(key, run)


def _expire(key: LegKey, run: LegRun) -> None:
    """Forget the leg `_UNCOLLECTED_KEPT` from now, unless a retry joins it first."""
    _disarm(run)
    run.expiry = asyncio.get_running_loop().call_later(_UNCOLLECTED_KEPT.total_seconds(), _forget, key, run)


def _disarm(run: LegRun) -> None:
    if run.expiry is not None:
        run.expiry.cancel()
        run.expiry = None
