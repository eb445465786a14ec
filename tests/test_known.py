"""What a server knows of a task decides when a read answers from it, without a Temporal server.

A watch's state machine (`server/_watch.py`, with its copy's progress re-reads, `server/_described.py`,
and the feed's gaps, `server/_feed_gaps.py`) is fed hand-built `describe()` answers and history
events: what it knows answers a read until an event that changes an answer, a new run, a new leg
or aged progress makes it stale (a reported message after a second); which reads are held and for
how long (`server/_holds.py`: a poll loop's repeat read, within the task's interval and the caps),
a held read's schedule and the closed-answer cache's re-checks follow the constants they name. How long a quiet task asks its clients to wait between polls,
and when its watch is let go, follow from the answers given and their times (`server/_quiet.py`).
`KnownTasks` (`server/_known.py`) runs against a stand-in for Temporal's history long poll, so a
held read is seen re-reading, ending, answering the close and an event at once and a leg's
progress after one re-read, a one-off read answering at once, followed tasks advertising the short
interval of held reads, and a quiet task read seldom let go. None of these tests asks for the session's dev server; the wire behaviour itself is in
test_reads.py, test_read_watch.py and test_quiet_reads.py (which sees a real server let go of a
quiet task's long poll).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest
from temporalio.api.common.v1 import Payload, Payloads, WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    PendingWorkflowTaskState,
    WorkflowExecutionStatus,
)
from temporalio.api.history.v1 import History, HistoryEvent, WorkflowExecutionCompletedEventAttributes
from temporalio.api.workflow.v1 import PendingActivityInfo, PendingWorkflowTaskInfo, WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionResponse,
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.converter import DataConverter, encode_search_attributes
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal import TemporalTasksSettings
from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._changes import TaskChanges
from fastmcp_temporal.server._closed_answers import _CLOSED_RECHECK_MAX, Closed
from fastmcp_temporal.server._described import _HEARTBEAT_LANDS, _PROGRESS_RECHECK_MIN, Known, progress_age
from fastmcp_temporal.server._feed import Change
from fastmcp_temporal.server._feed_gaps import _WORKFLOW_TASK_RECHECK, SAFETY_REREAD
from fastmcp_temporal.server._holds import HELD_POLL_INTERVAL, POLL_LOOP_SLACK
from fastmcp_temporal.server._known import KnownTasks
from fastmcp_temporal.server._quiet import LONG_POLL_PERIOD, Quiet, QuietTasks
from fastmcp_temporal.server._watch import (
    _CLOSE_ONLY_FIRST_RECHECK,
    _CLOSE_ONLY_RECHECK,
    _WATCH_IDLE,
    Timing,
    Watch,
    _close_only_recheck,
    shown_of,
)
from fastmcp_temporal.worker._progress import FIRST_MESSAGE_STAMP_AFTER, PROGRESS_STAMP_AFTER
from fastmcp_temporal.workflows.models import PROGRESSED_SIGNAL, TaskMemo, TaskOutcome
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE

pytestmark = pytest.mark.anyio

RUN = "run-1"
TIMING = Timing(created_at="2025-01-01T00:00:00+00:00", ttl_ms=60_000, poll_interval_ms=5_000)
PROGRESS_REFRESH = 30.0
STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
SCHEDULED = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED


async def description(
    *,
    events: int = 7,
    run_id: str = RUN,
    legs: tuple[tuple[PendingActivityState.ValueType, bytes], ...] = (),
    workflow_task_started: bool = False,
    changed_at: datetime | None = None,
) -> WorkflowExecutionDescription:
    """A `describe()` answer of a running task: its history length, run, legs (state and heartbeat)."""
    raw = DescribeWorkflowExecutionResponse(
        workflow_execution_info=WorkflowExecutionInfo(
            execution=WorkflowExecution(workflow_id="task-wf", run_id=run_id),
            history_length=events,
            status=WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING,
        ),
        pending_activities=[
            PendingActivityInfo(state=state, heartbeat_details=_payloads(details)) for state, details in legs
        ],
    )
    if workflow_task_started:
        raw.pending_workflow_task.CopyFrom(
            PendingWorkflowTaskInfo(state=PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED)
        )
    if changed_at is not None:
        stamps = TypedSearchAttributes([SearchAttributePair(CHANGED_AT_ATTRIBUTE, changed_at)])
        encode_search_attributes(stamps, raw.workflow_execution_info.search_attributes)
    return await WorkflowExecutionDescription._from_raw_description(raw, "default", DataConverter.default)


def _payloads(details: bytes) -> Payloads:
    return Payloads(payloads=[Payload(data=details)]) if details else Payloads()


def event(event_id: int, event_type: EventType.ValueType) -> HistoryEvent:
    return HistoryEvent(event_id=event_id, event_type=event_type)


def watch(**fields: Any) -> Watch:
    handle = WorkflowHandle[Any, TaskOutcome](cast(Client, None), "task-wf", result_type=TaskOutcome)
    return Watch(handle, TIMING, last_read=0.0, run_id=RUN, **fields)


def known(
    found: WorkflowExecutionDescription, read_at: float = 100.0, progress_since: float | None = None
) -> Known:
    return Known(found, TaskMemo(), read_at, progress_since=read_at if progress_since is None else progress_since)


def answer(status: TaskStatus, status_message: str | None = None, **fields: Any) -> GetTaskResult:
    return GetTaskResult(
        task_id="t",
        status=status,
        created_at=TIMING.created_at,
        last_updated_at=TIMING.created_at,
        ttl_ms=TIMING.ttl_ms,
        poll_interval_ms=TIMING.poll_interval_ms,
        status_message=status_message,
        **fields,
    )


async def test_what_a_describe_found_answers_until_an_event_past_it_changes_an_answer() -> None:
    followed = watch(known=known(await description(events=7)), changed=5)
    assert followed.current(101.0, PROGRESS_REFRESH, read_recheck=1.0) is followed.known

    followed.saw(event(8, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED), now=101.0)  # a memo upsert

    assert followed.changed == 8
    assert followed.current(101.0, PROGRESS_REFRESH, read_recheck=1.0) is None


@pytest.mark.parametrize(
    "bookkeeping",
    [
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_MARKER_RECORDED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    ],
)
async def test_a_workflows_bookkeeping_leaves_what_is_known_current(bookkeeping: EventType.ValueType) -> None:
    followed = watch(known=known(await description(events=7)), changed=5)

    followed.saw(event(8, bookkeeping), now=101.0)

    assert followed.changed == 5
    assert followed.current(101.0, PROGRESS_REFRESH, read_recheck=1.0) is followed.known


async def test_a_new_run_of_the_workflow_makes_what_is_known_stale() -> None:
    followed = watch(known=known(await description(run_id="run-0")))
    assert followed.current(101.0, PROGRESS_REFRESH, read_recheck=1.0) is None


async def test_while_only_the_close_is_followed_what_is_known_answers_for_the_recheck_alone() -> None:
    followed = watch(known=known(await description(), read_at=100.0), close_only=True)
    assert followed.current(100.4, PROGRESS_REFRESH, read_recheck=0.5) is followed.known
    assert followed.current(100.5, PROGRESS_REFRESH, read_recheck=0.5) is None
    followed.close_only = False
    assert followed.current(500.0, PROGRESS_REFRESH, read_recheck=0.5) is followed.known


async def test_a_leg_scheduled_after_what_is_known_is_read_once_its_progress_can_have_moved() -> None:
    followed = watch(known=known(await description(events=7)))
    followed.saw(event(8, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), now=200.0)

    first_progress = 200.0 + _PROGRESS_RECHECK_MIN.total_seconds()
    assert followed.changed == 0  # a schedule changes no answer by itself
    assert followed.current(first_progress - 0.01, PROGRESS_REFRESH, read_recheck=1.0) is followed.known
    assert followed.current(first_progress, PROGRESS_REFRESH, read_recheck=1.0) is None


async def test_running_legs_progress_is_reread_once_the_copy_is_as_old_as_it_had_stood_still() -> None:
    found = await description(legs=((STARTED, b"half way"),))
    followed = watch(known=known(found, read_at=100.0, progress_since=90.0))  # stood still for 10 s

    assert followed.current(109.9, PROGRESS_REFRESH, read_recheck=1.0) is followed.known
    assert followed.current(110.0, PROGRESS_REFRESH, read_recheck=1.0) is None


async def test_progress_is_reread_just_after_each_heartbeat_until_a_new_message_would_be_stamped() -> None:
    """A leg's heartbeats land once per throttle window (4 s at a 5 s heartbeat timeout): a re-read
    between two finds nothing new, so a copy is re-read right after each heartbeat while a new
    message would not be stamped, then every `progress_refresh`, on the same grid."""
    found = await description(legs=((STARTED, b"step 7"),))
    leg = found.raw_description.pending_activities[0]
    temporal_now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    leg.last_heartbeat_time.FromDatetime(temporal_now - timedelta(seconds=1))
    leg.activity_options.heartbeat_timeout.FromTimedelta(timedelta(seconds=5))
    lands = _HEARTBEAT_LANDS.total_seconds()

    followed = watch()
    followed.learned(found, TaskMemo(), read_at=100.0, temporal_now=temporal_now)  # progress just moved
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 3 + lands)
    followed.known = replace(known(found, read_at=100.0, progress_since=80.0), temporal_read_at=temporal_now)
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 3 + lands)  # stood still 20 s
    unstamped = PROGRESS_STAMP_AFTER.total_seconds() + 4  # and the window that carries a stamped message
    followed.known = replace(known(found, read_at=100.0, progress_since=100.0 - unstamped), temporal_read_at=temporal_now)
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 31 + lands)  # the stamp tells

    leg.last_heartbeat_time.FromDatetime(temporal_now - timedelta(seconds=9))  # off its grid: as before
    followed.known = replace(known(found, read_at=100.0), temporal_read_at=temporal_now)
    assert followed.progress_due(PROGRESS_REFRESH) == 100.0 + _PROGRESS_RECHECK_MIN.total_seconds()


async def test_a_leg_that_has_shown_no_message_is_reread_only_until_its_first_would_be_stamped() -> None:
    """A leg stamps its first message once it has run `FIRST_MESSAGE_STAMP_AFTER`: a copy showing no
    message is re-read at each heartbeat until one sent a window past that (which would carry any
    earlier, unstamped message) shows none, then only at `progress_refresh`; a copy showing one, at
    each heartbeat until a next would be stamped."""
    found = await description(legs=((STARTED, b"{}"),))
    leg = found.raw_description.pending_activities[0]
    temporal_now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    last_heartbeat = temporal_now - timedelta(seconds=1)
    leg.last_heartbeat_time.FromDatetime(last_heartbeat)
    leg.activity_options.heartbeat_timeout.FromTimedelta(timedelta(seconds=5))  # a 4 s window
    lands, past_first = _HEARTBEAT_LANDS.total_seconds(), FIRST_MESSAGE_STAMP_AFTER.total_seconds() + 4

    def copy(heartbeat_at: float, said: bool) -> Known:
        """A copy whose leg's last heartbeat was sent `heartbeat_at` seconds into its attempt."""
        leg.last_started_time.FromDatetime(last_heartbeat - timedelta(seconds=heartbeat_at))
        return replace(known(found, read_at=100.0), temporal_read_at=temporal_now, said=said)

    followed = watch()
    followed.known = copy(heartbeat_at=past_first - 0.5, said=False)  # a message may be on its way unstamped
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 3 + lands)
    followed.known = copy(heartbeat_at=past_first, said=False)
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 31 + lands)  # the stamp tells
    followed.known = copy(heartbeat_at=past_first + 60, said=True)  # its next message, just after, is not stamped
    assert followed.progress_due(PROGRESS_REFRESH) == pytest.approx(100.0 + 3 + lands)


