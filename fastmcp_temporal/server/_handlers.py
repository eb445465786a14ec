"""`tasks/get`, `tasks/update` and `tasks/cancel`, answered from Temporal.

Reads use `describe()` and the memo the workflow keeps, plus the result from
history once the workflow is closed, so they need no worker online. An update is a
signal that Temporal has persisted before we acknowledge it; the workflow applies
it. Every lookup derives the workflow id from the caller's own scope tag (and, only
when nothing is found under it, the caller's tags under the other listed encryption
keys, then its legacy tag: see `_scope`), so a missing, expired or foreign task id all
get the same -32602.

Reads are cheap because the MCP client polls: concurrent reads of one task share one
`describe()`, and a closed task (which never changes again) is answered from a
bounded in-process cache until its TTL ends, without calling Temporal.

A task this process created is watched while it is young: one long poll of its
result, as a bare Temporal client would make, fills that cache the moment the task
closes. For the task's first `read_hold` (250 ms), a `tasks/get` of it first waits
for the task to change from what reads last answered, so a short task's result
reaches the caller as soon as it exists instead of at the caller's next poll. The
close ends the wait at once; an ask, progress or a cancel through another server
shows at the next re-read (every `read_recheck`, 1 s; with the default hold, when it
ends). The hold is short because a client's request timeout cuts a held read short
with an error. Reads of older tasks answer at once.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.errordetails.v1 import NamespaceNotFoundFailure
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import CancelTaskResult, GetTaskResult, TaskStatus, UpdateTaskResult
from fastmcp_temporal._wire import encode_answer
from fastmcp_temporal.connection._payloads import encoded_size, encoded_size_of
from fastmcp_temporal.server._backend import Backend, UnreadablePayloadError
from fastmcp_temporal.server._scope import workflow_id
from fastmcp_temporal.workflows.models import (
    SUBMIT_INPUT_SIGNAL,
    InputAnswers,
    TaskOutcome,
    UnreadablePayload,
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
# Young tasks watched for their close: for how long, and how many at once.
_WATCH_PERIOD = timedelta(seconds=30)
_WATCHED_TASKS = 1_000


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
        return dict(self.memo.get("inputRequests") or {})


_Shown = tuple[TaskStatus, str | None, frozenset[str]]
_CREATED: _Shown = ("working", None, frozenset())


@dataclass
class _Watch:
    """A young task's result, awaited by one long poll; reads wait for a change until `hold_until`."""

    result: asyncio.Task[None]
    hold_until: float
    shown: _Shown = _CREATED  # what reads of the task last answered


