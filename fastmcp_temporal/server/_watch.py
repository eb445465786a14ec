"""One task this server follows, and whether what it knows of the task still answers a read.

A `Watch` holds the last copy a `describe()` found (`_described.Known`), the last history event that
changes an answer (`saw`, or a change the feed listed: `fed_change`), and what reads last answered
(`shown`, when, and the interval that answer advertised). From these alone it decides whether the
copy still answers a read (`current`) and until when (`due`, by the road the task is heard on: its
legs' progress, `_described`; the feed's gaps, `_feed_gaps`; or, while only its close is followed,
`recheck`), how long a read may be held (`hold_for`, by the rules of `_holds`), and when nobody
reads the task any more (`idle`). Every decision is a function of that state and the time passed
in, with no I/O; `_watches.Watches` feeds it from its roads and `_known.KnownTasks` from reads.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, PendingWorkflowTaskState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecutionDescription, WorkflowHandle

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.server._described import Known, known_from, progress_due
from fastmcp_temporal.server._feed import Change
from fastmcp_temporal.server._feed_gaps import fed_due, newer, round_left
from fastmcp_temporal.server._holds import POLL_LOOP_SLACK, holdable
from fastmcp_temporal.workflows.models import PROGRESSED_SIGNAL, TaskMemo, TaskOutcome

# A followed task no read asked about for this long (and three of its poll intervals)
# is let go when its long poll next returns.
_WATCH_IDLE = timedelta(minutes=1)
# While a new task's close alone is followed, a held read first re-reads it this long after
# it began: most of a burst's queued tasks close before, and a tool that asks at once shows
# its ask by then.
_CLOSE_ONLY_FIRST_RECHECK = timedelta(milliseconds=500)
# Then what a `describe()` found answers, and a held read re-reads the task, this long
# after it while the task runs, so an ask shows within it; while it waits for a worker (a
# burst's queue), the time doubles with each re-read up to `read_recheck`.
_CLOSE_ONLY_RECHECK = timedelta(milliseconds=250)
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

Shown = tuple[TaskStatus, str | None, frozenset[str]]  # what a caller can distinguish between answers
_CREATED: Shown = ("working", None, frozenset())


@dataclass(frozen=True)
class Timing:
    """The wire's timing fields of a task, fixed when it was created."""

    created_at: str
    ttl_ms: int
    poll_interval_ms: int


