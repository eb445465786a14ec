"""What a server knows of a task decides when a read answers from it, without a Temporal server.

A watch's state machine (`server/_watch.py`) is fed hand-built `describe()` answers and history
events: what it knows answers a read until an event that changes an answer, a new run, a new leg
or aged progress makes it stale; a held read's schedule and the closed-answer cache's re-checks
follow the constants they name. How long a quiet task asks its clients to wait between polls,
and when its watch is let go, follow from the answers given and their times (`server/_quiet.py`).
`KnownTasks` (`server/_known.py`) runs against a stand-in for Temporal's history long poll, so a
held read is seen re-reading, ending, and answering the close at once, and a quiet task read
seldom is seen let go. None of these tests asks for the session's dev server; the wire behaviour itself is in
test_reads.py, test_read_watch.py and test_quiet_reads.py (which sees a real server let go of a
quiet task's long poll).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
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
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal import TemporalTasksSettings
from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._known import _CLOSED_RECHECK_MAX, Closed, KnownTasks
from fastmcp_temporal.server._quiet import _LONG_POLL_PERIOD, Quiet, QuietTasks
from fastmcp_temporal.server._watch import (
    _CLOSE_ONLY_FIRST_RECHECK,
    _CLOSE_ONLY_RECHECK,
    _PROGRESS_RECHECK_MIN,
    _QUICK_REREAD,
    _WATCH_IDLE,
    Known,
    Timing,
    Watch,
    _close_only_recheck,
    _progress_age,
)
from fastmcp_temporal.workflows.models import TaskMemo, TaskOutcome

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
    assert followed.current(101.0, PROGRESS_REFRESH, recheck=1.0) is followed.known

    followed.saw(event(8, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED), now=101.0)  # a memo upsert

    assert followed.changed == 8
    assert followed.current(101.0, PROGRESS_REFRESH, recheck=1.0) is None


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
    assert followed.current(101.0, PROGRESS_REFRESH, recheck=1.0) is followed.known


async def test_a_new_run_of_the_workflow_makes_what_is_known_stale() -> None:
    followed = watch(known=known(await description(run_id="run-0")))
    assert followed.current(101.0, PROGRESS_REFRESH, recheck=1.0) is None


async def test_while_only_the_close_is_followed_what_is_known_answers_for_the_recheck_alone() -> None:
    followed = watch(known=known(await description(), read_at=100.0), close_only=True)
    assert followed.current(100.4, PROGRESS_REFRESH, recheck=0.5) is followed.known
    assert followed.current(100.5, PROGRESS_REFRESH, recheck=0.5) is None
    followed.close_only = False
    assert followed.current(500.0, PROGRESS_REFRESH, recheck=0.5) is followed.known


async def test_a_leg_scheduled_after_what_is_known_is_read_once_its_progress_can_have_moved() -> None:
    followed = watch(known=known(await description(events=7)))
    followed.saw(event(8, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), now=200.0)

    first_progress = 200.0 + _PROGRESS_RECHECK_MIN.total_seconds()
    assert followed.changed == 0  # a schedule changes no answer by itself
    assert followed.current(first_progress - 0.01, PROGRESS_REFRESH, recheck=1.0) is followed.known
    assert followed.current(first_progress, PROGRESS_REFRESH, recheck=1.0) is None


async def test_running_legs_progress_is_reread_once_the_copy_is_as_old_as_it_had_stood_still() -> None:
    found = await description(legs=((STARTED, b"half way"),))
    followed = watch(known=known(found, read_at=100.0, progress_since=90.0))  # stood still for 10 s

    assert followed.current(109.9, PROGRESS_REFRESH, recheck=1.0) is followed.known
    assert followed.current(110.0, PROGRESS_REFRESH, recheck=1.0) is None


async def test_a_task_running_no_leg_is_never_reread_for_progress() -> None:
    followed = watch(known=known(await description(), read_at=100.0, progress_since=0.0))
    assert followed.known is not None and followed.known.progress is None
    assert followed.current(100.0 + 10 * PROGRESS_REFRESH, PROGRESS_REFRESH, recheck=1.0) is followed.known


async def test_how_old_known_progress_may_be_is_how_long_it_stood_still_within_bounds() -> None:
    found = await description(legs=((STARTED, b"step"),))
    minimum = _PROGRESS_RECHECK_MIN.total_seconds()
    assert _progress_age(known(found, read_at=100.0, progress_since=100.0), PROGRESS_REFRESH) == minimum
    assert _progress_age(known(found, read_at=100.0, progress_since=95.0), PROGRESS_REFRESH) == 5.0
    assert (
        _progress_age(known(found, read_at=100.0, progress_since=0.0), PROGRESS_REFRESH) == PROGRESS_REFRESH
    )


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


async def test_a_held_read_rechecks_every_read_recheck_and_sooner_while_the_close_alone_is_followed() -> None:
    assert watch(close_only=True, close_only_recheck=2.0).recheck(read_recheck=1.0) == 1.0
    assert watch(close_only=True, close_only_recheck=0.25).recheck(read_recheck=1.0) == 0.25
    assert watch(close_only_recheck=0.25).recheck(read_recheck=1.0) == 1.0


async def test_only_an_event_that_changes_an_answer_resolves_the_next_change() -> None:
    followed = watch()
    change = followed.next_change()
    assert followed.next_change() is change

    followed.saw(event(3, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), now=1.0)
    assert not change.done()
    followed.saw(event(4, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED), now=1.0)
    assert change.done()
    assert followed.next_change() is not change


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


async def test_a_read_right_after_a_working_answer_is_held_for_reread_hold() -> None:
    followed = watch()
    followed.record_shown(answer("working"), now=10.0)
    quick = _QUICK_REREAD.total_seconds()

    followed.hold_quick_reread(10.0 + quick / 2, reread_hold=1.0)
    assert followed.hold_until == 10.0 + quick / 2 + 1.0

    followed.hold_until = 0.0
    followed.hold_quick_reread(10.0 + quick + 0.001, reread_hold=1.0)
    assert followed.hold_until == 0.0


async def test_a_read_after_a_parked_answer_is_not_held_and_a_longer_hold_is_kept() -> None:
    parked = watch()
    parked.record_shown(answer("input_required", input_requests={"k": {}}), now=10.0)
    parked.hold_quick_reread(10.01, reread_hold=1.0)
    assert parked.hold_until == 0.0

    waited_on = watch(hold_until=50.0)
    waited_on.record_shown(answer("working"), now=10.0)
    waited_on.hold_quick_reread(10.01, reread_hold=1.0)
    assert waited_on.hold_until == 50.0


async def test_an_answer_differs_by_what_a_caller_can_tell_apart() -> None:
    followed = watch()
    followed.record_shown(answer("working", "step 1", input_requests={"a": {"method": "x"}}), now=1.0)
    assert not followed.differs(answer("working", "step 1", input_requests={"a": {"method": "y"}}))
    assert followed.differs(answer("working", "step 2", input_requests={"a": {}}))
    assert followed.differs(answer("working", "step 1", input_requests={"b": {}}))
    assert followed.differs(answer("completed", "step 1", input_requests={"a": {}}))


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
    changed: Callable[[str], None] = lambda key: None, **settings: Any
) -> AsyncIterator[tuple[KnownTasks, LongPolls]]:
    """A `KnownTasks` on the stand-in long poll, telling `changed`, its watches stopped at the end."""
    polls = LongPolls()
    tasks = KnownTasks(cast(Client, FakeClient(polls)), TemporalTasksSettings(**settings), _completed_state,
                       TemporalClock(), changed)
    try:
        yield tasks, polls
    finally:
        tasks.close()
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
    """The task methods' re-read, answering in turn what the test lists, and counting calls."""

    def __init__(self, *answers: GetTaskResult) -> None:
        self.answers = list(answers)
        self.progress_refresh: list[float] = []

    async def __call__(self, progress_refresh: float) -> GetTaskResult:
        self.progress_refresh.append(progress_refresh)
        return self.answers.pop(0)