async def test_a_task_running_no_leg_is_never_reread_for_progress() -> None:
    followed = watch(known=known(await description(), read_at=100.0, progress_since=0.0))
    assert followed.known is not None and followed.known.progress is None
    assert followed.current(100.0 + 10 * PROGRESS_REFRESH, PROGRESS_REFRESH, read_recheck=1.0) is followed.known


async def test_how_old_silent_progress_may_be_is_how_long_it_stood_still_within_bounds() -> None:
    found = await description(legs=((STARTED, b"step"),))
    minimum = _PROGRESS_RECHECK_MIN.total_seconds()
    assert progress_age(known(found, read_at=100.0, progress_since=100.0), PROGRESS_REFRESH) == minimum
    assert progress_age(known(found, read_at=100.0, progress_since=95.0), PROGRESS_REFRESH) == 5.0
    assert (
        progress_age(known(found, read_at=100.0, progress_since=0.0), PROGRESS_REFRESH)
        == PROGRESS_REFRESH
    )


async def test_progress_still_for_as_long_as_a_new_message_would_be_stamped_is_reread_only_at_the_refresh() -> None:
    """The leg stamps its next message: a long `progress_refresh` is a backstop, not a schedule that doubles up to it."""
    found = await description(legs=((STARTED, b"step"),))
    stamped_after = PROGRESS_STAMP_AFTER.total_seconds()
    backstop = 4 * stamped_after
    almost = known(found, read_at=100.0, progress_since=100.0 - stamped_after + 1)
    assert progress_age(almost, backstop) == stamped_after - 1
    assert progress_age(known(found, read_at=100.0, progress_since=100.0 - stamped_after), backstop) == backstop


