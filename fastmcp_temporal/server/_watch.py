"""One followed task's state, and the decisions reads make from it.

A `Watch` holds what one `describe()` found (`Known`), the last history event that changes
an answer (`saw`), and what reads last answered (`shown`, when, and the interval that answer
advertised); from these alone it decides whether what it knows still answers a read
(`current`), when a running leg's progress is due a re-read (`progress_due`), how often a
held read re-reads a task whose close alone is followed (`recheck`), how long a read may be
held (`hold_for`, the rules are `_holds`'), and when nobody reads it any more (`idle`).
Every decision is a function of that state and the time passed in, with no I/O, so the
schedule is unit-tested without a Temporal server (tests/test_known.py); `_known.KnownTasks`
feeds it from long polls and `describe()`.

Progress (a running leg's heartbeat details) adds no history event, so only a `describe()`
sees it. A copy is re-read once it is as old as its progress had stood still, at least
`_PROGRESS_RECHECK_MIN` and at most `progress_refresh`: progress that changes reaches a
reader about as late as it had stood still before, at one `describe()` per re-read however
many read it (a held read ends after one such re-read, so each read costs at most one). A
message after a stillness longer than `worker._progress.PROGRESS_STAMP_AFTER` needs no
re-read: the leg stamps it on the task (`PROGRESSED_SIGNAL`), an event `saw` takes as a change; a copy read
within `_PROGRESS_RECHECK_MIN` of the stamp is re-read once more, in case the heartbeat that
carries the message landed just after it. So a copy whose progress stood still that long is
re-read only at `progress_refresh`, a backstop for a worker that does not stamp: a long silent
leg, the common long tool, costs a `describe()` per `progress_refresh`.

A leg's heartbeats reach Temporal on a grid: the SDK sends one per throttle window
(`SDK_THROTTLE_SHARE` of the leg's heartbeat timeout), at the window's end (`_HeartbeatGrid`,
placed from the leg's last heartbeat on Temporal's clock). Where the grid is known, a copy is
re-read just after each heartbeat lands while a new message would not be stamped (its
progress stood still for less than `PROGRESS_STAMP_AFTER` and a window), so any message
shows within `_HEARTBEAT_LANDS` of the heartbeat that carries it, at one `describe()` per
window however often it changes; then every `progress_refresh`, the stamp telling of a new
message. A re-read between two heartbeats would find nothing new.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, PendingWorkflowTaskState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHandle

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.server._feed import Change
from fastmcp_temporal.server._holds import POLL_LOOP_SLACK, holdable
from fastmcp_temporal.worker._heartbeat import SDK_THROTTLE_SHARE
from fastmcp_temporal.worker._progress import PROGRESS_STAMP_AFTER
from fastmcp_temporal.workflows.models import PROGRESSED_SIGNAL, TaskMemo, TaskOutcome
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE

# A followed task no read asked about for this long (and three of its poll intervals)
# is let go when its long poll next returns.
_WATCH_IDLE = timedelta(minutes=1)
# A copy of a task followed through the change feed is re-read this long after it was read,
# whatever the feed says: a change visibility listed later than `change_feed_lag` shows then.
SAFETY_REREAD = timedelta(minutes=10)
# A parked task's TTL timer is taken to have fired (and its workflow task to be scheduled) this
# long after its deadline.
_TIMER_FIRING = timedelta(milliseconds=500)
# A fed copy of a task whose workflow task waits is re-read this long after it was read.
_WORKFLOW_TASK_RECHECK = timedelta(seconds=2)
# Stamps compare to within this (a stamp may round through visibility).
_STAMP_PRECISION = timedelta(milliseconds=1)
# A running leg's progress is re-read once the known copy is as old as it had stood still:
# at least this, at most `PROGRESS_STAMP_AFTER` (then at `progress_refresh`).
_PROGRESS_RECHECK_MIN = timedelta(seconds=2)
# A heartbeat sent at its window's end shows in a `describe()` this long after the grid says.
_HEARTBEAT_LANDS = timedelta(milliseconds=300)
# A leg whose last heartbeat is older than this many windows is off its grid (a retry, a stalled
# loop): its re-reads are not moved.
_GRID_WINDOWS = 2
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
    round_ends: float = float("inf")  # when a parked task's TTL timer fires (event-loop time), if fed
    temporal_read_at: datetime | None = None  # `read_at` on Temporal's clock, to place its legs' heartbeats

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
    """A task this server follows by a long poll of its history, or through the change feed
    (`fed`; `_known.KnownTasks.follow`).

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
    fed: bool = False  # followed through the change feed (`_fed`), not a long poll of its history
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
        recheck, or through the feed what it cannot list (`_fed_due`); a new task never read, from `now`."""
        if self.known is None:
            return now + self.recheck(read_recheck) if self.close_only else now
        progress_due = self.progress_due(progress_refresh)
        if self.fed:
            return _fed_due(self.known, progress_due, progress_refresh)
        return min(progress_due, self.known.read_at + self.recheck(read_recheck))

    def progress_due(self, progress_refresh: float) -> float:
        """When the known copy's progress is due a re-read (event-loop time; inf: no leg runs)."""
        known = self.known
        if known is None:
            return float("-inf")  # nothing known: due a read now
        leg_event, leg_seen_at = self.leg_scheduled
        if leg_event > known.events:  # a leg began after the known copy: its progress is due a first read
            return leg_seen_at + _PROGRESS_RECHECK_MIN.total_seconds()
        if known.progress is None:
            return float("inf")
        if known.read_at - self.progressed_at < _PROGRESS_RECHECK_MIN.total_seconds():
            # read right after a stamp: its heartbeat may have reached Temporal just after the read
            return known.read_at + _PROGRESS_RECHECK_MIN.total_seconds()
        grid = _heartbeat_grid(known)
        if grid is None:
            return known.read_at + _progress_age(known, progress_refresh)
        return grid.landing_after(known.read_at + _progress_age_on_grid(known, grid, progress_refresh))

    def learned(
        self, description: WorkflowExecutionDescription, memo: TaskMemo, read_at: float,
        temporal_now: datetime | None = None,
    ) -> None:
        """What a `describe()` started at `read_at` (`temporal_now` on Temporal's clock) found; while
        the close alone is followed, it answers for `close_only_recheck`, which it sets anew."""
        self.known = _known(description, memo, read_at, self.known, temporal_now)
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
        round_left = _round_left(self.known.description, self.known.memo, self.timing, temporal_now)
        self.known = replace(self.known, round_ends=now + round_left)

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
        if known is not None and not _newer(change, known.description):
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
        if not holdable(self.shown[0]) or now - self.answered_at > self.advertised + POLL_LOOP_SLACK.total_seconds():
            return 0.0
        cap = read_hold if self.by_creation else reread_hold
        return min(cap, self.timing.poll_interval_ms / 1000)

    def record_shown(self, answer: GetTaskResult, now: float, *, by_creation: bool = False) -> None:
        """What a read (or the creation) was shown at `now`: a read held later waits for a change from this."""
        self.shown, self.answered_at, self.by_creation = shown_of(answer), now, by_creation
        self.advertised = (answer.poll_interval_ms or 0) / 1000


