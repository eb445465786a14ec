"""One followed task's state, and the decisions reads make from it.

A `Watch` holds what one `describe()` found (`Known`), the last history event that changes
an answer (`saw`), and what reads last answered (`shown`); from these alone it decides
whether what it knows still answers a read (`current`), how often a held read re-reads the
task (`recheck`), whether a read is held (`hold_quick_reread`), and when nobody reads it any
more (`idle`). Every decision is a function of that state and the time passed in, with no
I/O, so the schedule is unit-tested without a Temporal server (tests/test_known.py);
`_known.KnownTasks` feeds it from long polls and `describe()`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, PendingWorkflowTaskState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecutionDescription, WorkflowHandle

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.workflows.models import TaskMemo, TaskOutcome

# A followed task no read asked about for this long (and three of its poll intervals)
# is let go when its long poll next returns.
_WATCH_IDLE = timedelta(minutes=1)
# A running leg's progress, unchanged for a while, is re-read once the known copy is as
# old as the time it had stood still: at least this, at most `progress_refresh`.
_PROGRESS_RECHECK_MIN = timedelta(seconds=1)
# While a new task's close alone is followed, a held read first re-reads it this long after
# it began: most of a burst's queued tasks close before, and a tool that asks at once shows
# its ask by then.
_CLOSE_ONLY_FIRST_RECHECK = timedelta(milliseconds=500)
# Then what a `describe()` found answers, and a held read re-reads the task, this long
# after it while the task runs, so an ask shows within it; while it waits for a worker (a
# burst's queue), the time doubles with each re-read up to `read_recheck`.
_CLOSE_ONLY_RECHECK = timedelta(milliseconds=250)
# A read this soon after a `working` answer is a client waiting on the task (see `reread_hold`).
_QUICK_REREAD = timedelta(milliseconds=100)
# Events that change nothing a read answers: workflow tasks, a leg's progress through
# its attempt, timers but their firing (a parked task's TTL, which reads end when no worker
# does: `_stalled`), markers, and answers (their memo upsert says when they apply).
_UNSEEN_BY_READS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_TIMER_CANCELED,
        EventType.EVENT_TYPE_MARKER_RECORDED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    }
)

Shown = tuple[TaskStatus, str | None, frozenset[str]]  # what a caller can tell apart between answers
_CREATED: Shown = ("working", None, frozenset())


@dataclass(frozen=True)
class Timing:
    """The wire's timing fields of a task, fixed when it was created."""

    created_at: str
    ttl_ms: int
    poll_interval_ms: int


@dataclass(frozen=True)
class Known:
    """A task as one `describe()` found it, and when (event-loop time)."""

    description: WorkflowExecutionDescription
    memo: TaskMemo
    read_at: float
    progress_since: float  # since when its legs' heartbeat details have read the same

    @property
    def events(self) -> int:
        return self.description.raw_description.workflow_execution_info.history_length

    @property
    def progress(self) -> bytes | None:
        """The running legs' heartbeat details; None when no leg runs (nothing can change unseen)."""
        pending = self.description.raw_description.pending_activities
        return b"".join(leg.heartbeat_details.SerializeToString() for leg in pending) if pending else None


