"""What a running leg reports to Temporal: progress, and the tool's last checkpoint.

Core FastMCP reads a background task's progress sink from Docket's
`current_execution` ContextVar (`Progress()` and `ctx.report_progress` both do);
there is no other hook. While a leg runs we set that ContextVar to a stand-in whose
progress lands in `LegProgress`. The activity heartbeats it to Temporal, where
`tasks/get` reads it as `statusMessage`, operators see it in the UI, and a retried
attempt reads the last checkpoint back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from docket.dependencies import current_execution


@dataclass
class LegProgress:
    """Progress of one leg, in the shape `Progress()` expects of Docket's."""

    current: int | None = None
    total: int = 1
    message: str | None = None
    checkpoint: Any = None

    async def set_total(self, total: int) -> None:
        self.total = total

    async def increment(self, amount: int = 1) -> None:
        self.current = (self.current or 0) + amount

    async def set_message(self, message: str | None) -> None:
        self.message = message

    @classmethod
    def resumed(cls, previous: dict[str, Any] | None) -> LegProgress:
        """Start from what a failed attempt last heartbeated: its message and checkpoint."""
        previous = previous or {}
        return cls(message=previous.get("statusMessage"), checkpoint=previous.get("checkpoint"))

    def details(self) -> dict[str, Any]:
        return {
            "statusMessage": self.message,
            "current": self.current,
            "total": self.total,
            "checkpoint": self.checkpoint,
        }


@dataclass
class _ExecutionStandIn:
    key: str
    progress: LegProgress = field(default_factory=LegProgress)


current_progress: ContextVar[LegProgress | None] = ContextVar("fastmcp_temporal_progress", default=None)


@contextmanager
def progress_scope(task_id: str, progress: LegProgress) -> Iterator[LegProgress]:
    """Collect this leg's progress in `progress`."""
    stand_in = _ExecutionStandIn(key=task_id, progress=progress)
    docket_token = current_execution.set(stand_in)  # type: ignore[arg-type]
    token = current_progress.set(stand_in.progress)
    try:
        yield stand_in.progress
    finally:
        current_progress.reset(token)
        current_execution.reset(docket_token)
