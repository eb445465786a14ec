"""`tasks/get`, `tasks/update` and `tasks/cancel`, answered from Temporal.

Reads use `describe()` and the memo the workflow keeps, plus the result from
history once the workflow is closed, so they need no worker online. An update is a
signal that Temporal has persisted before we acknowledge it; the workflow applies
it. Every lookup derives the workflow id from the caller's own scope tag (and, only
when nothing is found under it, the caller's tags under the other listed encryption
keys, then its legacy tag: see `_scope`), so a missing, expired or foreign task id all
get the same -32602.

Reads scale with tasks, not with polls. A server follows each running task it is
asked about (or created) with one long poll of its history, and answers reads from
its last `describe()` of the task for as long as that poll has seen no event past
it that changes an answer: an ask, an answer, a cancel through any server, the close
all add one, so they show at the next read (a workflow's own bookkeeping, its
workflow tasks, timers and a leg's attempts, changes none). A task this server just
created is followed for its close alone for its first 2 s, so a short task costs one
long poll instead of one per event; meanwhile a held read first re-reads it after
500 ms (most tasks queued in a burst have closed by then), then what the server knows
answers for 250 ms after each `describe()` while the task runs, so an ask shows within
that, and for 1 s while it waits for a worker, so a task queued behind a burst is not
described four times a second. Progress (a running leg's heartbeat details) adds none:
it is re-read at most once per `progress_refresh` (30 s), sooner while it changes
often. A quiet task so costs one request per long poll (Temporal ends each after
20 s) instead of one `describe()` per read. Concurrent reads of one task share one
`describe()`; a closed task is answered from a bounded in-process cache until its TTL
ends, but a closed run can be followed by another (an operator's reset): a read one poll
interval after the close was last found current describes the workflow to compare its
run, then 2, 4 ... intervals later, at most a minute apart. A server follows at most `watched_tasks` tasks
(Temporal caps a namespace's concurrent long polls; one it refuses pauses following new
tasks for a minute); past that, and when a long poll fails, reads describe the task
every time. A task no read asked about for a minute (and three of its poll intervals)
is let go.

For a task's first `read_hold` (250 ms) after this server created it, a `tasks/get`
first waits for the task to change from what reads last answered, so a short task's
result reaches the caller as soon as it exists instead of at the caller's next poll.
The close ends the wait at once; an ask, progress or a cancel through another server
shows at the next re-read (as above in a task's first 2 s, then every `read_recheck`,
1 s, or at the event once every event is followed). A `tasks/get` that comes within
100 ms of a `working` answer of the task (a client polling fast, waiting on it) waits
the same way, for up to `reread_hold` (1 s), on any server that follows the task. The task's creation is such an answer (its
`CreateTaskResult` says `working`) unless `read_hold` is 0, so the FastMCP client, which
reads the moment a task is created, sends one read for a task done within a second
instead of one per step of its 20, 40, 80 ms ... ramp. Both holds are short because a
client's request timeout cuts a held read short with an error.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    HistoryEventFilterType,
    PendingActivityState,
    PendingWorkflowTaskState,
)
from temporalio.api.errordetails.v1 import NamespaceNotFoundFailure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import CancelTaskResult, GetTaskResult, TaskStatus, UpdateTaskResult
from fastmcp_temporal._wire import encode_answer
from fastmcp_temporal.connection._sizes import converted, encoded_size_of
from fastmcp_temporal.server._backend import Backend, UnreadablePayloadError
from fastmcp_temporal.server._creation import StartedWorkflow
from fastmcp_temporal.server._scope import workflow_id
from fastmcp_temporal.server._stalled import EXPIRED_REASON, StalledTasks
from fastmcp_temporal.workflows.models import (
    SUBMIT_INPUT_SIGNAL,
    InputAnswers,
    TaskOutcome,
    UnreadablePayload,
    open_requests,
)

DEFAULT_POLL_INTERVAL_MS = 5000

# How long an update waits for the workflow to show its answers applied, so the
# client's immediate re-poll never sees an answered request again. The re-reads back
# off (20 ms growing to 500 ms): ~17 `describe()` calls when no worker applies them.
_APPLY_WAIT = timedelta(seconds=5)
_APPLY_FIRST_POLL = 0.02
_APPLY_MAX_POLL = 0.5
_APPLY_BACKOFF = 1.5
_REMEMBERED_ANSWERS = 10_000
# Closed tasks answered from memory: at most this many, each result at most this big.
_CLOSED_CACHE_ENTRIES = 1_000
_CLOSED_CACHE_MAX_RESULT_CHARS = 64 * 1024
# A remembered close is re-checked for a new run (a reset) one poll interval after it was
# known current, then after twice as long each time the run is the same, up to this.
_CLOSED_RECHECK_MAX = timedelta(minutes=1)
# A followed task no read asked about for this long (and three of its poll intervals)
# is let go when its long poll next returns.
_WATCH_IDLE = timedelta(minutes=1)
# Temporal refused a long poll (its cap on concurrent long polls per namespace): follow
# no new task for this long.
_REFUSED_PAUSE = timedelta(minutes=1)
# A running leg's progress, unchanged for a while, is re-read once the known copy is as
# old as the time it had stood still: at least this, at most `progress_refresh`.
_PROGRESS_RECHECK_MIN = timedelta(seconds=1)
# A task this server just created is followed for its close alone this long: a short
# task's dozen events would each end a long poll, and none of them changes an answer.
_CLOSE_ONLY_FOR = timedelta(seconds=2)
# Meanwhile a held read first re-reads the task this long after it began: most of a
# burst's queued tasks close before, and a tool that asks at once shows its ask by then.
_CLOSE_ONLY_FIRST_RECHECK = timedelta(milliseconds=500)
# Then what a `describe()` found answers, and a held read re-reads the task, this long
# after it while the task runs, so an ask shows within it; while it waits for a worker (a
# burst's queue), the time doubles with each re-read up to `read_recheck`.
_CLOSE_ONLY_RECHECK = timedelta(milliseconds=250)
# Temporal answers a long poll empty this long before the caller's deadline.
_LONG_POLL_TAIL = timedelta(seconds=1)
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


@dataclass
class _Task:
    task_id: str
    handle: WorkflowHandle[Any, Any]
    description: WorkflowExecutionDescription
    memo: dict[str, Any]

    @property
    def running(self) -> bool:
        return self.description.status == Status.RUNNING

    @property
    def cancel_requested(self) -> bool:
        return self.description.raw_description.workflow_extended_info.cancel_requested

    def outstanding(self) -> dict[str, Any]:
        if not self.running or self.cancel_requested:
            return {}
        return open_requests(self.memo)


_Shown = tuple[TaskStatus, str | None, frozenset[str]]
_CREATED: _Shown = ("working", None, frozenset())


@dataclass(frozen=True)
class _Timing:
    """The wire's timing fields of a task, fixed when it was created."""

    created_at: str
    ttl_ms: int
    poll_interval_ms: int