async def test_a_stamped_message_is_a_change_and_a_copy_read_right_after_it_is_reread_once_more() -> None:
    """A leg's `progressed` signal ends the copy like an ask would; a copy read within a second of
    it is re-read a second later (its heartbeat may have landed just after), later ones age as usual."""
    found = await description(legs=((STARTED, b"step"),))
    followed = watch(known=known(found, read_at=100.0, progress_since=0.0))  # stood still a long time
    followed.record_shown(answer("working", "step 3 of 9"), now=100.0)
    assert followed.progress_due(PROGRESS_REFRESH) == 100.0 + PROGRESS_REFRESH

    stamp = HistoryEvent(event_id=found.raw_description.workflow_execution_info.history_length + 1,
                         event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    stamp.workflow_execution_signaled_event_attributes.signal_name = PROGRESSED_SIGNAL
    assert followed.saw(stamp, now=105.0)
    assert followed.current(105.0, PROGRESS_REFRESH, read_recheck=1.0) is None

    fresh = _PROGRESS_RECHECK_MIN.total_seconds()
    followed.known = known(found, read_at=105.2, progress_since=0.0)
    assert followed.progress_due(PROGRESS_REFRESH) == 105.2 + fresh
    later = 105.0 + fresh + 0.5
    followed.known = known(found, read_at=later, progress_since=0.0)
    assert followed.progress_due(PROGRESS_REFRESH) == later + PROGRESS_REFRESH


async def test_a_fed_copy_is_outdated_by_a_newer_stamp_or_the_close_only() -> None:
    stamp = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    followed = watch(fed=True, known=known(await description(changed_at=stamp)))
    assert not followed.fed_change(Change("task-wf", stamp, closed=False))  # what the copy shows
    assert followed.current(100.0, PROGRESS_REFRESH, read_recheck=1.0) is followed.known
    assert followed.fed_change(Change("task-wf", stamp + timedelta(seconds=1), closed=False))
    assert followed.current(100.0, PROGRESS_REFRESH, read_recheck=1.0) is None
    followed.known = known(await description(events=9, changed_at=stamp))
    assert followed.current(100.0, PROGRESS_REFRESH, read_recheck=1.0) is followed.known  # read since
    assert followed.fed_change(Change("task-wf", stamp, closed=True))


async def test_a_fed_copy_is_reread_for_what_the_feed_cannot_list() -> None:
    """A task between legs as silent progress (its next leg's start adds no stamp), one whose workflow
    task waits soon (no worker may run it), a parked one at its TTL, and any at the safety re-read."""
    refresh, safety = PROGRESS_REFRESH, SAFETY_REREAD.total_seconds()
    between_legs = watch(fed=True, known=known(await description(), read_at=100.0, progress_since=95.0))
    assert between_legs.due(100.0, refresh, read_recheck=1.0) == 105.0
    assert watch(known=between_legs.known).due(100.0, refresh, read_recheck=1.0) == float("inf")  # long poll

    waiting = watch(fed=True, known=known(await description(workflow_task_started=True), read_at=100.0))
    assert waiting.due(100.0, refresh, read_recheck=1.0) == 100.0 + _WORKFLOW_TASK_RECHECK.total_seconds()

    parked_at = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    parked = watch(fed=True)
    asks = TaskMemo(input_requests={"k": {"method": "elicitation/create"}})
    parked.learned(await description(changed_at=parked_at), asks, read_at=100.0, temporal_now=parked_at)
    ttl = TIMING.ttl_ms / 1000
    assert parked.due(100.0, refresh, read_recheck=1.0) == pytest.approx(min(100.0 + ttl + 0.5, 100.0 + safety))
    parked.learned(await description(changed_at=parked_at), asks, read_at=100.0)  # no clock read: safety alone
    assert parked.due(100.0, refresh, read_recheck=1.0) == 100.0 + safety


async def test_a_long_polled_copy_moved_to_the_feed_still_answers_until_its_round_ends() -> None:
    """Its long poll saw every event until the move: no re-read then, but the feed lists no TTL."""
    parked_at = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    asks = TaskMemo(input_requests={"k": {"method": "elicitation/create"}})
    moved = watch()
    moved.learned(await description(changed_at=parked_at), asks, read_at=100.0, temporal_now=parked_at)
    assert moved.due(110.0, PROGRESS_REFRESH, read_recheck=1.0) == float("inf")

    moved.to_the_feed(110.0, temporal_now=parked_at + timedelta(seconds=10))
    ends = 100.0 + TIMING.ttl_ms / 1000 + 0.5
    assert moved.current(ends - 0.01, PROGRESS_REFRESH, read_recheck=1.0) is moved.known
    assert moved.due(110.0, PROGRESS_REFRESH, read_recheck=1.0) == pytest.approx(ends)


async def test_a_describe_carries_over_since_when_progress_stood_still_until_it_moves() -> None:
    followed = watch()
    step_one = await description(legs=((STARTED, b"step 1"),))

    followed.learned(step_one, TaskMemo(), read_at=10.0)
    followed.learned(step_one, TaskMemo(), read_at=20.0)
    assert followed.known is not None and followed.known.progress_since == 10.0

    followed.learned(await description(legs=((STARTED, b"step 2"),)), TaskMemo(), read_at=30.0)
    assert followed.known.progress_since == 30.0


async def test_a_new_running_task_is_rechecked_soon_and_a_queued_one_less_often_each_time() -> None:
    soon = _CLOSE_ONLY_RECHECK.total_seconds()
    assert _close_only_recheck(0.5, await description(workflow_task_started=True)) == soon
    assert _close_only_recheck(0.5, await description(legs=((STARTED, b""),))) == soon
    assert _close_only_recheck(0.5, await description(legs=((SCHEDULED, b""),))) == 1.0
    assert _close_only_recheck(1.0, await description()) == 2.0


async def test_a_describe_sets_the_recheck_only_while_the_close_alone_is_followed() -> None:
    queued = await description()
    close_only, every_event = watch(close_only=True), watch()

    close_only.learned(queued, TaskMemo(), read_at=1.0)
    every_event.learned(queued, TaskMemo(), read_at=1.0)

    first = _CLOSE_ONLY_FIRST_RECHECK.total_seconds()
    assert close_only.close_only_recheck == 2 * first
    assert every_event.close_only_recheck == first


async def test_a_held_read_rechecks_only_while_the_close_alone_is_followed() -> None:
    assert watch(close_only=True, close_only_recheck=2.0).recheck(read_recheck=1.0) == 1.0
    assert watch(close_only=True, close_only_recheck=0.25).recheck(read_recheck=1.0) == 0.25
    assert watch(close_only_recheck=0.25).recheck(read_recheck=1.0) == float("inf")  # every event is seen


async def test_only_an_event_that_changes_an_answer_or_starts_a_leg_wakes_held_reads() -> None:
    followed = watch()
    assert not followed.saw(event(3, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), now=1.0)
    assert followed.saw(event(4, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), now=1.0)
    assert followed.changed == 0
    assert followed.saw(event(5, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED), now=1.0)
    assert followed.changed == 5


async def test_a_change_signalled_wakes_the_reads_held_on_that_task_alone() -> None:
    changes = TaskChanges()
    with changes.following(["a"]) as a, changes.following(["b"]) as b:
        changes.changed("a")
        assert a.event.is_set() and not b.event.is_set()
        assert a.take() == {"a"} and not a.event.is_set()  # the next change is a new one
    assert changes._followers == {}  # nothing kept once no read waits


async def test_a_wait_on_a_change_cancelled_as_the_change_comes_ends_cancelled() -> None:
    """A listen stream or a question's round cancelled just as its task changes stops: the
    cancellation is not taken for the change (`asyncio.wait_for` did so before Python 3.12)."""
    changes = TaskChanges()
    with changes.following(["a"]) as signalled:
        waiter = asyncio.create_task(signalled.wait(60))
        await asyncio.sleep(0)  # the waiter waits
        changes.changed("a")
        await asyncio.sleep(0)  # the event's own wait has returned, the waiter not resumed yet
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter


@pytest.mark.parametrize(
    ("poll_interval_ms", "idle_after"), [(5_000, _WATCH_IDLE.total_seconds()), (60_000, 180.0)]
)
async def test_a_watch_nobody_reads_goes_idle_after_a_while_and_three_poll_intervals(
    poll_interval_ms: int, idle_after: float
) -> None:
    followed = watch()
    followed.timing = Timing(TIMING.created_at, TIMING.ttl_ms, poll_interval_ms)
    followed.last_read = 10.0
    assert not followed.idle(10.0 + idle_after)
    assert followed.idle(10.0 + idle_after + 0.01)


HELD_S = HELD_POLL_INTERVAL.total_seconds()
SLACK = POLL_LOOP_SLACK.total_seconds()


async def test_a_read_in_a_poll_loop_is_held_for_the_tasks_interval_within_the_cap() -> None:
    followed = watch()
    followed.record_shown(answer("working").model_copy(update={"poll_interval_ms": int(HELD_S * 1000)}), now=10.0)
    own = TIMING.poll_interval_ms / 1000

    assert followed.hold_for(10.0 + HELD_S, read_hold=1.0, reread_hold=60.0) == own
    assert followed.hold_for(10.0 + HELD_S, read_hold=1.0, reread_hold=2.0) == 2.0
    assert followed.hold_for(10.0 + HELD_S + SLACK - 0.01, read_hold=1.0, reread_hold=2.0) == 2.0
    assert followed.hold_for(10.0 + HELD_S + SLACK + 0.01, read_hold=1.0, reread_hold=2.0) == 0.0  # a one-off read


async def test_a_read_right_after_the_creation_is_held_for_read_hold_and_a_closed_task_never() -> None:
    followed = watch(answered_at=10.0, advertised=HELD_S, by_creation=True)
    assert followed.hold_for(10.01, read_hold=1.0, reread_hold=5.0) == 1.0

    followed.record_shown(answer("completed"), now=10.0)
    assert followed.hold_for(10.01, read_hold=1.0, reread_hold=5.0) == 0.0


async def test_a_read_after_a_parked_answer_is_held_too() -> None:
    parked = watch()
    parked.record_shown(answer("input_required", input_requests={"k": {}}), now=10.0)
    assert parked.hold_for(10.01, read_hold=1.0, reread_hold=2.0) == 2.0


async def test_an_answer_differs_by_what_a_caller_can_distinguish() -> None:
    shown = shown_of(answer("working", "step 1", input_requests={"a": {"method": "x"}}))
    assert shown_of(answer("working", "step 1", input_requests={"a": {"method": "y"}})) == shown
    assert shown_of(answer("working", "step 2", input_requests={"a": {}})) != shown
    assert shown_of(answer("working", "step 1", input_requests={"b": {}})) != shown
    assert shown_of(answer("completed", "step 1", input_requests={"a": {}})) != shown


def test_a_remembered_close_is_rechecked_at_doubling_intervals_up_to_a_bound() -> None:
    closed = Closed("completed", {}, TIMING, datetime.now(timezone.utc), RUN, checked_at=100.0, recheck=5.0)
    assert not closed.due(104.9)
    assert closed.due(105.0)

    again = closed.confirmed(105.0)
    assert (again.checked_at, again.recheck) == (105.0, 10.0)
    assert not again.due(114.9) and again.due(115.0)

    bound = _CLOSED_RECHECK_MAX.total_seconds()
    assert (
        Closed("completed", {}, TIMING, closed.expires_at, RUN, 0.0, bound * 0.75).confirmed(1.0).recheck
        == bound
    )


@dataclass
class LongPolls:
    """Temporal's history long poll, played by the test: each call waits for the next response it puts."""

    responses: asyncio.Queue[GetWorkflowExecutionHistoryResponse | Exception] = field(
        default_factory=asyncio.Queue
    )
    requests: list[GetWorkflowExecutionHistoryRequest] = field(default_factory=list)

    async def get_workflow_execution_history(
        self, request: GetWorkflowExecutionHistoryRequest, timeout: timedelta | None = None
    ) -> GetWorkflowExecutionHistoryResponse:
        self.requests.append(request)
        response = await self.responses.get()
        if isinstance(response, Exception):
            raise response
        return response


@dataclass
class FakeClient:
    workflow_service: LongPolls
    namespace: str = "default"
    data_converter: DataConverter = DataConverter.default


@asynccontextmanager
async def known_tasks(
    changes: TaskChanges | None = None, **settings: Any
) -> AsyncIterator[tuple[KnownTasks, LongPolls]]:
    """A `KnownTasks` on the stand-in long poll, signalling `changes`, its watches stopped at the end."""
    polls = LongPolls()
    tasks = KnownTasks(cast(Client, FakeClient(polls)), TemporalTasksSettings(**settings), _completed_state,
                       TemporalClock(), changes or TaskChanges())
    try:
        yield tasks, polls
    finally:
        await tasks.close()
        await asyncio.sleep(0)  # let the cancelled long polls end


def _completed_state(outcome: TaskOutcome) -> tuple[TaskStatus, dict[str, Any]] | None:
    return "completed", {"result": outcome.result}


def created(tasks: KnownTasks, key: str = "task-wf") -> Watch:
    handle = WorkflowHandle[Any, TaskOutcome](cast(Client, None), key, result_type=TaskOutcome)
    tasks.watch_created(key, handle, TIMING, RUN)
    followed = tasks.watch_of(key)
    assert followed is not None
    return followed


class Rereads:
    """The task methods' re-read, answering in turn what the test lists, and noting each call's `fresh`."""

    def __init__(self, *answers: GetTaskResult) -> None:
        self.answers = list(answers)
        self.fresh: list[bool] = []

    async def __call__(self, fresh: bool) -> GetTaskResult:
        self.fresh.append(fresh)
        return self.answers.pop(0)


def closed_answer(closed: Closed) -> GetTaskResult:
    return answer(closed.status, **closed.fields)


async def holding(tasks: KnownTasks, reread: Rereads) -> asyncio.Future[GetTaskResult]:
    """A read of the task, once it is held (waiting for a change)."""
    held = asyncio.ensure_future(tasks.answer("task-wf", closed_answer, reread, "caller"))
    while "task-wf" not in tasks._changes._followers:
        await asyncio.sleep(0)
    return held


async def test_a_held_read_of_a_new_task_rereads_it_at_each_recheck_until_its_answer_changes() -> None:
    async with known_tasks(read_hold=timedelta(seconds=5)) as (tasks, _):
        followed = created(tasks)
        followed.close_only_recheck = 0.02
        reread = Rereads(
            answer("working"), answer("working"), answer("input_required", input_requests={"k": {}})
        )

        held = await tasks.answer("task-wf", closed_answer, reread, "caller")

    assert held.status == "input_required"
    assert reread.fresh == [True, True, True]  # the creation's answer stood for the first


async def test_a_hold_shorter_than_the_recheck_ends_with_what_the_watch_knows() -> None:
    async with known_tasks(read_hold=timedelta(milliseconds=50)) as (tasks, _):
        created(tasks)
        reread = Rereads(answer("working"))

        assert (await tasks.answer("task-wf", closed_answer, reread, "caller")).status == "working"

    assert reread.fresh == [False]


async def test_the_close_ends_a_held_read_at_once_with_the_result_from_the_close_event() -> None:
    async with known_tasks(read_hold=timedelta(seconds=5)) as (tasks, polls):
        created(tasks)
        reread = Rereads()
        held = await holding(tasks, reread)
        await polls.responses.put(await _close_event(TaskOutcome(result={"answer": 42})))

        done = await asyncio.wait_for(held, timeout=5)  # a re-read, at the first recheck, would fail

        assert tasks.closed.cached("task-wf") is not None
    assert (done.status, done.result) == ("completed", {"answer": 42})
    assert reread.fresh == []


async def following_every_event(tasks: KnownTasks, shown: GetTaskResult, *legs: bytes) -> Watch:
    """A task followed for every event, known from a `describe()` just now, last answered `shown`."""
    followed = created(tasks)
    followed.close_only = False
    now = asyncio.get_running_loop().time()
    followed.known = known(await description(legs=tuple((STARTED, leg) for leg in legs)), read_at=now)
    followed.record_shown(shown, now)
    return followed


async def test_an_event_that_changes_an_answer_ends_a_held_read_with_the_new_answer() -> None:
    async with known_tasks() as (tasks, polls):
        await following_every_event(tasks, answer("working"))
        reread = Rereads(answer("working"), answer("input_required", input_requests={"k": {}}))
        held = await holding(tasks, reread)
        asked = event(8, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED)
        await polls.responses.put(GetWorkflowExecutionHistoryResponse(history=History(events=[asked]),
                                                                      next_page_token=b"more"))

        done = await asyncio.wait_for(held, timeout=5)  # the hold itself lasts 5 s

    assert done.status == "input_required"
    assert reread.fresh == [False, False]  # the event made the watch's copy stale: that read describes


async def test_a_held_read_of_a_leg_reporting_progress_ends_after_one_progress_reread() -> None:
    async with known_tasks() as (tasks, _):
        followed = await following_every_event(tasks, answer("working", "step 1"), b"step 1")
        assert followed.known is not None
        followed.known = replace(followed.known, read_at=followed.known.read_at - 0.9)  # due in 0.1 s
        reread = Rereads(answer("working", "step 1"), answer("working", "step 1"))

        done = await asyncio.wait_for(tasks.answer("task-wf", closed_answer, reread, "caller"), timeout=5)

    assert done.status_message == "step 1"
    assert reread.fresh == [False, True]  # one describe for this read, though nothing changed


async def test_a_read_long_after_the_last_answer_answers_at_once() -> None:
    async with known_tasks() as (tasks, _):
        followed = await following_every_event(tasks, answer("working"))
        followed.answered_at -= followed.advertised + SLACK + 1  # an operator's one-off status
        reread = Rereads(answer("working"))

        done = await asyncio.wait_for(tasks.answer("task-wf", closed_answer, reread, "caller"), timeout=1)

    assert done.status == "working" and reread.fresh == [False]


async def test_answers_of_a_followed_task_advertise_the_held_interval_unless_reads_are_not_held() -> None:
    held_ms = int(HELD_S * 1000)
    async with known_tasks() as (tasks, _):
        created(tasks)
        assert tasks.remember("task-wf", answer("working")).poll_interval_ms == held_ms
        assert tasks.remember("task-wf", answer("completed")).poll_interval_ms == TIMING.poll_interval_ms
        assert tasks.remember("other-wf", answer("working")).poll_interval_ms == TIMING.poll_interval_ms  # not followed
    async with known_tasks(reread_hold=timedelta(0)) as (tasks, _):
        created(tasks)
        assert tasks.remember("task-wf", answer("working")).poll_interval_ms == TIMING.poll_interval_ms


async def _close_event(outcome: TaskOutcome) -> GetWorkflowExecutionHistoryResponse:
    """The last page of a completed run's history: its close event, and no next page."""
    (result,) = await DataConverter.default.encode([outcome])
    close = event(9, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    close.workflow_execution_completed_event_attributes.CopyFrom(
        WorkflowExecutionCompletedEventAttributes(result=Payloads(payloads=[result]))
    )
    close.event_time.FromDatetime(datetime.now(timezone.utc))
    return GetWorkflowExecutionHistoryResponse(history=History(events=[close]))


class RecordedChanges(TaskChanges):
    """The change signals, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def changed(self, key: str) -> None:
        self.keys.append(key)
        super().changed(key)


async def test_a_watch_signals_the_events_that_change_an_answer_by_the_tasks_key() -> None:
    changes = RecordedChanges()
    async with known_tasks(changes) as (tasks, polls):
        followed = created(tasks)
        followed.close_only = False
        bookkeeping = event(5, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        await polls.responses.put(GetWorkflowExecutionHistoryResponse(history=History(events=[bookkeeping]),
                                                                      next_page_token=b"more"))
        await polls.responses.put(await _close_event(TaskOutcome(result={"answer": 42})))

        await asyncio.wait_for(followed.follow, timeout=5)  # the close ends the watch

    assert changes.keys and set(changes.keys) == {"task-wf"}


async def test_a_task_created_here_is_followed_for_its_close_alone_and_its_first_read_held() -> None:
    async with known_tasks(read_hold=timedelta(milliseconds=250)) as (tasks, polls):
        followed = created(tasks)
        await asyncio.sleep(0)

        assert followed.close_only and followed.by_creation and followed.advertised == HELD_S
        assert followed.answered_at == followed.last_read  # the creation answered `working`
        assert followed.hold_for(followed.last_read, read_hold=0.25, reread_hold=5.0) == 0.25
        (request,) = polls.requests
        assert request.wait_new_event and request.execution.run_id == RUN


async def test_past_watched_tasks_no_new_task_is_followed() -> None:
    async with known_tasks(watched_tasks=1) as (tasks, _):
        created(tasks, "first")
        handle = WorkflowHandle[Any, TaskOutcome](cast(Client, None), "second", result_type=TaskOutcome)

        assert tasks.follow("second", handle, TIMING, RUN) is None
        assert tasks.watch_of("second") is None


async def test_a_refused_long_poll_ends_its_watch_and_pauses_following_new_tasks() -> None:
    async with known_tasks() as (tasks, polls):
        followed = created(tasks, "first")
        await polls.responses.put(RPCError("too many long polls", RPCStatusCode.RESOURCE_EXHAUSTED, b""))
        assert followed.follow is not None
        await asyncio.wait([followed.follow])
        handle = WorkflowHandle[Any, TaskOutcome](cast(Client, None), "second", result_type=TaskOutcome)

        assert tasks.watch_of("first") is None
        assert tasks.follow("second", handle, TIMING, RUN) is None


CAP = 30.0  # quiet_poll_interval, seconds
BASE = TIMING.poll_interval_ms / 1000
PERIOD = LONG_POLL_PERIOD.total_seconds()
REMEMBERED = 1_000  # quiet_tasks
PARKED = answer("input_required", input_requests={"k": {}})


def test_a_quiet_task_asks_for_its_own_interval_then_half_its_quiet_up_to_the_cap() -> None:
    quiet = Quiet(shown=hash(("working", None, frozenset())), since=100.0, answered_at=100.0, read_gap=float("inf"))
    assert quiet.interval(100.0 + CAP - 0.1, BASE, CAP) == BASE
    assert quiet.interval(100.0 + CAP, BASE, CAP) == CAP / 2
    assert quiet.interval(100.0 + 1.5 * CAP, BASE, CAP) == 0.75 * CAP
    assert quiet.interval(100.0 + 10 * CAP, BASE, CAP) == CAP
    assert quiet.interval(100.0 + 10 * CAP, BASE, cap=BASE) == BASE  # a cap at the task's own: off
    assert quiet.interval(100.0 + 8.0, BASE, cap=8.0) == BASE  # half its quiet is below its own


def test_the_same_answer_keeps_its_quiet_and_any_change_starts_it_anew() -> None:
    quiet = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    first = quiet.quiet_after("t", PARKED, now=0.0)
    assert first is not None and (first.since, first.read_gap) == (0.0, float("inf"))
    again = quiet.quiet_after("t", answer("input_required", input_requests={"k": {"other": 1}}), now=40.0)
    assert again is not None and (again.since, again.read_gap) == (0.0, 40.0)
    for changed in (answer("working"), answer("input_required", input_requests={"k2": {}})):
        after = quiet.quiet_after("t", changed, now=50.0)
        assert after is not None and after.since == 50.0


def test_the_advertised_interval_is_the_tasks_own_until_quiet_and_never_for_a_close() -> None:
    quiet = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    quiet.quiet_after("t", PARKED, now=0.0)
    assert quiet.advertised(PARKED, quiet.quiet_after("t", PARKED, now=5.0), now=5.0) is PARKED
    grown = quiet.advertised(PARKED, quiet.quiet_after("t", PARKED, now=2 * CAP), now=2 * CAP)
    assert grown.poll_interval_ms == CAP * 1000 and grown.input_requests == PARKED.input_requests
    assert quiet.quiet_after("t", answer("completed"), now=3 * CAP) is None
    assert len(quiet) == 0
    off = QuietTasks(timedelta(0), REMEMBERED)
    assert off.advertised(PARKED, off.quiet_after("t", PARKED, now=10 * CAP), now=10 * CAP) is PARKED


def test_a_server_with_quiet_off_remembers_nothing_of_the_tasks_it_answers() -> None:
    """The default: an entry per task read would only grow memory, up to `quiet_tasks`."""
    off = QuietTasks(timedelta(0), REMEMBERED)
    for n in range(10):
        off.quiet_after(f"t{n}", PARKED, now=float(n))
    assert len(off) == 0


def test_a_quiet_task_read_here_at_longer_gaps_than_a_long_poll_lasts_is_let_go() -> None:
    quiet = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    for now in range(0, int(CAP) + 11, 10):
        quiet.quiet_after("t", PARKED, now=float(now))
    assert not quiet.let_go("t", TIMING.poll_interval_ms)  # quiet, but read often enough
    quiet.quiet_after("t", PARKED, now=CAP + 10 + PERIOD)
    assert quiet.let_go("t", TIMING.poll_interval_ms)
    assert not quiet.let_go("t", int(CAP * 1000))  # a task whose own interval is the cap is never quiet
    quiet.forget("t")  # a write through this server
    assert not quiet.let_go("t", TIMING.poll_interval_ms)
    young = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    young.quiet_after("t", PARKED, now=0.0)
    young.quiet_after("t", PARKED, now=PERIOD)
    assert not young.let_go("t", TIMING.poll_interval_ms)  # read seldom, but not quiet yet


def test_a_server_remembers_the_quiet_of_a_bounded_number_of_tasks() -> None:
    quiet = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    for n in range(REMEMBERED + 1):
        quiet.quiet_after(f"t{n}", PARKED, now=0.0)
    assert len(quiet) == REMEMBERED
    quiet.quiet_after("t0", PARKED, now=PERIOD + CAP)  # the oldest was forgotten: it starts anew
    assert not quiet.let_go("t0", TIMING.poll_interval_ms)
    none = QuietTasks(timedelta(seconds=CAP), 0)  # quiet_tasks=0: every task keeps its own interval
    none.quiet_after("t", PARKED, now=0.0)
    assert none.advertised(PARKED, none.quiet_after("t", PARKED, now=3 * CAP), now=3 * CAP) is PARKED


async def test_a_quiet_watched_task_read_seldom_is_let_go_and_not_followed_until_it_changes() -> None:
    async with known_tasks(quiet_poll_interval=timedelta(seconds=CAP)) as (tasks, _):
        followed = created(tasks)
        now = asyncio.get_running_loop().time()
        tasks._quiet.quiet_after("task-wf", PARKED, now - 2 * CAP)  # quiet for a minute, read then
        handle = followed.handle

        advertised = tasks.remember("task-wf", PARKED)
        assert followed.follow is not None
        await asyncio.wait([followed.follow])

        assert advertised.poll_interval_ms == CAP * 1000
        assert tasks.watch_of("task-wf") is None
        assert tasks.follow("task-wf", handle, TIMING, RUN) is None
        assert tasks.remember("task-wf", answer("working")).poll_interval_ms == TIMING.poll_interval_ms
        assert tasks.follow("task-wf", handle, TIMING, RUN) is not None
