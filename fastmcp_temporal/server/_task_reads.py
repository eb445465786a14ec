"""What a reader that follows tasks needs of the task methods.

A listen stream (`_push`) and the 2025-11-25 tasks (`_tasks_2025_11_25`) both follow a task
until it changes, then read it as `tasks/get` would. They ask it of the task methods through
this one protocol, so neither reaches into the other, nor into the handlers behind it.
"""

from __future__ import annotations

from typing import Protocol

from fastmcp_temporal._fastmcp_private import GetTaskResult
from fastmcp_temporal.server._changes import Read, Signalled, TaskChanges


class TaskReads(Protocol):
    """The task methods' change signals, and a read as `tasks/get` makes it."""

    changes: TaskChanges

    def key_of(self, task_id: str) -> str: ...

    async def answer_now(self, task_id: str) -> GetTaskResult: ...

    async def next_change(
        self, heard: Signalled, reads: dict[str, Read], deadline: float
    ) -> tuple[set[str], set[str]]: ...

    async def follow_every_event(self, task_id: str) -> None: ...