@dataclass(frozen=True)
class _Known:
    """A task as one `describe()` found it, and when (event-loop time)."""

    description: WorkflowExecutionDescription
    memo: dict[str, Any]
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
class _Watch:
    """A task this server follows by a long poll of its history (`follow`).

    `known` answers reads while the poll has seen no event past it that changes an
    answer, and, when a leg runs, while its progress is fresh enough; a young task's
    reads wait for a change from what reads last answered (`shown`) until `hold_until`.
    While the poll waits for the close alone (`close_only`), other events go unseen, so
    `known` answers for `close_only_recheck` at most (see `_CLOSE_ONLY_FIRST_RECHECK`).
    """

    handle: WorkflowHandle[Any, TaskOutcome]
    timing: _Timing
    last_read: float
    run_id: str = ""  # the run followed; learned from its first event when not given
    changed: int = 0  # the last history event that changes what a read answers
    leg_scheduled: tuple[int, float] = (0, 0.0)  # the last leg's schedule event, and when it was seen
    close_only: bool = False
    close_only_recheck: float = _CLOSE_ONLY_FIRST_RECHECK.total_seconds()
    known: _Known | None = None
    hold_until: float = 0.0
    shown: _Shown = _CREATED
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

    def current(self, now: float, progress_refresh: float, recheck: float) -> _Known | None:
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


