"""`tasks/get`, `tasks/update` and `tasks/cancel`, answered from Temporal.

Reads use `describe()` and the memo the workflow keeps, plus the result from
history once the workflow is closed, so they need no worker online. An update is a
signal that Temporal has persisted before we acknowledge it; the workflow applies
it. Every lookup derives the workflow id from the caller's own scope, so a missing,
expired or foreign task id all get the same -32602.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import mcp_types
from fastmcp_tasks.models import (
    CancelTaskResult,
    GetTaskResult,
    TaskStatus,
    UpdateTaskResult,
)
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._backend import Backend
from fastmcp_temporal._payloads import encoded_size
from fastmcp_temporal._scope import current_scope_tag, workflow_id
from fastmcp_temporal._wire import encode_answer
from fastmcp_temporal.workflows.models import (
    SUBMIT_INPUT_SIGNAL,
    InputAnswers,
    TaskOutcome,
)

DEFAULT_POLL_INTERVAL_MS = 5000

# How long an update waits for the workflow to show its answers applied, so the
# client's immediate re-poll never sees an answered request again.
_APPLY_WAIT = timedelta(seconds=5)
_APPLY_POLL = 0.02
_REMEMBERED_ANSWERS = 10_000


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
        if not self.running or self.cancel_requested or self.memo.get("status") != "input_required":
            return {}
        return dict(self.memo.get("inputRequests") or {})


class TaskMethods:
    """The three task methods for one running extension."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        # Keys this process has delivered whose retirement the workflow has not
        # shown yet (no worker online); hidden from reads so nobody asks twice.
        self._answered: OrderedDict[str, set[str]] = OrderedDict()

    async def get(self, task_id: str) -> GetTaskResult:
        task = await self._find(task_id)
        fields: dict[str, Any] = {}
        if not task.running:
            status, fields = await self._closed_state(task)
        elif task.cancel_requested:
            status = "cancelled"
        elif outstanding := self._unanswered(task):
            status, fields = "input_required", {"input_requests": outstanding}
        else:
            status, fields = "working", {"status_message": await self._status_message(task)}
        return self._result(task, status, **fields)

    async def update(self, task_id: str, responses: dict[str, Any]) -> UpdateTaskResult:
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
            await self._wait_until_applied(task, set(answers))
        return UpdateTaskResult()

    async def _refuse_oversize(self, task: _Task, answers: dict[str, Any]) -> None:
        """Answers that cannot be kept are refused before anything is signalled."""
        limits = self._backend.payload_limits
        size = await encoded_size(self._backend.client.data_converter, InputAnswers(answers))
        what = "The answers"
        if not limits.stored:  # the next leg carries the arguments and the answers together
            size += int(task.memo.get("inputBytes") or 0)
            what = "The answers with the task's arguments"
        if refusal := limits.refusal(what, size):
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=refusal)

    async def cancel(self, task_id: str) -> CancelTaskResult:
        task = await self._find(task_id)
        if task.running and not task.cancel_requested:
            await task.handle.cancel()
        return CancelTaskResult()

    async def _find(self, task_id: str) -> _Task:
        scope_tag = current_scope_tag()
        handle = self._backend.client.get_workflow_handle(
            workflow_id(scope_tag, task_id), result_type=TaskOutcome
        )
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise task_not_found(task_id) from None
            raise
        memo = await description.memo()
        if memo.get("scope") != scope_tag or _expired(description, memo):
            raise task_not_found(task_id)
        return _Task(task_id, handle, description, memo)

    async def _closed_state(self, task: _Task) -> tuple[TaskStatus, dict[str, Any]]:
        status = task.description.status
        if status == Status.CANCELED:
            return "cancelled", {}
        if status == Status.COMPLETED:
            outcome: TaskOutcome = await task.handle.result()
            if outcome.expired:
                raise task_not_found(task.task_id)
            if outcome.error is not None:
                return "failed", _failed_fields(outcome.error)
            return "completed", {"result": outcome.result}
        return "failed", _failed_fields(await _failure(task))

    async def _status_message(self, task: _Task) -> str | None:
        converter = self._backend.client.data_converter
        for pending in task.description.raw_description.pending_activities:
            if pending.heartbeat_details.payloads:
                (details,) = await converter.decode(pending.heartbeat_details.payloads)
                return details.get("statusMessage")
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
        deadline = asyncio.get_running_loop().time() + _APPLY_WAIT.total_seconds()
        while asyncio.get_running_loop().time() < deadline:
            current = await self._find(task.task_id)
            if not keys & set(current.outstanding()):
                self._forget_answered(task.task_id, keys)
                return
            await asyncio.sleep(_APPLY_POLL)

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


def task_not_found(task_id: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=f"Task {task_id} not found")


def _expired(description: WorkflowExecutionDescription, memo: dict[str, Any]) -> bool:
    if description.close_time is None:
        return False
    ttl = timedelta(milliseconds=int(memo.get("ttlMs") or 0))
    return description.close_time + ttl < datetime.now(timezone.utc)


def _validated_answer(key: str, request: dict[str, Any], raw: Any) -> dict[str, Any]:
    try:
        return encode_answer(request, raw)
    except ValidationError as exc:
        raise MCPError(
            code=mcp_types.INVALID_PARAMS,
            message=f"Invalid answer for input request {key!r} ({request.get('method')}): {exc}",
        ) from None


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