@dataclass(frozen=True)
class _Closed:
    """What a closed task answers until its TTL ends; it never changes again."""

    status: TaskStatus
    fields: dict[str, Any]
    created_at: str
    ttl_ms: int
    poll_interval_ms: int
    expires_at: datetime


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
        self._storeless = replace(backend.client.data_converter, external_storage=None)

    def watch(self, task_id: str, created_at: str, poll_interval_ms: int | None) -> None:
        """Await the result of a task just created here (see the module docstring)."""
        if len(self._watches) >= _WATCHED_TASKS:
            return
        handle = self._handle(self._key(task_id))
        interval = poll_interval_ms or DEFAULT_POLL_INTERVAL_MS
        result = asyncio.create_task(self._await_close(handle, created_at, interval))
        hold_until = asyncio.get_running_loop().time() + self._backend.settings.read_hold.total_seconds()
        self._watches[handle.id] = _Watch(result, hold_until)
        result.add_done_callback(lambda _: self._unwatch(handle.id))

    def close(self) -> None:
        """Stop every watch (the server is stopping)."""
        for watch in list(self._watches.values()):
            watch.result.cancel()

    async def get(self, task_id: str) -> GetTaskResult:
        if (closed := self._cached_closed(task_id)) is not None:
            return self._closed_result(task_id, closed)
        watch = self._watches.get(self._key(task_id))
        answer = await self._changed_within_hold(task_id, watch) if watch is not None else None
        if answer is None:
            answer = await self._answer(await self._find(task_id, shared=True))
        if watch is not None:
            watch.shown = _shown(answer)
        return answer

    async def _changed_within_hold(self, task_id: str, watch: _Watch) -> GetTaskResult | None:
        """The task's answer once it differs from what reads last got, within the hold.

        The close comes from the watch at once; anything else (an ask, progress, a cancel
        through another server) from re-reading the task every `read_recheck`.
        """
        loop = asyncio.get_running_loop()
        recheck = self._backend.settings.read_recheck.total_seconds()
        while (hold := watch.hold_until - loop.time()) > 0:
            last = hold <= recheck
            await asyncio.wait([watch.result], timeout=min(hold, recheck))
            if (closed := self._cached_closed(task_id)) is not None:
                return self._closed_result(task_id, closed)
            if last or watch.result.done():
                return None
            answer = await self._answer(await self._find(task_id, shared=True))
            if _shown(answer) != watch.shown:
                return answer
        return None

    async def _answer(self, task: _Task) -> GetTaskResult:
        fields: dict[str, Any] = {}
        if not task.running:
            return self._closed_result(task.task_id, await self._close(task))
        if task.cancel_requested:
            status = "cancelled"
        elif outstanding := self._unanswered(task):
            status, fields = "input_required", {"input_requests": outstanding}
        else:
            status, fields = "working", {"status_message": await self._status_message(task)}
        if status != "working":  # parked or cancelling: its close is no longer imminent
            self._unwatch(task.handle.id)
        return self._result(task, status, **fields)

    async def _await_close(
        self, handle: WorkflowHandle[Any, TaskOutcome], created_at: str, poll_interval_ms: int
    ) -> None:
        try:
            outcome = await asyncio.wait_for(self._small_outcome(handle), _WATCH_PERIOD.total_seconds())
        except Exception:  # not closed in time, or a stored result: reads describe it
            return
        state = _outcome_state(outcome) if outcome is not None else None
        if state is None:  # failed, cancelled, terminated, continued, expired: reads describe it
            return
        status, fields = state
        ttl_ms = self._backend.ttl_ms
        self._remember_closed(
            handle.id,
            _Closed(
                status=status,
                fields=fields,
                created_at=created_at,
                ttl_ms=ttl_ms,
                poll_interval_ms=poll_interval_ms,
                expires_at=datetime.now(timezone.utc) + timedelta(milliseconds=ttl_ms),
            ),
        )

    async def _small_outcome(self, handle: WorkflowHandle[Any, TaskOutcome]) -> TaskOutcome | None:
        """The outcome of the task's run once it completes, when small enough for the closed cache.

        Decoded without the payload store: a stored result is never fetched just to be
        cached (its reference fails to decode, and it is too big for the cache anyway).
        """
        events = handle.fetch_history_events(
            wait_new_event=True, event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
        )
        async for event in events:
            if not event.HasField("workflow_execution_completed_event_attributes"):
                return None
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            if sum(payload.ByteSize() for payload in payloads) > _CLOSED_CACHE_MAX_RESULT_CHARS:
                return None
            (outcome,) = await self._storeless.decode(payloads, [TaskOutcome])
            return outcome
        return None

    def _unwatch(self, key: str) -> None:
        watch = self._watches.pop(key, None)
        if watch is not None:
            watch.result.cancel()

    def _key(self, task_id: str) -> str:
        """The caller's task's workflow id: what every cache and watch here is keyed by."""
        return workflow_id(self._backend.caller_scope().tag, task_id)

    def _handle(self, key: str) -> WorkflowHandle[Any, TaskOutcome]:
        return self._backend.client.get_workflow_handle(key, result_type=TaskOutcome)

    async def update(self, task_id: str, responses: dict[str, Any]) -> UpdateTaskResult:
        if self._cached_closed(task_id) is not None:
            return UpdateTaskResult()  # closed: nothing is waiting for answers
        task = await self._find(task_id)
        outstanding = self._unanswered(task)
        answers = {
            key: _validated_answer(key, outstanding[key], raw)
            for key, raw in responses.items()
            if key in outstanding
        }
        if answers:
            await self._refuse_oversize(task, answers)
            try:
                await task.handle.signal(SUBMIT_INPUT_SIGNAL, InputAnswers(answers))
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                return UpdateTaskResult()  # closed meanwhile: nothing is waiting for answers
            self._remember_answered(task_id, answers)
            self._reads.pop(task.handle.id, None)
            self._unwatch(task.handle.id)
            await self._wait_until_applied(task, set(answers))
        return UpdateTaskResult()

    async def _refuse_oversize(self, task: _Task, answers: dict[str, Any]) -> None:
        """Answers the next leg could not carry are refused before anything is signalled.

        The next leg's input holds the task's arguments and every answer of this round,
        so it is measured whole, against the limit that will apply to it (Temporal's
        payload limit, or the store's); the workflow checks it again before the leg.
        """
        converter = self._backend.client.data_converter
        size = await encoded_size(converter, InputAnswers(answers)) + int(task.memo.get("inputBytes") or 0)
        size += await encoded_size_of(converter, _answered_bytes(task))
        what = "The next leg's input (the task's arguments with this round's answers)"
        if refusal := self._backend.payload_limits.refusal(what, size):
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=refusal)

    async def cancel(self, task_id: str) -> CancelTaskResult:
        if self._cached_closed(task_id) is not None:
            return CancelTaskResult()
        task = await self._find(task_id, shared=True)
        if task.running and not task.cancel_requested:
            await task.handle.cancel()
            self._reads.pop(task.handle.id, None)  # later reads must see the cancel
            self._unwatch(task.handle.id)
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
        key = self._key(task_id)
        closed = self._closed.get(key)
        if closed is not None and closed.expires_at < datetime.now(timezone.utc):
            del self._closed[key]
            return None
        return closed

    async def _close(self, task: _Task) -> _Closed:
        """The closed task's final answer, remembered when small enough."""
        status, fields = await self._closed_state(task)
        memo = task.memo
        closed = _Closed(
            status=status,
            fields=fields,
            created_at=memo.get("createdAt") or task.description.start_time.isoformat(),
            ttl_ms=int(memo.get("ttlMs") or self._backend.ttl_ms),
            poll_interval_ms=int(memo.get("pollIntervalMs") or DEFAULT_POLL_INTERVAL_MS),
            expires_at=_expires_at(task.description, memo),
        )
        self._remember_closed(self._key(task.task_id), closed)  # a legacy task's too
        return closed

    def _remember_closed(self, key: str, closed: _Closed) -> None:
        if len(json.dumps(closed.fields.get("result"), default=str)) <= _CLOSED_CACHE_MAX_RESULT_CHARS:
            self._closed[key] = closed
            while len(self._closed) > _CLOSED_CACHE_ENTRIES:
                self._closed.popitem(last=False)

    def _closed_result(self, task_id: str, closed: _Closed) -> GetTaskResult:
        return GetTaskResult(
            task_id=task_id,
            status=closed.status,
            created_at=closed.created_at,
            last_updated_at=datetime.now(timezone.utc).isoformat(),
            ttl_ms=closed.ttl_ms,
            poll_interval_ms=closed.poll_interval_ms,
            **closed.fields,
        )

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
        return "failed", _failed_fields(await _failure(task))

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
        memo = task.memo
        return GetTaskResult(
            task_id=task.task_id,
            status=status,
            created_at=memo.get("createdAt") or task.description.start_time.isoformat(),
            last_updated_at=datetime.now(timezone.utc).isoformat(),
            ttl_ms=int(memo.get("ttlMs") or self._backend.ttl_ms),
            poll_interval_ms=int(memo.get("pollIntervalMs") or DEFAULT_POLL_INTERVAL_MS),
            **fields,
        )


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


def _validated_answer(key: str, request: dict[str, Any], raw: Any) -> dict[str, Any]:
    try:
        return encode_answer(request, raw)
    except ValidationError as exc:
        raise MCPError(
            code=mcp_types.INVALID_PARAMS,
            message=f"Invalid answer for input request {key!r} ({request.get('method')}): {exc}",
        ) from None


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