def _close_only_recheck(previous: float, task: _Task) -> float:
    """How long what a `describe()` found answers while the close alone is followed: 250 ms
    while the task runs (an ask may come at any moment), doubling while it waits for a worker
    (capped by `read_recheck`)."""
    raw = task.description.raw_description
    running = raw.pending_workflow_task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED or any(
        leg.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for leg in raw.pending_activities
    )
    return _CLOSE_ONLY_RECHECK.total_seconds() if running else previous * 2


def _progress_age(known: _Known, progress_refresh: float) -> float:
    """How old known progress may be when read: as old as it had stood still, within bounds."""
    still = known.read_at - known.progress_since
    return min(max(still, _PROGRESS_RECHECK_MIN.total_seconds()), progress_refresh)


@dataclass(frozen=True)
class _Closed:
    """What a closed run of a task answers until its TTL ends, while it is the workflow's latest.

    A run never changes once closed, but an operator can start the workflow again (a reset):
    a read `recheck` seconds after `checked_at` describes the workflow to compare its run.
    """

    status: TaskStatus
    fields: dict[str, Any]
    timing: _Timing
    expires_at: datetime
    run_id: str
    checked_at: float  # event-loop time `run_id` was last known to be the latest run
    recheck: float

    def due(self, now: float) -> bool:
        return now - self.checked_at >= self.recheck

    def confirmed(self, now: float) -> _Closed:
        """Still the latest run at `now`: re-checked after twice as long next time."""
        recheck = min(2 * self.recheck, _CLOSED_RECHECK_MAX.total_seconds())
        return replace(self, checked_at=now, recheck=recheck)


