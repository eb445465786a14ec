"""Tasks no worker runs: what the servers do for them that no worker can.

A task no worker moves (`connection/_stall.py` distinguishes them) stays RUNNING in
Temporal for good: its answers are never applied, its cancel never runs, and its TTL
timer fires with no worker to end it.

For a stalled task the servers do what no worker can: a `tasks/cancel` terminates the
workflow (`CANCELLED_REASON`), and a read past its TTL timer terminates it
(`EXPIRED_REASON`) and answers as an expired task does. A cancel so closes any task
within `STALL_GRACE`: one whose workflow task has failed before (every attempt may fail,
so the cancel may never be processed) or waits past the grace is ended at once, and one
whose workflow task still waits for a worker when the grace is over is ended then. Reads
and `tasks show` distinguish these terminations from an operator's by their reason. A
healthy task never pays for this: only a stalled one has its history read, once per
workflow task it waits on and once more when its TTL timer fires.

Every age here is on Temporal's clock (`TemporalClock`), never the local one: a server
whose clock runs ahead would otherwise see a workflow task a worker is about to take as
waiting past the grace.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingWorkflowTaskState
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal.connection._stall import STALL_GRACE, failed_before, newest_events_first, stalled
from fastmcp_temporal.connection._temporal_clock import TemporalClock

EXPIRED_REASON = "Expired: its TTL passed while no worker could run the task, so a server ended it."
CANCELLED_REASON = "Cancelled: no worker could run the task to cancel it, so a server ended it."
_CANCEL_CHECK_FIRST = 0.02
_CANCEL_CHECK_MAX = 1.0
_REMEMBERED_DEADLINES = 1_000


async def ttl_timer_fires_at(
    client: Client, description: WorkflowExecutionDescription, clock: TemporalClock
) -> datetime | None:
    """When the run's TTL timer (its only timer: a parked task's wait) fires or fired; None when
    no wait is pending (the last one was answered in time, or the task never parked)."""
    async for event in newest_events_first(client, description.id, description.run_id):
        clock.saw(event.event_time)
        if event.event_type == EventType.EVENT_TYPE_TIMER_CANCELED:
            return None
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            started = event.event_time.ToDatetime(tzinfo=timezone.utc)
            return started + event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
    return None


class StalledTasks:
    """What a process does for tasks no worker runs: expire them past their TTL, close their cancels.

    Every age it computes is on Temporal's clock (`clock`), never the local one.
    """

    def __init__(self, client: Client, clock: TemporalClock) -> None:
        self._client = client
        self._clock = clock
        # The TTL timer of a stalled run, by (run id, when its waiting workflow task was scheduled,
        # history length): read again only when the timer fires (its event) or a worker moves it.
        self._fires_at: OrderedDict[tuple[str, int, int], datetime | None] = OrderedDict()

    async def expire_if_due(self, handle: WorkflowHandle[Any, Any], description: WorkflowExecutionDescription) -> bool:
        """End a stalled task whose TTL timer has fired; whether it did (the task reads as expired)."""
        await self._clock.read_once(self._client)
        self._clock.saw_description(description)
        if not stalled(description, self._clock.now()):
            return False
        raw = description.raw_description
        key = (description.run_id, raw.pending_workflow_task.scheduled_time.ToNanoseconds(),
               raw.workflow_execution_info.history_length)
        if key not in self._fires_at:
            self._fires_at[key] = await ttl_timer_fires_at(self._client, description, self._clock)
            while len(self._fires_at) > _REMEMBERED_DEADLINES:
                self._fires_at.popitem(last=False)
        fires_at = self._fires_at[key]
        if fires_at is None or fires_at > self._clock.now():
            return False
        fresh = await handle.describe()  # the description a read answers from may be an older copy
        self._clock.saw_description(fresh)
        if fresh.run_id != description.run_id or not stalled(fresh, self._clock.now()):
            return False
        await _terminate(handle, EXPIRED_REASON)
        return True

    async def close_cancelled(self, handle: WorkflowHandle[Any, Any]) -> bool:
        """After a cancel request: wait until the workflow has taken it up, or end the task when it
        cannot (its workflow task waits the grace for a worker, or has failed before) or has not
        within the grace; whether it ended the task."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STALL_GRACE.total_seconds()
        await self._clock.read_once(self._client)
        pause = _CANCEL_CHECK_FIRST
        while True:
            description = await handle.describe()
            self._clock.saw_description(description)
            raw = description.raw_description
            if description.status != Status.RUNNING:
                return False
            if not raw.HasField("pending_workflow_task"):
                if await self._cancel_seen(handle):
                    return False  # a worker has run the workflow past the cancel: it is closing
                await _terminate(handle, CANCELLED_REASON)  # its workflow task failed and waits to retry
                return True
            if cannot_take_cancel(description, self._clock.now(), out_of_time=loop.time() >= deadline):
                await _terminate(handle, CANCELLED_REASON)
                return True
            if loop.time() >= deadline:
                return False  # a worker has been running its first attempt all along (a long local leg)
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            pause = min(pause * 2, _CANCEL_CHECK_MAX)

    async def _cancel_seen(self, handle: WorkflowHandle[Any, Any]) -> bool:
        """Whether a workflow task completed after the cancel request (one failing waits for a retry)."""
        async for event in newest_events_first(self._client, handle.id, ""):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                return True
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
                return False
        return False


def cannot_take_cancel(description: WorkflowExecutionDescription, now: datetime, *, out_of_time: bool) -> bool:
    """Whether the task's pending workflow task will not bring its workflow the cancel: it failed
    before (every worker may fail it), waits past the grace, or still waits when the grace is over."""
    pending = description.raw_description.pending_workflow_task
    waiting = pending.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
    return failed_before(description) or stalled(description, now) or (out_of_time and waiting)


async def _terminate(handle: WorkflowHandle[Any, Any], reason: str) -> None:
    try:
        await handle.terminate(reason=reason)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:  # closed meanwhile: nothing left to end
            raise