def _fed_due(known: Known, progress_due: float, progress_refresh: float) -> float:
    """When a fed copy is due a re-read: its progress, or what the feed cannot list: a late listing, a
    parked task's TTL no worker runs, and, with no leg's progress due (inf), a waiting workflow task (a
    stalled task's TTL is ended by a read) soon, a next leg's start as silent progress."""
    due = min(progress_due, known.read_at + SAFETY_REREAD.total_seconds(), known.round_ends)
    if progress_due < float("inf") or known.description.status != WorkflowExecutionStatus.RUNNING:
        return due
    if known.description.raw_description.HasField("pending_workflow_task"):
        return min(due, known.read_at + _WORKFLOW_TASK_RECHECK.total_seconds())
    if not known.memo.open_requests():
        return min(due, known.read_at + _progress_age(known, progress_refresh))
    return due


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
    """How old known progress may be when read: as old as it had stood still, at least
    `_PROGRESS_RECHECK_MIN`, at most `progress_refresh`. A message after a longer stillness
    than `PROGRESS_STAMP_AFTER` is stamped (`progressed`), so progress that stood still that
    long is re-read only as a backstop, at `progress_refresh`, for a leg on a worker that does
    not stamp."""
    still = known.read_at - known.progress_since
    if still >= PROGRESS_STAMP_AFTER.total_seconds():
        return progress_refresh
    return min(max(still, _PROGRESS_RECHECK_MIN.total_seconds()), progress_refresh)