@dataclass
class Watch:
    """A task this server follows by a long poll of its history, or through the change feed
    (`fed`; `_watches.Watches.follow`).

    `known` answers reads while the poll (or the feed: `fed_change`) has seen no change past it,
    and, when a leg runs, while its progress is fresh enough (`progress_due`); a fed copy also
    while nothing the feed cannot list is due (`due`).
    While the poll waits for the close alone (`close_only`), other events go unseen, so
    `known` answers for `close_only_recheck` at most (see `_CLOSE_ONLY_FIRST_RECHECK`).
    What reads were last shown (`shown`, at `answered_at`, advertising `advertised` seconds;
    `by_creation` while that was the creation's `working`) decides whether a read is held.
    """

    handle: WorkflowHandle[Any, TaskOutcome]
    timing: Timing
    last_read: float
    run_id: str = ""  # the run followed; learned from its first event when not given
    changed: int = 0  # the last history event that changes what a read answers
    leg_scheduled: tuple[int, float] = (0, 0.0)  # the last leg's schedule event, and when it was seen
    progressed_at: float = float("-inf")  # when a leg's last stamp of a new message was seen
    fed: bool = False  # followed through the change feed (`_feed_road`), not a long poll of its history
    close_only: bool = False
    close_only_recheck: float = _CLOSE_ONLY_FIRST_RECHECK.total_seconds()
    known: Known | None = None
    shown: Shown = _CREATED
    answered_at: float = float("-inf")  # when a read (or the creation) last answered it
    advertised: float = 0.0  # the poll interval that answer advertised, in seconds
    by_creation: bool = False
    follow: asyncio.Task[None] | None = None
    read_history: asyncio.Event = field(default_factory=asyncio.Event)  # its first page has arrived

    async def first_page(self) -> None:
        """Wait for the first page of history (a request that does not wait), unless the watch ended."""
        if self.read_history.is_set() or self.follow is None:
            return
        arrived = asyncio.ensure_future(self.read_history.wait())
        await asyncio.wait([arrived, self.follow], return_when=asyncio.FIRST_COMPLETED)
        arrived.cancel()

    def current(self, now: float, progress_refresh: float, read_recheck: float) -> Known | None:
        """The known task, unless a change came after it or it is due a re-read (`due`)."""
        known = self.known
        if known is None or known.events < self.changed or known.description.run_id != self.run_id:
            return None
        return None if now >= self.due(now, progress_refresh, read_recheck) else known

    def due(self, now: float, progress_refresh: float, read_recheck: float) -> float:
        """When what the watch knows stops answering reads, unless an event comes first (event-loop
        time), by the road it hears the task on: its progress, or on a long poll for the close alone its
        recheck, or through the feed what it cannot list (`_feed_gaps.fed_due`); a new task never read,
        from `now`."""
        if self.known is None:
            return now + self.recheck(read_recheck) if self.close_only else now
        progress_due = self.progress_due(progress_refresh)
        if self.fed:
            return fed_due(self.known, progress_due, progress_refresh)
        return min(progress_due, self.known.read_at + self.recheck(read_recheck))

    def progress_due(self, progress_refresh: float) -> float:
        """When the known copy's progress is due a re-read (event-loop time; inf: no leg runs)."""
        if self.known is None:
            return float("-inf")  # nothing known: due a read now
        return progress_due(self.known, self.leg_scheduled, self.progressed_at, progress_refresh)

    def learned(
        self, description: WorkflowExecutionDescription, memo: TaskMemo, read_at: float,
        temporal_now: datetime | None = None, *, said: bool = True,
    ) -> None:
        """What a `describe()` started at `read_at` (`temporal_now` on Temporal's clock) found, its
        running leg's message shown or not (`said`); while the close alone is followed, it answers
        for `close_only_recheck`, which it sets anew."""
        self.known = known_from(description, memo, read_at, self.known, temporal_now, said)
        if self.fed and temporal_now is not None:
            self._knows_round_end(read_at, temporal_now)
        if self.close_only:
            self.close_only_recheck = _close_only_recheck(self.close_only_recheck, description)

    def to_the_feed(self, now: float, temporal_now: datetime) -> None:
        """Followed through the feed from `now` (`temporal_now` on Temporal's clock), after a long poll
        that saw every event until then: what is known still answers, now knowing its round's end."""
        self.fed = True
        if self.known is not None:
            self._knows_round_end(now, temporal_now)

    def _knows_round_end(self, now: float, temporal_now: datetime) -> None:
        assert self.known is not None
        ttl = timedelta(milliseconds=self.timing.ttl_ms)
        left = round_left(self.known.description, self.known.memo, ttl, temporal_now)
        self.known = replace(self.known, round_ends=now + left)

    def saw(self, event: HistoryEvent, now: float) -> bool:
        """Note what a history event changes for reads; whether held reads should look again
        (it changes an answer, or a leg began whose progress is soon due a read)."""
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self.leg_scheduled = (event.event_id, now)
            return True
        if _progressed(event):
            self.changed, self.progressed_at = event.event_id, now
            return True
        if event.event_type in _UNSEEN_BY_READS:
            return False
        self.changed = event.event_id
        return True

    def fed_change(self, change: Change) -> bool:
        """Note a change the feed listed; whether the known copy does not show it yet (held reads
        look again, and the next read describes the task)."""
        known = self.known
        if known is not None and not newer(change, known.description):
            return False
        self.changed = max(self.changed, (known.events if known is not None else 0) + 1)
        return True

    def idle(self, now: float) -> bool:
        interval = self.timing.poll_interval_ms / 1000
        return now - self.last_read > max(_WATCH_IDLE.total_seconds(), 3 * interval)

    def recheck(self, read_recheck: float) -> float:
        """While the close alone is followed, how long what the watch knows answers, and how often a
        held read re-reads the task (inf otherwise: every event that changes an answer is seen)."""
        return min(read_recheck, self.close_only_recheck) if self.close_only else float("inf")

    def hold_for(self, now: float, read_hold: float, reread_hold: float) -> float:
        """How long a read arriving at `now` may wait for the task to change (0: answer at once).

        Held: a read of a running task that comes within the advertised interval (and
        `POLL_LOOP_SLACK`) of the last answer, a client in a poll loop; for the task's own
        poll interval, at most `read_hold` after the creation's answer, `reread_hold` after a read's.
        """
        in_poll_loop = now - self.answered_at <= self.advertised + POLL_LOOP_SLACK.total_seconds()
        if not holdable(self.shown[0]) or not in_poll_loop:
            return 0.0
        cap = read_hold if self.by_creation else reread_hold
        return min(cap, self.timing.poll_interval_ms / 1000)

    def record_shown(self, answer: GetTaskResult, now: float, *, by_creation: bool = False) -> None:
        """What a read (or the creation) was shown at `now`: a read held later waits for a change from
        this."""
        self.shown, self.answered_at, self.by_creation = shown_of(answer), now, by_creation
        self.advertised = (answer.poll_interval_ms or 0) / 1000


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


def _progressed(event: HistoryEvent) -> bool:
    """Whether the event is a leg's stamp of a new message (`PROGRESSED_SIGNAL`)."""
    return (
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == PROGRESSED_SIGNAL
    )


def shown_of(answer: GetTaskResult) -> Shown:
    """What a caller can distinguish between two answers."""
    return answer.status, answer.status_message, frozenset(answer.input_requests or ())


