"""`tasks/get`, `tasks/update` and `tasks/cancel`, answered from Temporal.

Reads use `describe()` and the memo the workflow keeps, plus the result from history
once the workflow is closed, so they need no worker online. An update is a signal that
Temporal has persisted before we acknowledge it (its answers checked and sent as a
durable call's are: `_answers`); the workflow applies it. Every lookup derives the
workflow id from the caller's own scope tag (and, only when nothing is found under it,
the caller's tags under the other listed encryption keys, then its legacy tag: see
`_scope`), so a missing, expired or foreign task id all get the same -32602, from a
cancel as from a read. Whether a closed task's TTL has ended is judged on Temporal's
clock (`TemporalClock`, read when the server starts), never the local one.

A read answers from what this server knows of the task (`_known.KnownTasks`: its watch,
the closed-answer cache) wherever that is as current as a `describe()` would be, and a
read of a client in a poll loop waits for the task to change (`_holds`). A write reads
the task fresh and makes later reads read afresh, so no read that starts after its
acknowledgement returns an older state; an update's acknowledgement waits (up to
`_APPLY_WAIT`) until the workflow shows the answers applied, and until then this server
hides them from its own reads.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from temporalio.api.errordetails.v1 import NamespaceNotFoundFailure
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import (
    CancelTaskResult,
    CreateTaskResult,
    GetTaskResult,
    TaskStatus,
    UpdateTaskResult,
)
from fastmcp_temporal.connection._sizes import encoded_size_of
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._answers import submit_answers, validated_answer
from fastmcp_temporal.server._backend import Backend, UnreadablePayloadError
from fastmcp_temporal.server._changes import Read, Signalled, TaskChanges
from fastmcp_temporal.server._closed_answers import Closed
from fastmcp_temporal.server._creation import StartedWorkflow
from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._known import KnownTasks, described
from fastmcp_temporal.server._scope import current_caller, task_not_found, workflow_id
from fastmcp_temporal.server._stalled import EXPIRED_REASON, StalledTasks
from fastmcp_temporal.server._status import listed_status, mcp_status
from fastmcp_temporal.server._watch import Timing
from fastmcp_temporal.server._wire import task_answer
from fastmcp_temporal.workflows.models import (
    STORE_WAITING_DETAIL,
    TaskMemo,
    TaskOutcome,
    UnreadablePayload,
)

# How long an update waits for the workflow to show its answers applied, so the client's
# immediate re-poll never sees an answered request again. The re-reads back off from the
# first poll to the longest: ~17 `describe()` calls when no worker applies them.
_APPLY_WAIT = timedelta(seconds=5)
_APPLY_FIRST_POLL = 0.02
_APPLY_MAX_POLL = 0.5
_APPLY_BACKOFF = 1.5
_REMEMBERED_ANSWERS = 10_000


@dataclass
class _Task:
    task_id: str
    handle: WorkflowHandle[Any, Any]
    description: WorkflowExecutionDescription
    memo: TaskMemo

    @property
    def running(self) -> bool:
        return self.description.status == Status.RUNNING

    @property
    def cancel_requested(self) -> bool:
        return self.description.raw_description.workflow_extended_info.cancel_requested

    def outstanding(self) -> dict[str, Any]:
        if not self.running or self.cancel_requested:
            return {}
        return self.memo.open_requests()


class TaskMethods:
    """The three task methods for one running extension."""

    def __init__(self, backend: Backend, changes: TaskChanges) -> None:
        self._backend = backend
        self.changes = changes  # what the watches, writes and the feed signal: held reads and listen streams wait on it
        # Keys this process has delivered whose retirement the workflow has not
        # shown yet (no worker online); hidden from reads so nobody asks twice.
        self._answered: OrderedDict[str, set[str]] = OrderedDict()
        self._clock = TemporalClock()
        feed = ChangeFeed.of(backend.client, backend.settings, self._clock) if backend.stamps_changes else None
        self._known = KnownTasks(backend.client, backend.settings, _outcome_state, self._clock, changes, feed)
        self._stalled = StalledTasks(backend.client, self._clock)

    def watch(self, created: CreateTaskResult, started: StartedWorkflow) -> CreateTaskResult:
        """Follow a task just created here (see `KnownTasks.watch_created`); its creation's answer,
        advertising the poll interval the following earns."""
        key, run_id = self.key_of(started.facts.task_id), started.handle.result_run_id or ""
        interval = self._known.watch_created(key, self._handle(key), started.facts.timing, run_id)
        return created.model_copy(update={"poll_interval_ms": interval})

    async def read_clock(self) -> None:
        """Read Temporal's clock, which every age is measured on (at start, so no read waits for it)."""
        await self._clock.read_once(self._backend.client)

    async def close(self) -> None:
        """Stop every watch and the change feed, and end every listen stream (the server is stopping)."""
        await self._known.close()
        self.changes.close()

    async def get(self, task_id: str) -> GetTaskResult:
        """A client's read: held while it polls a task that does not change (`_holds`)."""
        return await self._read(task_id, held=True)

    async def answer_now(self, task_id: str) -> GetTaskResult:
        """What a read answers now, without holding it or counting it as a client's (a pushed status)."""
        return await self._read(task_id, held=False)

    async def _read(self, task_id: str, *, held: bool) -> GetTaskResult:
        await self._clock.read_once(self._backend.client)  # before a remembered close's TTL is checked
        key = self.key_of(task_id)
        if (closed := self._known.closed.cached(key)) is not None:
            return _closed_answer(task_id, closed)
        if not held:
            return await self._reread(task_id, False)
        closed_answer = partial(_closed_answer, task_id)
        return await self._known.answer(key, closed_answer, partial(self._reread, task_id), current_caller())

    async def follow_every_event(self, task_id: str) -> None:
        """Someone listens to the task: see `KnownTasks.follow_every_event`."""
        await self._known.follow_every_event(self.key_of(task_id))

    async def next_change(self, heard: Signalled, reads: dict[str, Read], deadline: float) -> tuple[set[str], set[str]]:
        """When to read again the tasks a reader follows (by workflow id): `KnownTasks.next_change`."""
        return await self._known.next_change(heard, reads, deadline)

    async def _reread(self, task_id: str, fresh: bool) -> GetTaskResult:
        """The task's answer now; `fresh`: from a `describe()`, even where the watch's copy answers."""
        return await self._answer(await self._current(task_id, fresh))

    async def _answer(self, task: _Task) -> GetTaskResult:
        if not task.running:
            return _closed_answer(task.task_id, await self._close(task))
        if await self._stalled.expire_if_due(task.handle, task.description):
            raise task_not_found(task.task_id)
        outstanding = self._unanswered(task)
        status = mcp_status(task.description.status, cancel_requested=task.cancel_requested,
                            awaiting_input=bool(outstanding))
        fields: dict[str, Any] = {}
        if status == "input_required":
            fields = {"input_requests": outstanding}
        elif status == "working":
            fields = {"status_message": await self._status_message(task)}
        return task_answer(GetTaskResult, task.task_id, status, self._timing(task), **fields)

    async def _current(self, task_id: str, fresh: bool) -> _Task:
        """The task as this server's watch knows it (unless `fresh`), or as a (shared) `describe()` finds it."""
        key = self.key_of(task_id)
        watch = self._known.watch_of(key)
        if watch is not None and not fresh and (known := await self._known.current(watch)) is not None:
            return _Task(task_id, watch.handle, known.description, known.memo)
        read_at = asyncio.get_running_loop().time()
        task = await self._find(task_id, shared=True)
        said = await self._status_message(task) is not None  # no await between the watch lookup and learned()
        if task.running and (watch := self._known.watch_of(key)) is None:
            watch = self._known.follow(key, task.handle, self._timing(task), task.description.run_id)
        if watch is not None and watch.handle.id == task.handle.id:
            watch.learned(task.description, task.memo, read_at, self._clock.now(), said=said)
        return task

    def key_of(self, task_id: str) -> str:
        """The caller's task's workflow id: what `KnownTasks` keys its caches and watches by."""
        return workflow_id(self._backend.caller_scope().tag, task_id)

    def _handle(self, key: str) -> WorkflowHandle[Any, TaskOutcome]:
        return self._backend.client.get_workflow_handle(key, result_type=TaskOutcome)

    def _timing(self, task: _Task) -> Timing:
        return self._timing_of(task.description, task.memo)

    def _timing_of(self, execution: WorkflowExecution, memo: TaskMemo) -> Timing:
        return Timing(
            created_at=memo.created_at or execution.start_time.isoformat(),
            ttl_ms=memo.ttl_ms or self._backend.ttl_ms,
            poll_interval_ms=memo.poll_interval_ms,
        )

    async def listed(self, execution: WorkflowExecution) -> GetTaskResult | None:
        """The task a visibility row of the caller's shows: as this server remembers its close; a completed one
        as its result says (read once, then remembered: an error result reads `failed`); else from the row alone,
        as its execution, memo and published status tell it (`listed_status`), without a running task's progress
        message. None once expired."""
        await self._clock.read_once(self._backend.client)
        task_id = execution.id.rsplit("/", 1)[-1]
        if (closed := self._known.closed.cached(execution.id)) is not None:
            return _closed_answer(task_id, closed)
        if execution.status == Status.COMPLETED:  # whether its result is an error, only the result says
            with suppress(MCPError):  # expired meanwhile
                return await self.answer_now(task_id)
            return None
        memo = TaskMemo.parse(await execution.memo())
        asking = set(memo.open_requests()) - self._answered.get(task_id, set())
        status = listed_status(execution, awaiting_input=bool(asking))
        if status == "expired" or _expires_at(execution, memo) < self._clock.now():
            return None
        return task_answer(GetTaskResult, task_id, status, self._timing_of(execution, memo))

    async def update(self, task_id: str, responses: dict[str, Any]) -> UpdateTaskResult:
        task = await self._find(task_id)  # not a remembered close: a new run may be asking
        outstanding = self._unanswered(task)
        answers = {
            key: validated_answer(key, outstanding[key], raw)
            for key, raw in responses.items()
            if key in outstanding
        }
        if answers:
            converter = self._backend.client.data_converter
            applied = await encoded_size_of(converter, task.memo.answered_bytes_in_round(task.outstanding()))
            carried = task.memo.input_bytes + applied
            left_open = [key for key in outstanding if key not in answers]
            if not await submit_answers(self._backend, task.handle, answers, carried, left_open):
                return UpdateTaskResult()  # closed meanwhile: nothing is waiting for answers
            self._remember_answered(task_id, answers)
            self._written(task)
            await self._wait_until_applied(task, set(answers))
        return UpdateTaskResult()

    async def cancel(self, task_id: str) -> CancelTaskResult:
        # not a remembered close: a new run may be running
        await self._cancel(await self._find(task_id, shared=True))
        return CancelTaskResult()

    async def cancel_unless_ended(self, task_id: str) -> tuple[GetTaskResult, bool]:
        """Cancel the task unless it has ended (a cancel requested earlier counts: it reads `cancelled`): its
        answer after, and whether this cancelled it. The task is read once."""
        task = await self._find(task_id, shared=True)
        if not task.running or task.cancel_requested:
            return await self._answer(task), False
        await self._cancel(task)
        return task_answer(GetTaskResult, task_id, "cancelled", self._timing(task)), True

    async def _cancel(self, task: _Task) -> None:
        if not task.running:
            await self._close(task)  # -32602 as a read answers when the task has expired
            return
        if not task.cancel_requested:
            await task.handle.cancel()
        await self._stalled.close_cancelled(task.handle)  # no worker may be left to run it
        self._written(task)

    def _written(self, task: _Task) -> None:
        """Later reads must see a write just acknowledged: they read afresh, and are not held."""
        self._known.drop_shared_read(task.handle.id)
        self._known.forget(self.key_of(task.task_id))

    async def _find(self, task_id: str, *, shared: bool = False) -> _Task:
        """Describe the task's workflow; `shared` joins a read of it already under way.

        Writes (update, cancel) read fresh and drop the shared read, so no read that
        starts after their acknowledgement returns an older state.
        """
        await self._clock.read_once(self._backend.client)
        # the tags under older keys, and the legacy tag, are tried only on NOT_FOUND
        for scope_tag in self._backend.caller_scope().lookup_tags:
            handle = self._handle(workflow_id(scope_tag, task_id))
            try:
                description, memo = await (self._known.shared_read(handle) if shared else described(handle))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND and not _namespace_missing(exc):
                    continue
                raise
            self._clock.saw_description(description)
            if memo.scope != scope_tag or _expires_at(description, memo) < self._clock.now():
                raise task_not_found(task_id)
            return _Task(task_id, handle, description, memo)
        raise task_not_found(task_id)

    async def _close(self, task: _Task) -> Closed:
        """The closed task's final answer: the remembered one while its run is the latest, else
        read, and remembered when small enough."""
        key = self.key_of(task.task_id)  # a legacy task's too
        if (closed := self._known.closed.confirmed(key, task.description.run_id)) is not None:
            return closed
        status, fields = await self._closed_state(task)
        expires_at, run_id = _expires_at(task.description, task.memo), task.description.run_id
        return self._known.remember_closed(key, status, fields, self._timing(task), expires_at, run_id)

    async def _closed_state(self, task: _Task) -> tuple[TaskStatus, dict[str, Any]]:
        status = task.description.status
        # once the wire said cancelled, it stays so
        if mcp_status(status, cancel_requested=task.cancel_requested) == "cancelled":
            return "cancelled", {}
        closed_run = self._backend.client.get_workflow_handle(
            task.handle.id, run_id=task.description.run_id, result_type=TaskOutcome
        )  # the run described closed: never a run a reset has started since, which may run on
        if status == Status.COMPLETED:
            outcome = await closed_run.result(follow_runs=False)
            if isinstance(outcome, UnreadablePayload):
                lost = f"task {task.task_id} completed, but its result is lost. {outcome.reason}"
                raise UnreadablePayloadError(lost)
            state = _outcome_state(outcome)
            if state is None:
                raise task_not_found(task.task_id)
            return state
        failure = await _failure(closed_run)
        if status == Status.TERMINATED and failure["message"] == EXPIRED_REASON:  # ended by `_stalled`
            raise task_not_found(task.task_id)
        return "failed", _failed_fields(failure)

    async def _status_message(self, task: _Task) -> str | None:
        converter = self._backend.client.data_converter
        for pending in task.description.raw_description.pending_activities:
            if pending.heartbeat_details.payloads:
                (details,) = await converter.decode(pending.heartbeat_details.payloads)
                if not isinstance(details, dict):
                    return None
                return details.get(STORE_WAITING_DETAIL) or details.get("statusMessage")  # the store blocks it
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


