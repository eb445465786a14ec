"""A task's shapes on the MCP wire, each built in one place.

A task is told to a client in three shapes: a read's answer (`tasks/get`, a listen stream, a
cancel), a creation's (`CreateTaskResult`, of a `tools/call` or of a retried first round), and
a notification of its status (`notifications/tasks` on a listen stream, the 2025-11-25
`notifications/tasks/status` on an open `tasks/result`). `task_answer` builds either answer
from the same fields, so a creation and a read of one task never disagree on them, and
`status_notification` wraps what a notification carries, whichever method names it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypeVar

from mcp_types import Notification, NotificationParams
from pydantic import ConfigDict

from fastmcp_temporal._fastmcp_private import CreateTaskResult, GetTaskResult, TaskStatus
from fastmcp_temporal.server._watch import Timing

Answer = TypeVar("Answer", GetTaskResult, CreateTaskResult)
_TASK_FIELDS = set(CreateTaskResult.model_fields) - {"result_type"}  # what every shape of a task tells


class TaskStatusParams(NotificationParams):
    """A task status notification's params: the task's fields, whichever wire's they are."""

    model_config = ConfigDict(extra="allow")


class _TaskStatusNotification(Notification[TaskStatusParams, str]):
    method: str
    params: TaskStatusParams


def task_answer(
    shape: type[Answer],
    task_id: str,
    status: TaskStatus,
    timing: Timing,
    *,
    updated_at: str | None = None,
    **fields: Any,
) -> Answer:
    """The task as `shape` (`GetTaskResult`, `CreateTaskResult`) tells it: its timing, `fields` (its message,
    result, error or questions), and when it was last updated (`updated_at`, else now)."""
    return shape(
        task_id=task_id,
        status=status,
        created_at=timing.created_at,
        last_updated_at=updated_at or datetime.now(timezone.utc).isoformat(),
        ttl_ms=timing.ttl_ms,
        poll_interval_ms=timing.poll_interval_ms,
        **fields,
    )


def created_from(read: GetTaskResult) -> CreateTaskResult:
    """The task as a `CreateTaskResult` announces it, from a read of it: the task's fields, as read."""
    return CreateTaskResult.model_validate(read.model_dump(include=_TASK_FIELDS))


def status_notification(method: str, task: dict[str, Any]) -> Notification[TaskStatusParams, str]:
    """`method` (`notifications/tasks`, `notifications/tasks/status`) telling `task`, as that wire has it."""
    return _TaskStatusNotification(method=method, params=TaskStatusParams.model_validate(task))