@dataclass
class Watch:
    """A task this server follows by a long poll of its history (`_known.KnownTasks.follow`).

    `known` answers reads while the poll has seen no event past it that changes an
    answer, and, when a leg runs, while its progress is fresh enough; a young task's
    reads wait for a change from what reads last answered (`shown`) until `hold_until`.
    While the poll waits for the close alone (`close_only`), other events go unseen, so
    `known` answers for `close_only_recheck` at most (see `_CLOSE_ONLY_FIRST_RECHECK`).
    """

    handle: WorkflowHandle[Any, TaskOutcome]
    timing: Timing
    last_read: float
    run_id: str = ""  # the run followed; learned from its first event when not given
    changed: int = 0  # the last history event that changes what a read answers
    leg_scheduled: tuple[int, float] = (0, 0.0)  # the last leg's schedule event, and when it was seen
    close_only: bool = False
    close_only_recheck: float = _CLOSE_ONLY_FIRST_RECHECK.total_seconds()
    known: Known | None = None
    hold_until: float = 0.0
    shown: Shown = _CREATED
    answered_at: float = float("-inf")  # when a read last answered it
    follow: asyncio.Task[None] | None = None
    read_history: asyncio.Event = field(default_factory=asyncio.Event)  # its first page has arrived
    change: asyncio.Future[None] | None = None  # resolved by the next event that changes an answer

    async def first_page(self) -> None:
        """Wait for the first page of history (a request that does not wait), unless the watch ended."""
        if self.read_history.is_set() or self.follow is None:
            return
        arrived = asyncio.ensure_future(self.read_history.wait())
        await asyncio.wait([arrived, self.follow], return_when=asyncio.FIRST_COMPLETED)
        arrived.cancel()

    def current(self, now: float, progress_refresh: float, recheck: float) -> Known | None:
        """The known task, unless a change came after it or its progress is due a re-read."""
        known = self.known
        if known is None or known.events < self.changed or known.description.run_id != self.run_id:
            return None
        if self.close_only and now - known.read_at >= recheck:
            return None
        leg_event, leg_seen_at = self.leg_scheduled
        if leg_event > known.events and now - leg_seen_at >= _PROGRESS_RECHECK_MIN.total_seconds():
            return None  # a leg began after the known copy: its progress is due a first read
        if known.progress is not None and now - known.read_at >= _progress_age(known, progress_refresh):
            return None
        return known

    def learned(
        self, description: WorkflowExecutionDescription, memo: TaskMemo, read_at: float
    ) -> None:
        """What a `describe()` started at `read_at` found; while the close alone is followed, it
        answers for `close_only_recheck`, which it sets anew."""
        self.known = _known(description, memo, read_at, self.known)
        if self.close_only:
            self.close_only_recheck = _close_only_recheck(self.close_only_recheck, description)

    def saw(self, event: HistoryEvent, now: float) -> None:
        """Note what a history event changes for reads."""
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self.leg_scheduled = (event.event_id, now)
        elif event.event_type not in _UNSEEN_BY_READS:
            self.changed = event.event_id
            if self.change is not None and not self.change.done():
                self.change.set_result(None)

    def next_change(self) -> asyncio.Future[None]:
        """A future the next event that changes an answer resolves (never, while `close_only`)."""
        if self.change is None or self.change.done():
            self.change = asyncio.get_running_loop().create_future()
        return self.change

    def idle(self, now: float) -> bool:
        interval = self.timing.poll_interval_ms / 1000
        return now - self.last_read > max(_WATCH_IDLE.total_seconds(), 3 * interval)

    def recheck(self, read_recheck: float) -> float:
        """How often a held read re-reads the task; while the close alone is followed, how long
        what the watch knows answers."""
        return min(read_recheck, self.close_only_recheck) if self.close_only else read_recheck

    def hold_quick_reread(self, now: float, reread_hold: float) -> None:
        """Hold a read that comes right after a `working` answer (the creation's among them): its
        client is waiting on the task."""
        if self.shown[0] == "working" and now - self.answered_at < _QUICK_REREAD.total_seconds():
            self.hold_until = max(self.hold_until, now + reread_hold)

    def record_shown(self, answer: GetTaskResult, now: float) -> None:
        """What a read was shown at `now`: later held reads wait for a change from this."""
        self.shown, self.answered_at = shown_of(answer), now

    def differs(self, answer: GetTaskResult) -> bool:
        """Whether a caller can tell `answer` apart from what reads last got."""
        return shown_of(answer) != self.shown


def _close_only_recheck(previous: float, description: WorkflowExecutionDescription) -> float:
    """How long what a `describe()` found answers while the close alone is followed:
    `_CLOSE_ONLY_RECHECK` while the task runs (an ask may come at any moment), doubling while
    it waits for a worker (capped by `read_recheck`)."""
    raw = description.raw_description
    running = raw.pending_workflow_task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
    running = running or any(
        leg.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for leg in raw.pending_activities
    )
    return _CLOSE_ONLY_RECHECK.total_seconds() if running else previous * 2


def _progress_age(known: Known, progress_refresh: float) -> float:
    """How old known progress may be when read: as old as it had stood still, within bounds."""
    still = known.read_at - known.progress_since
    return min(max(still, _PROGRESS_RECHECK_MIN.total_seconds()), progress_refresh)


def _known(
    description: WorkflowExecutionDescription, memo: TaskMemo, read_at: float, before: Known | None
) -> Known:
    """What a `describe()` started at `read_at` found, carrying over since when progress stood still."""
    known = Known(description, memo, read_at, progress_since=read_at)
    if before is not None and before.progress == known.progress and before.read_at <= read_at:
        return replace(known, progress_since=before.progress_since)
    return known


def shown_of(answer: GetTaskResult) -> Shown:
    """What a caller can tell apart between two answers."""
    return answer.status, answer.status_message, frozenset(answer.input_requests or ())


