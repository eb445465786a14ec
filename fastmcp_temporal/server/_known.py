"""What a server knows of the tasks it reads, so reads scale with tasks, not with polls.

A server follows each running task it is asked about (or created) with one long poll of
its history (a `Watch`), and answers reads from its last `describe()` of the task (`Known`)
for as long as that poll has seen no event past it that changes an answer. An ask, an
answer, a cancel through any server and the close each add such an event, so they show
at the next read; a workflow's own bookkeeping (`_UNSEEN_BY_READS`) changes none. Progress
(a running leg's heartbeat details) adds no event: a copy is re-read once as old as its
progress had stood still, within `_PROGRESS_RECHECK_MIN` and `progress_refresh`, and a
message after a longer stillness comes with the leg's `progressed` signal, an event
(`Watch.progress_due`, `Watch.saw`).
A quiet task so costs one request per long poll instead of one `describe()` per read.

A task this server just created is followed for its close alone for `_CLOSE_ONLY_FOR` (unless
a listen stream follows it), so a short task costs one long poll instead of one per event. Meanwhile what a `describe()` found
answers only briefly (`_CLOSE_ONLY_FIRST_RECHECK`, then `_CLOSE_ONLY_RECHECK` while the task
runs, backing off up to `read_recheck` while it waits for a worker), so an ask still shows.

A read of a running task that comes soon after this server's last answer of it (a client in
a poll loop) and would repeat that answer is held until the task changes or its hold ends
(`_holds`, which says why and how long). The watch tells held reads of every event that
changes an answer (`_changes.TaskChanges`, which listen streams and the change feed share); the
close answers them at once from its event, progress once its copy is due a re-read
(`Watch.progress_due`), and while the close alone is followed, the re-reads that follow a
new task (`Watch.recheck`) show an ask.

Concurrent reads of one task share one `describe()`. A closed task is answered from a
bounded cache (`_closed_answers`) until its TTL ends on Temporal's clock (`TemporalClock`,
which every event a watch reads moves on). At most `watched_tasks`
tasks are followed by long polls (each is one of the namespace's long polls, which Temporal
caps; a refusal pauses following new tasks for `_REFUSED_PAUSE`), and where the namespace
stamps changes at most as many as cost less than the change feed (`_fed`); past that, tasks
are followed through the feed (and, while it follows any, every task, each long poll moving to
it at its next expiry), else, and when a long poll fails, reads describe the task
every time. A task no read asked about for `_WATCH_IDLE` is
let go, and, where `quiet_poll_interval` is set, so is a quiet one whose reads here come
further apart than a long poll lasts: its answers advertise a longer poll interval, and a
`describe()` per read then costs less (`_quiet`).

Each event a watch sees that changes an answer (or starts a leg), and each write through this
server, is signalled by the task's key (`TaskChanges.changed`), which wakes the reads held on
it and the listen streams that follow it.

One watch's state and the decisions made from it (`Watch`, and the constants named above
but `_CLOSE_ONLY_FOR` and `_REFUSED_PAUSE`) are in `_watch`; this
module does the I/O. Everything here is keyed by workflow id, never by task id: the task
methods derive the key from the caller's scope and pass in what re-reads or answers a task,
so this module needs no scope and imports nothing of theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._changes import Read, Signalled, TaskChanges
from fastmcp_temporal.server._closed_answers import CLOSED_CACHE_MAX_RESULT_CHARS, Closed, ClosedAnswers
from fastmcp_temporal.server._fed import follow_feed, long_polls_cheaper_than_the_feed
from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._holds import HELD_POLL_INTERVAL, HeldReads, holdable
from fastmcp_temporal.server._quiet import QuietTasks
from fastmcp_temporal.server._watch import Known, Shown, Timing, Watch, shown_of
from fastmcp_temporal.workflows.models import TaskMemo, TaskOutcome

# Temporal refused a long poll (its cap on concurrent long polls per namespace): follow
# no new task for this long.
_REFUSED_PAUSE = timedelta(minutes=1)
# A task this server just created is followed for its close alone this long: a short
# task's dozen events would each end a long poll, and none of them changes an answer.
_CLOSE_ONLY_FOR = timedelta(seconds=2)
# Temporal answers a long poll empty this long before the caller's deadline.
_LONG_POLL_TAIL = timedelta(seconds=1)

Described = tuple[WorkflowExecutionDescription, TaskMemo]  # one `describe()`, and the memo it read


# What the task methods pass in: a completed outcome's answer (None: expired unanswered), a
# remembered close's answer, and the task's answer now (`True`: from a `describe()`, even where
# what the watch knows would answer).
OutcomeState = Callable[[TaskOutcome], tuple[TaskStatus, dict[str, Any]] | None]
ClosedAnswer = Callable[[Closed], GetTaskResult]
Reread = Callable[[bool], Awaitable[GetTaskResult]]


class KnownTasks:
    """The watches, held reads, shared reads and remembered closes of one running extension."""

    def __init__(
        self,
        client: Client,
        settings: TemporalTasksSettings,
        outcome_state: OutcomeState,
        clock: TemporalClock,
        changes: TaskChanges,
        feed: ChangeFeed | None = None,
    ) -> None:
        self._client = client
        self._feed = feed  # follows tasks past `_long_poll_cap` long polls, where the namespace stamps changes
        self._long_polled = 0
        self._fed = 0  # watches followed through the feed now
        cheaper = settings.watched_tasks if feed is None else long_polls_cheaper_than_the_feed(feed.interval)
        self._long_poll_cap = min(settings.watched_tasks, cheaper)
        self._changes = changes  # signalled by each event a watch sees that changes an answer, and each write
        self._clock = clock  # Temporal's: a remembered close expires by it, and every event read sets it
        self._settings = settings
        self._outcome_state = outcome_state
        self.closed = ClosedAnswers(clock)
        self._reads: dict[str, asyncio.Future[Described]] = {}
        self._watches: dict[str, Watch] = {}
        self._quiet = QuietTasks(settings.quiet_poll_interval, settings.quiet_tasks)
        self._storeless = replace(client.data_converter, external_storage=None)
        self._follow_after = 0.0  # loop time before which no new task is followed (see _REFUSED_PAUSE)
        self._held = HeldReads(settings.held_reads_per_caller)

    def watch_created(
        self, key: str, handle: WorkflowHandle[Any, TaskOutcome], timing: Timing, run_id: str
    ) -> int:
        """Follow a task just created here, for its close alone at first; the poll interval its
        creation advertises. Its `working` counts as an answer a quick first read may be held after
        (for `read_hold`)."""
        watch = self.follow(key, handle, timing, run_id, close_only=True)
        advertised = self._advertised_interval(watch, "working", timing.poll_interval_ms)
        if watch is not None and self._settings.read_hold:
            watch.answered_at, watch.advertised, watch.by_creation = watch.last_read, advertised / 1000, True
        return advertised

    async def close(self) -> None:
        """Stop every watch and the change feed (the server is stopping)."""
        for watch in list(self._watches.values()):
            if watch.follow is not None:
                watch.follow.cancel()
        if self._feed is not None:
            await self._feed.close()

    def watch_of(self, key: str) -> Watch | None:
        return self._watches.get(key)

    async def current(self, watch: Watch) -> Known | None:
        """What the watch knows of its task, while current (see `Watch.current`); the read keeps
        the watch from going idle."""
        loop = asyncio.get_running_loop()
        watch.last_read = loop.time()
        await watch.first_page()
        return watch.current(loop.time(), self._progress_refresh, self._read_recheck)

    async def next_change(self, heard: Signalled, reads: dict[str, Read], deadline: float) -> tuple[set[str], set[str]]:
        """Once a task `heard` follows is signalled or a reader's copy of one (`reads`) is due before
        `deadline` (or the server stops): the tasks signalled, and those due, when this server's copy
        is by the road it hears the task on (`Watch.due`: a long poll, the feed), else at `unheard_due`."""
        loop, due = asyncio.get_running_loop(), {key: self._due(key, read) for key, read in reads.items()}
        await heard.wait(min([deadline, *due.values()]) - loop.time())
        return heard.take(), {key for key, at in due.items() if at <= loop.time() and at < deadline}

    def _due(self, key: str, read: Read) -> float:
        if (watch := self._watches.get(key)) is None:
            return read.unheard_due
        return max(watch.due(read.at, self._progress_refresh, self._read_recheck), read.at)

    @property
    def _read_recheck(self) -> float:
        return self._settings.read_recheck.total_seconds()

    @property
    def _progress_refresh(self) -> float:
        return self._settings.progress_refresh.total_seconds()

    async def answer(self, key: str, closed_answer: ClosedAnswer, reread: Reread, caller: str) -> GetTaskResult:
        """The task's answer, remembered: at once, or, for a read `Watch.hold_for` holds, once it
        differs from what the last answer showed, or when the hold ends.

        A held read looks again at each change the watch signals, and when what the watch
        knows is due a re-read; a progress re-read ends it, so each read costs at most one
        `describe()` for progress. `caller`'s read past its held reads is answered at once (`HeldReads`).
        """
        loop, watch = asyncio.get_running_loop(), self._heard(key)
        if watch is None or not (hold := watch.hold_for(loop.time(), *self._holds)):
            return self.remember(key, await reread(False))
        with self._held.holding(caller) as may_hold:
            if not may_hold:
                return self.remember(key, await reread(False), holding=False)
            return await self._held_answer(key, watch, loop.time() + hold, closed_answer, reread)

    async def _held_answer(
        self, key: str, watch: Watch, deadline: float, closed: ClosedAnswer, reread: Reread
    ) -> GetTaskResult:
        loop, shown = asyncio.get_running_loop(), watch.shown
        with self._changes.following([key]) as heard:
            # a task created here and not read yet answers what its creation did, until its first recheck
            answer = None if watch.known is None and watch.close_only else await reread(False)
            while (followed := self._heard(key)) is not None and _repeats(answer, shown):
                changed, due = await self.next_change(heard, {key: Read(loop.time())}, deadline)
                if (cached := self.closed.cached(key)) is not None:
                    return self.remember(key, closed(cached))
                if not changed and not due:
                    break
                answer = await reread(not changed)  # unsignalled, the known copy is due a re-read
                if not changed and not followed.close_only:
                    break  # a progress re-read: answer it
        return self.remember(key, answer if answer is not None else await reread(False))

    @property
    def _holds(self) -> tuple[float, float]:
        return self._settings.read_hold.total_seconds(), self._settings.reread_hold.total_seconds()

    def _heard(self, key: str) -> Watch | None:
        """The watch through which this server hears the task change, which a read of it may be held on.

        A task this server does not follow is never held: nothing but its cap would end the hold.
        """
        watch = self._watches.get(key)
        return watch if watch is not None and watch.follow is not None and not watch.follow.done() else None

    def remember(self, key: str, answer: GetTaskResult, *, holding: bool = True) -> GetTaskResult:
        """Remember what a read answers the task; that answer, with the poll interval it advertises.

        A task whose reads are held advertises `HELD_POLL_INTERVAL` (unless not `holding`); where `quiet_poll_interval`
        is set, a quiet task a longer one, and the watch of one whose reads here come further
        apart than a long poll lasts is let go: each read then describes it, at less cost.
        """
        now = asyncio.get_running_loop().time()
        quiet = self._quiet.quiet_after(key, answer, now)
        watch = self._watches.get(key)
        if self._quiet.let_go(key, answer.poll_interval_ms or 0) and watch is not None and watch.follow is not None:
            watch.follow.cancel()
        advertised = self._quiet.advertised(answer, quiet, now)
        own_ms = answer.poll_interval_ms or 0
        if advertised.poll_interval_ms == own_ms and (held_ms := self._advertised_interval(
            self._heard(key) if holding else None, answer.status, own_ms
        )) != own_ms:
            advertised = advertised.model_copy(update={"poll_interval_ms": held_ms})
        if watch is not None:
            watch.record_shown(advertised, now)
        return advertised

    def _advertised_interval(self, heard_by: Watch | None, status: str, own_ms: int) -> int:
        """The task's own poll interval, or `HELD_POLL_INTERVAL` while its reads are held."""
        if heard_by is None or not self._settings.reread_hold or not holdable(status):
            return own_ms
        return min(own_ms, int(HELD_POLL_INTERVAL / timedelta(milliseconds=1)))

    def forget(self, key: str) -> None:
        """After a write through this server, later reads read afresh, and the next is not held;
        reads held now look again.

        A task written to is interactive: one followed for its close alone is let go, so
        the next read follows every event.
        """
        self._quiet.forget(key)
        if (watch := self._watches.get(key)) is not None:
            watch.answered_at, watch.known = float("-inf"), None
            if watch.close_only and watch.follow is not None:
                watch.follow.cancel()
        self._changes.changed(key)

    async def follow_every_event(self, key: str) -> None:
        """A task someone listens to is interactive: one followed for its close alone is let go
        (and gone when this returns), so the next read follows every event and an ask is seen
        at once."""
        watch = self._watches.get(key)
        if watch is not None and watch.close_only and watch.follow is not None:
            watch.follow.cancel()
            await asyncio.wait([watch.follow])

    def follow(
        self,
        key: str,
        handle: WorkflowHandle[Any, TaskOutcome],
        timing: Timing,
        run_id: str = "",
        *,
        close_only: bool = False,
    ) -> Watch | None:
        """Start following a task: by a long poll of its history while fewer tasks are long-polled
        than `watched_tasks` and than cost less than the change feed
        (`_fed.long_polls_cheaper_than_the_feed`) and the feed follows none, else through the feed,
        where the namespace has it.

        Nor by a long poll for a while after Temporal refused one: each is one of the
        namespace's concurrent long polls, which Temporal caps (`frontend.namespaceCount`).
        Not at all with `watched_tasks` 0, nor while the task is quiet and read here too seldom
        for a long poll to cost less than a `describe()` per read (`_quiet.Quiet.let_go`).
        """
        now = asyncio.get_running_loop().time()
        fed = self._long_polled >= self._long_poll_cap or self._fed > 0 or now < self._follow_after
        if not self._settings.watched_tasks or (fed and self._feed is None):
            return None
        if self._quiet.let_go(key, timing.poll_interval_ms):
            return None
        watch = Watch(handle, timing, now, run_id, close_only=close_only and not fed, fed=fed)
        if fed:
            self._fed += 1
            follow = asyncio.create_task(self._follow_feed(key, watch))
        else:
            self._long_polled += 1
            follow = asyncio.create_task(self._follow_history(key, watch))
        if fed or close_only:
            watch.read_history.set()  # no history is read (before the close)
        watch.follow = follow
        self._watches[key] = watch
        follow.add_done_callback(lambda done: self._unwatch(key, done, watch))
        return watch

    async def _follow_history(self, key: str, watch: Watch) -> None:
        """Long-poll the run's history for its next events until it closes or nobody reads it.

        A watch that starts `close_only` waits for the close alone for `_CLOSE_ONLY_FOR`,
        then reads the whole history and follows every event. An error ends the watch:
        reads then describe the task, and follow it anew; a refusal (too many long polls)
        also pauses following new tasks.
        """
        client = self._client
        long_poll = client.workflow_service.get_workflow_execution_history
        loop = asyncio.get_running_loop()
        request = _history_request(client.namespace, watch)
        while True:
            timeout = _CLOSE_ONLY_FOR + _LONG_POLL_TAIL if watch.close_only else None
            try:
                response = await long_poll(request, timeout=timeout)
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
                self._clock.saw(event.event_time)
                if not watch.run_id and event.HasField("workflow_execution_started_event_attributes"):
                    started = event.workflow_execution_started_event_attributes
                    watch.run_id = started.original_execution_run_id
                if event.HasField("workflow_execution_completed_event_attributes"):
                    await self._remember_outcome(key, watch, event)
                if watch.saw(event, loop.time()):  # after: a held read it wakes finds the outcome
                    self._changes.changed(key)
            watch.read_history.set()
            if not response.next_page_token:  # the run has closed
                return
            if not response.history.events and watch.idle(loop.time()):
                return
            if not response.history.events and self._fed > 0:
                return await self._to_the_feed(key, watch)
            request.next_page_token = response.next_page_token

    async def _to_the_feed(self, key: str, watch: Watch) -> None:
        """Follow a long-polled task through the feed from now on: while the feed follows any task,
        its queries cost the same however many it follows, and a long poll only adds its own."""
        self._long_polled -= 1
        self._fed += 1
        watch.to_the_feed(asyncio.get_running_loop().time(), self._clock.now())
        await self._follow_feed(key, watch)

    def _follow_feed(self, key: str, watch: Watch) -> Awaitable[None]:
        assert self._feed is not None  # only a server with a feed follows a task through it
        after = self._clock.now() - self._settings.change_feed_lag
        return follow_feed(self._feed, watch, after, partial(self._changes.changed, key))

    async def _remember_outcome(self, key: str, watch: Watch, event: HistoryEvent) -> None:
        """Cache a completed task's answer from its close event, when small enough.

        Decoded without the payload store: a stored result is never fetched just to be
        cached (its reference fails to decode, and it is too big for the cache anyway).
        Anything else (failed, cancelled, expired, a stored result) reads describe.
        """
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        if sum(payload.ByteSize() for payload in payloads) > CLOSED_CACHE_MAX_RESULT_CHARS:
            return
        try:
            (outcome,) = await self._storeless.decode(payloads, [TaskOutcome])
        except Exception:  # a stored result's reference, or one this server cannot decrypt
            return
        if (state := self._outcome_state(outcome)) is not None:
            closed_at = event.event_time.ToDatetime(tzinfo=timezone.utc)
            expires_at = closed_at + timedelta(milliseconds=watch.timing.ttl_ms)
            self.remember_closed(key, *state, watch.timing, expires_at, watch.run_id)

    def _unwatch(self, key: str, follow: asyncio.Task[None], ended: Watch) -> None:
        if ended.fed:
            self._fed -= 1
        else:
            self._long_polled -= 1
        watch = self._watches.get(key)
        if watch is not None and watch.follow is follow:
            del self._watches[key]
            self._changes.changed(key)  # held reads look again, and answer: nothing tells them of a change now
        if not follow.cancelled():
            follow.exception()  # a failed long poll only ends the watch; reads describe

    async def shared_read(self, handle: WorkflowHandle[Any, Any]) -> Described:
        """Describe the task's workflow, joining a `describe()` of it already under way."""
        read = self._reads.get(handle.id)
        if read is None:
            read = asyncio.ensure_future(described(handle))
            self._reads[handle.id] = read
            read.add_done_callback(lambda done: self._drop_read(handle.id, done))
        return await asyncio.shield(read)

    def drop_shared_read(self, key: str) -> None:
        """Later reads start their own `describe()` (a write has just been acknowledged)."""
        self._reads.pop(key, None)

    def _drop_read(self, key: str, done: asyncio.Future[Any]) -> None:
        if self._reads.get(key) is done:
            del self._reads[key]
        if not done.cancelled():
            done.exception()  # every reader may have gone; the error is theirs, not the loop's

    def remember_closed(
        self,
        key: str,
        status: TaskStatus,
        fields: dict[str, Any],
        timing: Timing,
        expires_at: datetime,
        run_id: str,
    ) -> Closed:
        """A closed run's answer, remembered (`ClosedAnswers.remember`); a closed task asks for no
        quiet interval."""
        self._quiet.forget(key)
        return self.closed.remember(key, status, fields, timing, expires_at, run_id)


def _repeats(answer: GetTaskResult | None, shown: Shown) -> bool:
    """Whether a held read's answer (None: the creation's, not read yet) is what the last answer showed."""
    return answer is None or (shown_of(answer) == shown and holdable(answer.status))


async def described(handle: WorkflowHandle[Any, Any]) -> Described:
    """One `describe()` of the task's workflow, and its memo."""
    description = await handle.describe()
    return description, TaskMemo.parse(await description.memo())


def _history_request(namespace: str, watch: Watch) -> GetWorkflowExecutionHistoryRequest:
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
