"""What the change feed cannot list, so a copy of a task followed through it is re-read for it.

The feed lists what a task stamps (an ask, the end of a round, a partial answer, a cancel, a
stamped progress message) and its close: `newer` says whether a listed change is past what a
`describe()` found. It cannot list a leg's start or unstamped progress, the TTL of a parked task no
worker runs (its timer adds no stamp), nor a change visibility lists later than `change_feed_lag`:
`fed_due` re-reads a fed copy for those, the last after `SAFETY_REREAD`. Every decision is a
function of the copy and the times passed in, with no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus

from fastmcp_temporal.server._described import Known, progress_age
from fastmcp_temporal.server._feed import Change
from fastmcp_temporal.workflows.models import TaskMemo
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE

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


def fed_due(known: Known, progress_due: float, progress_refresh: float) -> float:
    """When a fed copy is due a re-read: its progress, or what the feed cannot list: a late listing, a
    parked task's TTL no worker runs, and, with no leg's progress due (inf), a waiting workflow task (a
    stalled task's TTL is ended by a read) soon, a next leg's start as silent progress."""
    due = min(progress_due, known.read_at + SAFETY_REREAD.total_seconds(), known.round_ends)
    if progress_due < float("inf") or known.description.status != WorkflowExecutionStatus.RUNNING:
        return due
    if known.description.raw_description.HasField("pending_workflow_task"):
        return min(due, known.read_at + _WORKFLOW_TASK_RECHECK.total_seconds())
    if not known.memo.open_requests():
        return min(due, known.read_at + progress_age(known, progress_refresh))
    return due


def round_left(
    description: WorkflowExecutionDescription, memo: TaskMemo, ttl: timedelta, now: datetime
) -> float:
    """Seconds until a parked task's TTL timer fires, from the stamp that published its asks
    (inf when nothing is asked): its firing adds no stamp, and a stalled task's read ends it."""
    stamp = description.typed_search_attributes.get(CHANGED_AT_ATTRIBUTE)
    if not memo.open_requests() or stamp is None:
        return float("inf")
    return (stamp + ttl - now).total_seconds() + _TIMER_FIRING.total_seconds()


def newer(change: Change, description: WorkflowExecutionDescription) -> bool:
    """Whether a change the feed listed is past what a `describe()` found: the close of a task
    found running, or a stamp after the one it found (both read from the same search attribute)."""
    if description.status != WorkflowExecutionStatus.RUNNING:
        return False
    if change.closed:
        return True
    stamp = description.typed_search_attributes.get(CHANGED_AT_ATTRIBUTE)
    return stamp is None or change.at - stamp > _STAMP_PRECISION
