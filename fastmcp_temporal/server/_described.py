"""A task as one `describe()` found it, and when its running legs' progress is due a re-read.

Progress (a running leg's heartbeat details) adds no history event, so only a `describe()`
sees it. A copy is re-read once it is as old as its progress had stood still, at least
`_PROGRESS_RECHECK_MIN` and at most `progress_refresh`: progress that changes reaches a
reader about as late as it had stood still before, at one `describe()` per re-read however
many read it. A message after a stillness longer than `worker._progress.PROGRESS_STAMP_AFTER`, or
a leg's first once it has run `FIRST_MESSAGE_STAMP_AFTER`, needs no re-read: the leg stamps it on
the task (`PROGRESSED_SIGNAL`), an event a watch takes as a change; a copy read within
`_PROGRESS_RECHECK_MIN` of the stamp is re-read once more, in case the heartbeat that carries the
message landed just after it. So a silent leg, the common long tool, costs a `describe()` or two
in its first seconds, then one per `progress_refresh`, a backstop for a worker that does not stamp.

A leg's heartbeats reach Temporal on a grid: the SDK sends one per throttle window
(`SDK_THROTTLE_SHARE` of the leg's heartbeat timeout), at the window's end. Where the grid is
known, a copy is re-read just after each heartbeat lands (`_HEARTBEAT_LANDS`) while a new message
would not be stamped: a re-read between two heartbeats would find nothing new.
Every decision is a function of the copy and the times passed in, with no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionDescription

from fastmcp_temporal.worker._heartbeat import SDK_THROTTLE_SHARE
from fastmcp_temporal.worker._progress import FIRST_MESSAGE_STAMP_AFTER, PROGRESS_STAMP_AFTER
from fastmcp_temporal.workflows.models import TaskMemo

# A running leg's progress is re-read once the known copy is as old as it had stood still:
# at least this, at most `PROGRESS_STAMP_AFTER` (then at `progress_refresh`).
_PROGRESS_RECHECK_MIN = timedelta(seconds=2)
# A heartbeat sent at its window's end shows in a `describe()` this long after the grid says.
_HEARTBEAT_LANDS = timedelta(milliseconds=300)
# A leg whose last heartbeat is older than this many windows is off its grid (a retry, a stalled
# loop): its re-reads are not moved.
_GRID_WINDOWS = 2


@dataclass(frozen=True)
class Known:
    """A task as one `describe()` found it, and when (event-loop time)."""

    description: WorkflowExecutionDescription
    memo: TaskMemo
    read_at: float
    progress_since: float  # since when its legs' heartbeat details have read the same
    round_ends: float = float("inf")  # when a parked task's TTL timer fires (event-loop time), if fed
    temporal_read_at: datetime | None = None  # `read_at` on Temporal's clock, to place its legs' heartbeats
    said: bool = True  # whether its running leg has shown a message (True when unknown: it may have)

    @property
    def events(self) -> int:
        return self.description.raw_description.workflow_execution_info.history_length

    @property
    def progress(self) -> bytes | None:
        """The running legs' heartbeat details; None when no leg runs (nothing can change unseen)."""
        pending = self.description.raw_description.pending_activities
        return b"".join(leg.heartbeat_details.SerializeToString() for leg in pending) if pending else None


def known_from(
    description: WorkflowExecutionDescription,
    memo: TaskMemo,
    read_at: float,
    before: Known | None,
    temporal_read_at: datetime | None = None,
    said: bool = True,
) -> Known:
    """What a `describe()` started at `read_at` (`temporal_read_at` on Temporal's clock) found, its
    running leg's message shown or not (`said`), carrying over since when progress stood still."""
    known = Known(
        description, memo, read_at, progress_since=read_at, temporal_read_at=temporal_read_at, said=said
    )
    if before is not None and before.progress == known.progress and before.read_at <= read_at:
        return replace(known, progress_since=before.progress_since)
    return known


def progress_due(
    known: Known, leg_scheduled: tuple[int, float], progressed_at: float, progress_refresh: float
) -> float:
    """When the copy's progress is due a re-read (event-loop time; inf: no leg runs), given the last
    leg's schedule event and when it was seen, and when a leg's last stamp of a new message was seen."""
    leg_event, leg_seen_at = leg_scheduled
    if leg_event > known.events:  # a leg began after the copy: its progress is due a first read
        return leg_seen_at + _PROGRESS_RECHECK_MIN.total_seconds()
    if known.progress is None:
        return float("inf")
    if known.read_at - progressed_at < _PROGRESS_RECHECK_MIN.total_seconds():
        # read right after a stamp: its heartbeat may have reached Temporal just after the read
        return known.read_at + _PROGRESS_RECHECK_MIN.total_seconds()
    grid = _heartbeat_grid(known)
    if grid is None:
        return known.read_at + progress_age(known, progress_refresh)
    return grid.landing_after(known.read_at + _progress_age_on_grid(known, grid, progress_refresh))


def progress_age(known: Known, progress_refresh: float) -> float:
    """How old known progress may be when read: as old as it had stood still, at least
    `_PROGRESS_RECHECK_MIN`, at most `progress_refresh`. Once the leg would stamp a new message
    (`progressed`), its progress is re-read only as a backstop, at `progress_refresh`, for a leg
    on a worker that does not stamp."""
    if _stamps_next(known, margin=0.0):
        return progress_refresh
    still = known.read_at - known.progress_since
    return min(max(still, _PROGRESS_RECHECK_MIN.total_seconds()), progress_refresh)


def _stamps_next(known: Known, margin: float) -> bool:
    """Whether the leg would stamp a new message (so no re-read need look for one): once its message
    stood still for `PROGRESS_STAMP_AFTER`, `margin` seconds after the copy was read (the window that
    sends it), or, while it has shown none, once it is past its first unstamped one (`_past_first`)."""
    if known.read_at - known.progress_since >= PROGRESS_STAMP_AFTER.total_seconds() + margin:
        return True
    return not known.said and _past_first(known)


def _past_first(known: Known) -> bool:
    """Whether the running leg sent a heartbeat a window after `FIRST_MESSAGE_STAMP_AFTER` into its
    attempt: one showing no message then means no unstamped first message is on its way (a message
    recorded before then, even late, is in it), so its first one will be stamped."""
    for leg in known.description.raw_description.pending_activities:
        if leg.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            continue
        if not (leg.HasField("last_started_time") and leg.HasField("last_heartbeat_time")):
            return False
        window = SDK_THROTTLE_SHARE * leg.activity_options.heartbeat_timeout.ToTimedelta().total_seconds()
        beat_at = (leg.last_heartbeat_time.ToDatetime() - leg.last_started_time.ToDatetime()).total_seconds()
        return beat_at >= FIRST_MESSAGE_STAMP_AFTER.total_seconds() + window
    return False


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
        last_heartbeat = leg.last_heartbeat_time.ToDatetime(tzinfo=timezone.utc)
        age = (known.temporal_read_at - last_heartbeat).total_seconds()
        if not 0 <= age <= _GRID_WINDOWS * window:
            return None
        return _HeartbeatGrid(known.read_at - age + _HEARTBEAT_LANDS.total_seconds(), window)
    return None


def _progress_age_on_grid(known: Known, grid: _HeartbeatGrid, progress_refresh: float) -> float:
    """How old known progress may be when read, for a leg whose heartbeat grid is known: at its next
    heartbeat while a new message would not be stamped (allowing for the window that carries a
    stamped one), then `progress_refresh`."""
    if _stamps_next(known, margin=grid.window):
        return progress_refresh
    return _PROGRESS_RECHECK_MIN.total_seconds()