def _closed_answer(task_id: str, closed: Closed) -> GetTaskResult:
    return task_answer(GetTaskResult, task_id, closed.status, closed.timing, **closed.fields)


def _namespace_missing(exc: RPCError) -> bool:
    """A busy server can briefly not find the namespace: a retryable fault, not a missing task."""
    return any(detail.Is(NamespaceNotFoundFailure.DESCRIPTOR) for detail in exc.grpc_status.details)


def _expires_at(execution: WorkflowExecution, memo: TaskMemo) -> datetime:
    """When the closed task's TTL ends (Temporal's time); never for a running one."""
    if execution.close_time is None:
        return datetime.max.replace(tzinfo=timezone.utc)
    return execution.close_time + timedelta(milliseconds=memo.ttl_ms or 0)


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


async def _failure(closed_run: WorkflowHandle[Any, TaskOutcome]) -> dict[str, Any]:
    try:
        await closed_run.result(follow_runs=False)
    except WorkflowFailureError as exc:
        cause = exc.cause
        message = str(cause.message if hasattr(cause, "message") else cause)
        return {"code": mcp_types.INTERNAL_ERROR, "message": message or "Task failed"}
    except Exception as exc:  # terminated or timed out: no failure detail to read
        return {"code": mcp_types.INTERNAL_ERROR, "message": f"Task failed: {exc}"}
    return {"code": mcp_types.INTERNAL_ERROR, "message": "Task failed"}