def closed_answer(closed: Closed) -> GetTaskResult:
    return answer(closed.status, **closed.fields)


async def test_a_held_read_rereads_the_task_until_its_answer_changes() -> None:
    async with known_tasks(read_hold=timedelta(seconds=5), reread_hold=timedelta(0)) as (tasks, _):
        followed = created(tasks)
        followed.close_only_recheck = 0.02
        reread = Rereads(
            answer("working"), answer("working"), answer("input_required", input_requests={"k": {}})
        )

        held = await tasks.held_answer("task-wf", closed_answer, reread)

    assert held is not None and held.status == "input_required"
    assert reread.progress_refresh == [0.02, 0.02, 0.02]


async def test_a_hold_shorter_than_the_recheck_ends_unchanged_without_a_reread() -> None:
    async with known_tasks(read_hold=timedelta(milliseconds=50), reread_hold=timedelta(0)) as (tasks, _):
        created(tasks)
        reread = Rereads()

        assert await tasks.held_answer("task-wf", closed_answer, reread) is None

    assert reread.progress_refresh == []


async def test_the_close_ends_a_held_read_at_once_with_the_result_from_the_close_event() -> None:
    async with known_tasks(read_hold=timedelta(seconds=5), reread_hold=timedelta(0)) as (tasks, polls):
        created(tasks)
        reread = Rereads()
        held = asyncio.ensure_future(tasks.held_answer("task-wf", closed_answer, reread))
        await polls.responses.put(await _close_event(TaskOutcome(result={"answer": 42})))

        done = await asyncio.wait_for(held, timeout=5)  # a re-read, at the first recheck, would fail

        assert tasks.cached_closed("task-wf") is not None
    assert done is not None and (done.status, done.result) == ("completed", {"answer": 42})
    assert reread.progress_refresh == []


