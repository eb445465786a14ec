"""Temporal's clock as one process sees it, so no age this package computes reads the local clock.

The stall, TTL and waiting rules compare a timestamp Temporal wrote (when a workflow task
was scheduled, when a task closed, when its TTL timer fires) with "now". A server or CLI
whose clock runs ahead of Temporal's would see every age too old (a cancel terminating a
task a worker was about to take, a result "not found" before its TTL), one behind too young.
So "now" is Temporal's: the newest timestamp this process has seen Temporal write, moved
on by the monotonic clock since it was seen. Temporal stamps an event when it happens, so
this is never ahead of Temporal's clock: an age is never overstated and no rule fires
early. It lags by how old the newest timestamp was when seen; the watches' long polls,
every `describe()` and a cancel's own event (read right after it) keep it fresh where
a rule needs it.

The monotonic clock is read in `monotonic()` alone: the one place a test shifts.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.client import WorkflowExecutionDescription


def monotonic() -> float:
    """Seconds on this process's monotonic clock (never the wall clock, which may be set anywhere)."""
    return time.monotonic()


class TemporalClock:
    """Now on Temporal's clock, from the timestamps Temporal wrote that this process has read."""

    def __init__(self) -> None:
        self._newest: datetime | None = None
        self._seen_at = 0.0

    def saw(self, stamp: datetime | Timestamp) -> None:
        """A timestamp Temporal wrote, just read from one of its answers."""
        if isinstance(stamp, Timestamp):
            if not stamp.seconds and not stamp.nanos:
                return  # unset
            stamp = stamp.ToDatetime(tzinfo=timezone.utc)
        seen_at = monotonic()
        if self._newest is None or stamp > self._newest + timedelta(seconds=seen_at - self._seen_at):
            self._newest, self._seen_at = stamp, seen_at

    def saw_description(self, description: WorkflowExecutionDescription) -> None:
        """The timestamps of a `describe()` just answered."""
        raw = description.raw_description
        info = raw.workflow_execution_info
        for stamp in (info.start_time, info.close_time, raw.pending_workflow_task.scheduled_time,
                      raw.pending_workflow_task.started_time):
            self.saw(stamp)
        for activity in raw.pending_activities:
            self.saw(activity.last_heartbeat_time)
            self.saw(activity.last_started_time)

    def now(self) -> datetime:
        """Now on Temporal's clock, never ahead of it: before any timestamp was seen, the earliest
        time (nothing has aged)."""
        if self._newest is None:
            return datetime.min.replace(tzinfo=timezone.utc)
        return self._newest + timedelta(seconds=monotonic() - self._seen_at)