@dataclass(frozen=True)
class _HeartbeatGrid:
    """When a running leg's heartbeats land (event-loop time): one `landed`, then one a `window`."""

    landed: float
    window: float

    def landing_after(self, due: float) -> float:
        """Just after the first heartbeat that lands at or after `due`."""
        return self.landed + max(0, math.ceil((due - self.landed) / self.window)) * self.window


def _heartbeat_grid(known: Known) -> _HeartbeatGrid | None:
    """The running leg's heartbeat grid, from its last heartbeat in the copy on Temporal's clock, plus
    `_HEARTBEAT_LANDS`; None when unknown, or stale (a retry, a stalled loop)."""
    if known.temporal_read_at is None:
        return None
    for leg in known.description.raw_description.pending_activities:
        window = SDK_THROTTLE_SHARE * leg.activity_options.heartbeat_timeout.ToTimedelta().total_seconds()
        if leg.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED or window <= 0:
            continue
        if not leg.HasField("last_heartbeat_time"):
            continue
        age = (known.temporal_read_at - leg.last_heartbeat_time.ToDatetime(tzinfo=timezone.utc)).total_seconds()
        if not 0 <= age <= _GRID_WINDOWS * window:
            return None
        return _HeartbeatGrid(known.read_at - age + _HEARTBEAT_LANDS.total_seconds(), window)
    return None


def _progress_age_on_grid(known: Known, grid: _HeartbeatGrid, progress_refresh: float) -> float:
    """How old known progress may be when read, for a leg whose heartbeat grid is known: at its next
    heartbeat while a new message would not be stamped (the progress stood still for less than
    `PROGRESS_STAMP_AFTER` and the window that carries a stamped one), then `progress_refresh`."""
    still = known.read_at - known.progress_since
    if still < PROGRESS_STAMP_AFTER.total_seconds() + grid.window:
        return _PROGRESS_RECHECK_MIN.total_seconds()
    return progress_refresh


def _round_left(description: WorkflowExecutionDescription, memo: TaskMemo, timing: Timing, now: datetime) -> float:
    """Seconds until a parked task's TTL timer fires, from the stamp that published its asks
    (inf when nothing is asked): its firing adds no stamp, and a stalled task's read ends it."""
    stamp = description.typed_search_attributes.get(CHANGED_AT_ATTRIBUTE)
    if not memo.open_requests() or stamp is None:
        return float("inf")
    return (stamp + timedelta(milliseconds=timing.ttl_ms) - now).total_seconds() + _TIMER_FIRING.total_seconds()


def _newer(change: Change, description: WorkflowExecutionDescription) -> bool:
    """Whether a change the feed listed is past what a `describe()` found: the close of a task
    found running, or a stamp after the one it found (both read from the same search attribute)."""
    if description.status != WorkflowExecutionStatus.RUNNING:
        return False
    if change.closed:
        return True
    stamp = description.typed_search_attributes.get(CHANGED_AT_ATTRIBUTE)
    return stamp is None or change.at - stamp > _STAMP_PRECISION


def _progressed(event: HistoryEvent) -> bool:
    """Whether the event is a leg's stamp of a new message (`PROGRESSED_SIGNAL`)."""
    return (
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == PROGRESSED_SIGNAL
    )


def _known(
    description: WorkflowExecutionDescription, memo: TaskMemo, read_at: float, before: Known | None,
    temporal_read_at: datetime | None = None,
) -> Known:
    """What a `describe()` started at `read_at` (`temporal_read_at` on Temporal's clock) found, carrying
    over since when progress stood still."""
    known = Known(description, memo, read_at, progress_since=read_at, temporal_read_at=temporal_read_at)
    if before is not None and before.progress == known.progress and before.read_at <= read_at:
        return replace(known, progress_since=before.progress_since)
    return known


def shown_of(answer: GetTaskResult) -> Shown:
    """What a caller can tell apart between two answers."""
    return answer.status, answer.status_message, frozenset(answer.input_requests or ())