async def _close_event(outcome: TaskOutcome) -> GetWorkflowExecutionHistoryResponse:
    """The last page of a completed run's history: its close event, and no next page."""
    (result,) = await DataConverter.default.encode([outcome])
    close = event(9, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    close.workflow_execution_completed_event_attributes.CopyFrom(
        WorkflowExecutionCompletedEventAttributes(result=Payloads(payloads=[result]))
    )
    close.event_time.FromDatetime(datetime.now(timezone.utc))
    return GetWorkflowExecutionHistoryResponse(history=History(events=[close]))


async def test_a_watch_signals_the_events_that_change_an_answer_by_the_tasks_key() -> None:
    signalled: list[str] = []
    async with known_tasks(signalled.append) as (tasks, polls):
        followed = created(tasks)
        followed.close_only = False
        bookkeeping = event(5, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        await polls.responses.put(GetWorkflowExecutionHistoryResponse(history=History(events=[bookkeeping]),
                                                                      next_page_token=b"more"))
        await polls.responses.put(await _close_event(TaskOutcome(result={"answer": 42})))

        await asyncio.wait_for(followed.follow, timeout=5)  # the close ends the watch

    assert signalled == ["task-wf"]


async def test_a_task_created_here_is_followed_for_its_close_alone_and_its_first_reads_held() -> None:
    async with known_tasks(read_hold=timedelta(milliseconds=250)) as (tasks, polls):
        followed = created(tasks)
        await asyncio.sleep(0)

        assert followed.close_only and followed.hold_until == followed.last_read + 0.25
        assert followed.answered_at == followed.last_read  # the creation answered `working`
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
PERIOD = _LONG_POLL_PERIOD.total_seconds()
REMEMBERED = 1_000  # quiet_tasks
PARKED = answer("input_required", input_requests={"k": {}})


def test_a_quiet_task_asks_for_its_own_interval_then_half_its_quiet_up_to_the_cap() -> None:
    quiet = Quiet(shown=hash(("working", None, frozenset())), since=100.0, answered_at=100.0, apart=float("inf"))
    assert quiet.interval(100.0 + CAP - 0.1, BASE, CAP) == BASE
    assert quiet.interval(100.0 + CAP, BASE, CAP) == CAP / 2
    assert quiet.interval(100.0 + 1.5 * CAP, BASE, CAP) == 0.75 * CAP
    assert quiet.interval(100.0 + 10 * CAP, BASE, CAP) == CAP
    assert quiet.interval(100.0 + 10 * CAP, BASE, cap=BASE) == BASE  # a cap at the task's own: off
    assert quiet.interval(100.0 + 8.0, BASE, cap=8.0) == BASE  # half its quiet is below its own


def test_the_same_answer_keeps_its_quiet_and_any_change_starts_it_anew() -> None:
    quiet = QuietTasks(timedelta(seconds=CAP), REMEMBERED)
    first = quiet.quiet_after("t", PARKED, now=0.0)
    assert first is not None and (first.since, first.apart) == (0.0, float("inf"))
    again = quiet.quiet_after("t", answer("input_required", input_requests={"k": {"other": 1}}), now=40.0)
    assert again is not None and (again.since, again.apart) == (0.0, 40.0)
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


def test_a_quiet_task_read_here_further_apart_than_a_long_poll_lasts_is_let_go() -> None:
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
