"""What a read of a task answers, from what this server knows of it: at once, or held until it changes.

A read answers from the copy its watch keeps (`_watches`, `_watch`) while that copy is current,
else from a `describe()` that concurrent reads share; a closed task from the closed-answer cache
(`_closed_answers`). A read of a client in a poll loop that would repeat this server's last answer
is held until the task changes or its hold ends (`_holds` says when and how long, `_held_reads`
waits); `next_change` is the one way a held read, a listen stream or an asking question hears a
change. Each answer is remembered, with the poll interval it advertises: the short one of held
reads, or a quiet task's longer one (`_quiet`). Everything is keyed by workflow id: the task
methods pass in what re-reads or answers a task, so this module needs no scope and imports nothing
of theirs.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._changes import Read, Signalled, TaskChanges
from fastmcp_temporal.server._closed_answers import Closed, ClosedAnswer, ClosedAnswers, OutcomeState
from fastmcp_temporal.server._described import Known
from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._held_reads import HeldReads, Reread
from fastmcp_temporal.server._holds import HELD_POLL_INTERVAL, holdable
from fastmcp_temporal.server._quiet import QuietTasks
from fastmcp_temporal.server._watch import Timing, Watch
from fastmcp_temporal.server._watches import Watches
from fastmcp_temporal.workflows.models import TaskMemo, TaskOutcome

Described = tuple[WorkflowExecutionDescription, TaskMemo]  # one `describe()`, and the memo it read


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
        self._changes = changes  # signalled by each event a watch sees that changes an answer, and each write
        self._settings = settings
        self.closed = ClosedAnswers(clock, client.data_converter, outcome_state)
        self._watches = Watches(client, settings, clock, changes, feed, self._remember_close)
        self._reads: dict[str, asyncio.Future[Described]] = {}
        self._quiet = QuietTasks(settings.quiet_poll_interval, settings.quiet_tasks)
        self._held = HeldReads(
            settings.held_reads_per_caller, self._watches, changes, self.closed, self.next_change
        )

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
        await self._watches.close()

    def watch_of(self, key: str) -> Watch | None:
        return self._watches.watch_of(key)

    async def current(self, watch: Watch) -> Known | None:
        """What the watch knows of its task, while current (`Watches.current`)."""
        return await self._watches.current(watch)

    async def next_change(
        self, heard: Signalled, reads: dict[str, Read], deadline: float
    ) -> tuple[set[str], set[str]]:
        """Once a task `heard` follows is signalled or a reader's copy of one (`reads`) is due before
        `deadline` (or the server stops): the tasks signalled, and those due, when this server's copy
        is by the road it hears the task on (`Watch.due`: a long poll, the feed), else at `unheard_due`."""
        loop = asyncio.get_running_loop()
        due = {key: self._watches.due(key, read) for key, read in reads.items()}
        await heard.wait(min([deadline, *due.values()]) - loop.time())
        return heard.take(), {key for key, at in due.items() if at <= loop.time() and at < deadline}

    async def answer(
        self, key: str, closed_answer: ClosedAnswer, reread: Reread, caller: str
    ) -> GetTaskResult:
        """The task's answer, remembered: at once, or, for a read `Watch.hold_for` holds, once it
        differs from what the last answer showed, or when the hold ends (`HeldReads.answer`).
        `caller`'s read past its held reads is answered at once."""
        loop, watch = asyncio.get_running_loop(), self._watches.heard(key)
        if watch is None or not (hold := watch.hold_for(loop.time(), *self._holds)):
            return self.remember(key, await reread(False))
        with self._held.holding(caller) as may_hold:
            if not may_hold:
                return self.remember(key, await reread(False), holding=False)
            held = await self._held.answer(key, watch, loop.time() + hold, closed_answer, reread)
            return self.remember(key, held)

    @property
    def _holds(self) -> tuple[float, float]:
        return self._settings.read_hold.total_seconds(), self._settings.reread_hold.total_seconds()

    def remember(self, key: str, answer: GetTaskResult, *, holding: bool = True) -> GetTaskResult:
        """Remember what a read answers the task; that answer, with the poll interval it advertises.

        A task whose reads are held advertises `HELD_POLL_INTERVAL` (unless not `holding`); where
        `quiet_poll_interval` is set, a quiet task a longer one, and the watch of one read here at
        longer gaps than a long poll lasts is let go: each read then describes it, at less cost.
        """
        now = asyncio.get_running_loop().time()
        quiet = self._quiet.quiet_after(key, answer, now)
        if self._quiet.let_go(key, answer.poll_interval_ms or 0):
            self._watches.let_go(key)
        advertised = self._quiet.advertised(answer, quiet, now)
        own_ms = answer.poll_interval_ms or 0
        if advertised.poll_interval_ms == own_ms and (held_ms := self._advertised_interval(
            self._watches.heard(key) if holding else None, answer.status, own_ms
        )) != own_ms:
            advertised = advertised.model_copy(update={"poll_interval_ms": held_ms})
        if (watch := self._watches.watch_of(key)) is not None:
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
        if (watch := self._watches.watch_of(key)) is not None:
            watch.answered_at, watch.known = float("-inf"), None
            self._watches.let_go(key, close_only=True)
        self._changes.changed(key)

    async def follow_every_event(self, key: str) -> None:
        """A task someone listens to is interactive: one followed for its close alone is let go
        (and gone when this returns), so the next read follows every event and an ask is seen
        at once."""
        if (ending := self._watches.let_go(key, close_only=True)) is not None:
            await asyncio.wait([ending])

    def follow(
        self,
        key: str,
        handle: WorkflowHandle[Any, TaskOutcome],
        timing: Timing,
        run_id: str = "",
        *,
        close_only: bool = False,
    ) -> Watch | None:
        """Start following a task (`Watches.follow`), unless it is quiet and read here too seldom for
        following it to cost less than a `describe()` per read (`_quiet.Quiet.let_go`)."""
        if self._quiet.let_go(key, timing.poll_interval_ms):
            return None
        return self._watches.follow(key, handle, timing, run_id, close_only=close_only)

    async def _remember_close(self, key: str, watch: Watch, event: HistoryEvent) -> None:
        """A watched run's completion event: its answer, remembered when it can be; a closed task asks
        for no quiet interval."""
        if await self.closed.remember_close(key, event, watch.timing, watch.run_id):
            self._quiet.forget(key)

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


async def described(handle: WorkflowHandle[Any, Any]) -> Described:
    """One `describe()` of the task's workflow, and its memo."""
    description = await handle.describe()
    return description, TaskMemo.parse(await description.memo())