class TaskMethods:
    """The three task methods for one running extension."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        # Keys this process has delivered whose retirement the workflow has not
        # shown yet (no worker online); hidden from reads so nobody asks twice.
        self._answered: OrderedDict[str, set[str]] = OrderedDict()
        self._closed: OrderedDict[str, _Closed] = OrderedDict()
        self._reads: dict[str, asyncio.Future[tuple[WorkflowExecutionDescription, dict[str, Any]]]] = {}
        self._watches: dict[str, _Watch] = {}
        self._stalled = StalledTasks(backend.client)
        self._storeless = replace(backend.client.data_converter, external_storage=None)
        self._progress_refresh = backend.settings.progress_refresh.total_seconds()
        self._follow_after = 0.0  # loop time before which no new task is followed (see _REFUSED_PAUSE)

    def watch(self, started: StartedWorkflow) -> None:
        """Follow a task just created here, for its close alone at first, holding its first
        reads (see the module docstring)."""
        key = self._key(started.task_id)
        timing = _Timing(started.created_at, self._backend.ttl_ms, started.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS)
        watch = self._follow(key, self._handle(key), timing, started.handle.result_run_id or "", close_only=True)
        if watch is not None and (read_hold := self._backend.settings.read_hold):
            watch.hold_until = watch.last_read + read_hold.total_seconds()
            watch.answered_at = watch.last_read  # its creation answered `working`: see `_hold_quick_reread`

    def close(self) -> None:
        """Stop every watch (the server is stopping)."""
        for watch in list(self._watches.values()):
            if watch.follow is not None:
                watch.follow.cancel()

    async def get(self, task_id: str) -> GetTaskResult:
        if (closed := self._cached_closed(task_id)) is not None:
            return self._closed_result(task_id, closed)
        key = self._key(task_id)
        loop = asyncio.get_running_loop()
        watch = self._watches.get(key)
        answer = None
        if watch is not None:
            self._hold_quick_reread(watch, loop.time())
            answer = await self._changed_within_hold(task_id, watch)
        if answer is None:
            answer = await self._answer(await self._current(task_id, self._progress_refresh))
        if (watch := self._watches.get(key)) is not None:
            watch.shown, watch.answered_at = _shown(answer), loop.time()
        return answer

    def _hold_quick_reread(self, watch: _Watch, now: float) -> None:
        """Hold a read that comes right after a `working` answer (the creation's among them): its
        client is waiting on the task."""
        if watch.shown[0] == "working" and now - watch.answered_at < _QUICK_REREAD.total_seconds():
            watch.hold_until = max(watch.hold_until, now + self._backend.settings.reread_hold.total_seconds())

    async def _changed_within_hold(self, task_id: str, watch: _Watch) -> GetTaskResult | None:
        """The task's answer once it differs from what reads last got, within the hold.

        The close comes from the watch at once, and so does any change while the watch
        follows every event; progress, and while it follows the close alone an ask or a
        cancel through another server, from re-reading the task every `read_recheck`.
        """
        loop = asyncio.get_running_loop()
        while (hold := watch.hold_until - loop.time()) > 0 and watch.follow is not None:
            recheck = self._recheck(watch)
            changed = watch.next_change()
            await asyncio.wait([watch.follow, changed], timeout=min(hold, recheck), return_when=asyncio.FIRST_COMPLETED)
            if (closed := self._cached_closed(task_id)) is not None:
                return self._closed_result(task_id, closed)
            if watch.follow.done() or (hold <= recheck and not changed.done()):
                return None
            answer = await self._answer(await self._current(task_id, min(recheck, self._progress_refresh)))
            if _shown(answer) != watch.shown:
                return answer
        return None

    def _recheck(self, watch: _Watch) -> float:
        """How often a held read re-reads the task; while the watch sees only the close, how long
        what it knows answers."""
        recheck = self._backend.settings.read_recheck.total_seconds()
        return min(recheck, watch.close_only_recheck) if watch.close_only else recheck

    async def _answer(self, task: _Task) -> GetTaskResult:
        fields: dict[str, Any] = {}
        if not task.running:
            return self._closed_result(task.task_id, await self._close(task))
        if await self._stalled.expire_if_due(task.handle, task.description):
            raise task_not_found(task.task_id)
        if task.cancel_requested:
            status = "cancelled"
        elif outstanding := self._unanswered(task):
            status, fields = "input_required", {"input_requests": outstanding}
        else:
            status, fields = "working", {"status_message": await self._status_message(task)}
        if status != "working":  # parked or cancelling: its close is no longer imminent
            self._end_hold(task.task_id)
        return self._result(task, status, **fields)

    async def _current(self, task_id: str, progress_refresh: float) -> _Task:
        """The task as this server's watch knows it, or as a (shared) `describe()` finds it."""
        key = self._key(task_id)
        loop = asyncio.get_running_loop()
        watch = self._watches.get(key)
        if watch is not None:
            watch.last_read = loop.time()
            await watch.first_page()
            if (known := watch.current(loop.time(), progress_refresh, self._recheck(watch))) is not None:
                return _Task(task_id, watch.handle, known.description, known.memo)
        read_at = loop.time()
        task = await self._find(task_id, shared=True)
        if task.running and (watch := self._watches.get(key)) is None:
            watch = self._follow(key, task.handle, self._timing(task), task.description.run_id)
        if watch is not None and watch.handle.id == task.handle.id:
            watch.known = _known(task, read_at, watch.known)
            if watch.close_only:
                watch.close_only_recheck = _close_only_recheck(watch.close_only_recheck, task)
        return task

    def _follow(
        self,
        key: str,
        handle: WorkflowHandle[Any, TaskOutcome],
        timing: _Timing,
        run_id: str = "",
        *,
        close_only: bool = False,
    ) -> _Watch | None:
        """Start following a task's history, unless `watched_tasks` are followed already.

        Nor for a while after Temporal refused a long poll: each is one of the namespace's
        concurrent long polls, which Temporal caps (`frontend.namespaceCount`).
        """
        now = asyncio.get_running_loop().time()
        if len(self._watches) >= self._backend.settings.watched_tasks or now < self._follow_after:
            return None
        watch = _Watch(handle, timing, now, run_id, close_only=close_only)
        if close_only:
            watch.read_history.set()  # nothing before the close is looked for
        follow = asyncio.create_task(self._follow_history(key, watch))
        watch.follow = follow
        self._watches[key] = watch
        follow.add_done_callback(lambda done: self._unwatch(key, done))
        return watch

    async def _follow_history(self, key: str, watch: _Watch) -> None:
        """Long-poll the run's history for its next events until it closes or nobody reads it.

        A watch that starts `close_only` waits for the close alone for `_CLOSE_ONLY_FOR`,
        then reads the whole history and follows every event. An error ends the watch:
        reads then describe the task, and follow it anew; a refusal (too many long polls)
        also pauses following new tasks.
        """
        client = self._backend.client
        loop = asyncio.get_running_loop()
        request = _history_request(client.namespace, watch)
        while True:
            timeout = _CLOSE_ONLY_FOR + _LONG_POLL_TAIL if watch.close_only else None
            try:
                response = await client.workflow_service.get_workflow_execution_history(request, timeout=timeout)
            except RPCError as exc:
                if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                    self._follow_after = loop.time() + _REFUSED_PAUSE.total_seconds()
                if not (watch.close_only and exc.status == RPCStatusCode.DEADLINE_EXCEEDED):
                    raise
                response = GetWorkflowExecutionHistoryResponse()  # no close yet
            if watch.close_only and not response.history.events:
                watch.close_only = False  # still running after _CLOSE_ONLY_FOR: follow every event
                watch.read_history.clear()  # reads wait for the events so far
                request = _history_request(client.namespace, watch)
                continue
            for event in response.history.events:
                if not watch.run_id and event.HasField("workflow_execution_started_event_attributes"):
                    watch.run_id = event.workflow_execution_started_event_attributes.original_execution_run_id
                if event.HasField("workflow_execution_completed_event_attributes"):
                    await self._remember_outcome(key, watch, event)
                watch.saw(event, loop.time())  # after: a held read it wakes finds the outcome
            watch.read_history.set()
            if not response.next_page_token:  # the run has closed
                return
            if not response.history.events and watch.idle(loop.time()):
                return
            request.next_page_token = response.next_page_token

    async def _remember_outcome(self, key: str, watch: _Watch, event: HistoryEvent) -> None:
        """Cache a completed task's answer from its close event, when small enough.

        Decoded without the payload store: a stored result is never fetched just to be
        cached (its reference fails to decode, and it is too big for the cache anyway).
        Anything else (failed, cancelled, expired, a stored result) reads describe.
        """
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        if sum(payload.ByteSize() for payload in payloads) > _CLOSED_CACHE_MAX_RESULT_CHARS:
            return
        try:
            (outcome,) = await self._storeless.decode(payloads, [TaskOutcome])
        except Exception:  # a stored result's reference, or one this server cannot decrypt
            return
        if (state := _outcome_state(outcome)) is not None:
            closed_at = event.event_time.ToDatetime(tzinfo=timezone.utc)
            expires_at = closed_at + timedelta(milliseconds=watch.timing.ttl_ms)
            self._remember_closed(key, *state, watch.timing, expires_at, watch.run_id)

    def _unwatch(self, key: str, follow: asyncio.Task[None]) -> None:
        watch = self._watches.get(key)
        if watch is not None and watch.follow is follow:
            del self._watches[key]
        if not follow.cancelled():
            follow.exception()  # a failed long poll only ends the watch; reads describe

    def _end_hold(self, task_id: str) -> None:
        if (watch := self._watches.get(self._key(task_id))) is not None:
            watch.hold_until = 0.0

    def _forget(self, task_id: str) -> None:
        """After a write through this server, later reads read afresh and are not held.

        A task written to is interactive: one followed for its close alone is let go, so
        the next read follows every event and its holds end at the next ask.
        """
        if (watch := self._watches.get(self._key(task_id))) is not None:
            watch.hold_until, watch.known = 0.0, None
            if watch.close_only and watch.follow is not None:
                watch.follow.cancel()

    def _key(self, task_id: str) -> str:
        """The caller's task's workflow id: what every cache and watch here is keyed by."""
        return workflow_id(self._backend.caller_scope().tag, task_id)

    def _handle(self, key: str) -> WorkflowHandle[Any, TaskOutcome]:
        return self._backend.client.get_workflow_handle(key, result_type=TaskOutcome)

    def _timing(self, task: _Task) -> _Timing:
        memo = task.memo
        return _Timing(
            created_at=memo.get("createdAt") or task.description.start_time.isoformat(),
            ttl_ms=int(memo.get("ttlMs") or self._backend.ttl_ms),
            poll_interval_ms=int(memo.get("pollIntervalMs") or DEFAULT_POLL_INTERVAL_MS),
        )

    async def update(self, task_id: str, responses: dict[str, Any]) -> UpdateTaskResult:
        task = await self._find(task_id)  # not a remembered close: a new run may be asking
        outstanding = self._unanswered(task)
        answers = {
            key: validated_answer(key, outstanding[key], raw)
            for key, raw in responses.items()
            if key in outstanding
        }
        if answers:
            applied_bytes = await encoded_size_of(self._backend.client.data_converter, _answered_bytes(task))
            carried = int(task.memo.get("inputBytes") or 0) + applied_bytes
            if not await submit_answers(self._backend, task.handle, answers, carried):
                return UpdateTaskResult()  # closed meanwhile: nothing is waiting for answers
            self._remember_answered(task_id, answers)
            self._reads.pop(task.handle.id, None)
            self._forget(task_id)
            await self._wait_until_applied(task, set(answers))
        return UpdateTaskResult()

    async def cancel(self, task_id: str) -> CancelTaskResult:
        task = await self._find(task_id, shared=True)  # not a remembered close: a new run may be running
        if task.running:
            if not task.cancel_requested:
                await task.handle.cancel()
            await self._stalled.close_cancelled(task.handle)  # no worker may be left to run it
            self._reads.pop(task.handle.id, None)  # later reads must see the cancel
            self._forget(task_id)
        return CancelTaskResult()

    async def _find(self, task_id: str, *, shared: bool = False) -> _Task:
        """Describe the task's workflow; `shared` joins a read of it already under way.

        Writes (update, cancel) read fresh and drop the shared read, so no read that
        starts after their acknowledgement returns an older state.
        """
        # the tags under older keys, and the legacy tag, are tried only on NOT_FOUND
        for scope_tag in self._backend.caller_scope().lookup_tags:
            handle = self._handle(workflow_id(scope_tag, task_id))
            try:
                description, memo = await (self._shared_read(handle) if shared else _read(handle))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND and not _namespace_missing(exc):
                    continue
                raise
            if memo.get("scope") != scope_tag or _expired(description, memo):
                raise task_not_found(task_id)
            return _Task(task_id, handle, description, memo)
        raise task_not_found(task_id)

    async def _shared_read(
        self, handle: WorkflowHandle[Any, Any]
    ) -> tuple[WorkflowExecutionDescription, dict[str, Any]]:
        read = self._reads.get(handle.id)
        if read is None:
            read = asyncio.ensure_future(_read(handle))
            self._reads[handle.id] = read
            read.add_done_callback(lambda done: self._drop_read(handle.id, done))
        return await asyncio.shield(read)

    def _drop_read(self, key: str, done: asyncio.Future[Any]) -> None:
        if self._reads.get(key) is done:
            del self._reads[key]
        if not done.cancelled():
            done.exception()  # every reader may have gone; the error is theirs, not the loop's

    def _cached_closed(self, task_id: str) -> _Closed | None:
        """The task's remembered close, unless its TTL has ended or its run is due a re-check."""
        key = self._key(task_id)
        closed = self._closed.get(key)
        if closed is not None and closed.expires_at < datetime.now(timezone.utc):
            del self._closed[key]
            return None
        if closed is not None and closed.due(asyncio.get_running_loop().time()):
            return None
        return closed

    async def _close(self, task: _Task) -> _Closed:
        """The closed task's final answer: the remembered one while its run is the latest, else
        read, and remembered when small enough."""
        key = self._key(task.task_id)  # a legacy task's too
        known = self._closed.get(key)
        if known is not None and known.run_id == task.description.run_id:
            self._closed[key] = known.confirmed(asyncio.get_running_loop().time())
            return self._closed[key]
        status, fields = await self._closed_state(task)
        expires_at, run_id = _expires_at(task.description, task.memo), task.description.run_id
        return self._remember_closed(key, status, fields, self._timing(task), expires_at, run_id)

    def _remember_closed(
        self,
        key: str,
        status: TaskStatus,
        fields: dict[str, Any],
        timing: _Timing,
        expires_at: datetime,
        run_id: str,
    ) -> _Closed:
        """A closed run's answer, remembered (in place of an earlier run's) when its result is small
        enough; first re-checked one poll interval on."""
        now = asyncio.get_running_loop().time()
        closed = _Closed(status, fields, timing, expires_at, run_id, now, timing.poll_interval_ms / 1000)
        self._closed.pop(key, None)
        if len(json.dumps(fields.get("result"), default=str)) <= _CLOSED_CACHE_MAX_RESULT_CHARS:
            self._closed[key] = closed
            while len(self._closed) > _CLOSED_CACHE_ENTRIES:
                self._closed.popitem(last=False)
        return closed

    def _closed_result(self, task_id: str, closed: _Closed) -> GetTaskResult:
        return _answer_of(task_id, closed.status, closed.timing, **closed.fields)

    async def _closed_state(self, task: _Task) -> tuple[TaskStatus, dict[str, Any]]:
        status = task.description.status
        if status == Status.CANCELED or task.cancel_requested:  # once the wire said cancelled, it stays so
            return "cancelled", {}
        if status == Status.COMPLETED:
            outcome = await task.handle.result()
            if isinstance(outcome, UnreadablePayload):
                raise UnreadablePayloadError(f"task {task.task_id} completed, but its result is lost. {outcome.reason}")
            state = _outcome_state(outcome)
            if state is None:
                raise task_not_found(task.task_id)
            return state
        failure = await _failure(task)
        if status == Status.TERMINATED and failure["message"] == EXPIRED_REASON:  # ended by `_stalled`
            raise task_not_found(task.task_id)
        return "failed", _failed_fields(failure)

    async def _status_message(self, task: _Task) -> str | None:
        converter = self._backend.client.data_converter
        for pending in task.description.raw_description.pending_activities:
            if pending.heartbeat_details.payloads:
                (details,) = await converter.decode(pending.heartbeat_details.payloads)
                return details.get("statusMessage") if isinstance(details, dict) else None
        return None

    def _unanswered(self, task: _Task) -> dict[str, Any]:
        answered = self._answered.get(task.task_id, set())
        return {k: v for k, v in task.outstanding().items() if k not in answered}

    def _remember_answered(self, task_id: str, answers: dict[str, Any]) -> None:
        self._answered.setdefault(task_id, set()).update(answers)
        self._answered.move_to_end(task_id)
        while len(self._answered) > _REMEMBERED_ANSWERS:
            self._answered.popitem(last=False)

    async def _wait_until_applied(self, task: _Task, keys: set[str]) -> None:
        """Wait (bounded) until the workflow's memo no longer lists the answered keys."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _APPLY_WAIT.total_seconds()
        pause = _APPLY_FIRST_POLL
        while loop.time() < deadline:
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            current = await self._find(task.task_id)
            if not keys & set(current.outstanding()):
                self._forget_answered(task.task_id, keys)
                return
            pause = min(pause * _APPLY_BACKOFF, _APPLY_MAX_POLL)

    def _forget_answered(self, task_id: str, keys: set[str]) -> None:
        """The workflow shows these keys retired; stop hiding them (others may still wait)."""
        remembered = self._answered.get(task_id, set())
        remembered -= keys
        if not remembered:
            self._answered.pop(task_id, None)

    def _result(self, task: _Task, status: TaskStatus, **fields: Any) -> GetTaskResult:
        return _answer_of(task.task_id, status, self._timing(task), **fields)


def _answer_of(task_id: str, status: TaskStatus, timing: _Timing, **fields: Any) -> GetTaskResult:
    return GetTaskResult(
        task_id=task_id,
        status=status,
        created_at=timing.created_at,
        last_updated_at=datetime.now(timezone.utc).isoformat(),
        ttl_ms=timing.ttl_ms,
        poll_interval_ms=timing.poll_interval_ms,
        **fields,
    )


def _history_request(namespace: str, watch: _Watch) -> GetWorkflowExecutionHistoryRequest:
    """A long poll of the watched run's history: every event, or its close alone."""
    return GetWorkflowExecutionHistoryRequest(
        namespace=namespace,
        execution=WorkflowExecution(workflow_id=watch.handle.id, run_id=watch.run_id),
        wait_new_event=True,
        skip_archival=True,
        history_event_filter_type=(
            HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
            if watch.close_only
            else HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT
        ),
    )


def _known(task: _Task, read_at: float, before: _Known | None) -> _Known:
    """What a `describe()` started at `read_at` found, carrying over since when progress stood still."""
    known = _Known(task.description, task.memo, read_at, progress_since=read_at)
    if before is not None and before.progress == known.progress and before.read_at <= read_at:
        return replace(known, progress_since=before.progress_since)
    return known


def _answered_bytes(task: _Task) -> int:
    """The converted size of answers already applied in the round the task is parked on."""
    leg, size = task.memo.get("answeredBytes") or (None, 0)
    parked_legs = {key.rpartition(":")[2].partition(".")[0] for key in task.outstanding()}
    return int(size) if parked_legs == {str(leg)} else 0


def _shown(answer: GetTaskResult) -> _Shown:
    """What a caller can tell apart between two answers."""
    return answer.status, answer.status_message, frozenset(answer.input_requests or ())


def task_not_found(task_id: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=f"Task {task_id} not found")


def _namespace_missing(exc: RPCError) -> bool:
    """A busy server can briefly not find the namespace: a retryable fault, not a missing task."""
    return any(detail.Is(NamespaceNotFoundFailure.DESCRIPTOR) for detail in exc.grpc_status.details)


async def _read(handle: WorkflowHandle[Any, Any]) -> tuple[WorkflowExecutionDescription, dict[str, Any]]:
    description = await handle.describe()
    return description, await description.memo()


def _expires_at(description: WorkflowExecutionDescription, memo: dict[str, Any]) -> datetime:
    assert description.close_time is not None
    return description.close_time + timedelta(milliseconds=int(memo.get("ttlMs") or 0))


def _expired(description: WorkflowExecutionDescription, memo: dict[str, Any]) -> bool:
    if description.close_time is None:
        return False
    return _expires_at(description, memo) < datetime.now(timezone.utc)


def validated_answer(key: str, request: dict[str, Any], raw: Any) -> dict[str, Any]:
    """An answer to the outstanding request `key`, encoded as a leg reads it; -32602 when invalid."""
    try:
        return encode_answer(request, raw)
    except ValidationError as exc:
        raise invalid_answer(key, request, exc) from None


def invalid_answer(key: str, request: dict[str, Any], exc: ValidationError) -> MCPError:
    return MCPError(
        code=mcp_types.INVALID_PARAMS,
        message=f"Invalid answer for input request {key!r} ({request.get('method')}): {exc}",
    )


async def submit_answers(
    backend: Backend, handle: WorkflowHandle[Any, Any], answers: dict[str, Any], carried_bytes: int
) -> bool:
    """Signal validated answers to a parked workflow (`submit_input`); False when it has closed.

    Refused (-32602) before anything is signalled when the next leg could not carry them: its
    input holds the arguments and every answer of this round (`carried_bytes` of them already
    applied or sent with the arguments), so it is measured whole, against the limit that will
    apply to it (Temporal's payload limit, or the store's); the workflow checks it again
    before the leg.
    """
    value, size = await converted(backend.client.data_converter, InputAnswers(answers))
    what = "The next leg's input (the task's arguments with this round's answers)"
    if refusal := backend.payload_limits.refusal(what, size + carried_bytes):
        raise MCPError(code=mcp_types.INVALID_PARAMS, message=refusal)
    try:
        await handle.signal(SUBMIT_INPUT_SIGNAL, value)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
    return True


def _outcome_state(outcome: TaskOutcome) -> tuple[TaskStatus, dict[str, Any]] | None:
    """What a completed workflow's outcome answers; None when the task expired unanswered."""
    if outcome.expired:
        return None
    if outcome.error is not None:
        return "failed", _failed_fields(outcome.error)
    return "completed", {"result": outcome.result}


def _failed_fields(error: dict[str, Any]) -> dict[str, Any]:
    error = {k: v for k, v in error.items() if v is not None}
    return {"status_message": error.get("message"), "error": error}


async def _failure(task: _Task) -> dict[str, Any]:
    try:
        await task.handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        message = str(cause.message if hasattr(cause, "message") else cause)
        return {"code": mcp_types.INTERNAL_ERROR, "message": message or "Task failed"}
    except Exception as exc:  # terminated or timed out: no failure detail to read
        return {"code": mcp_types.INTERNAL_ERROR, "message": f"Task failed: {exc}"}
    return {"code": mcp_types.INTERNAL_ERROR, "message": "Task failed"}
