"""Bridge FastMCP's task progress to Temporal activity heartbeats.

Core FastMCP reads a background task's progress sink from Docket's
`current_execution` ContextVar (`Progress()` and `ctx.report_progress` both do);
there is no other hook. While a leg runs we set that ContextVar to a stand-in whose
progress lands in `LegProgress`, which the activity heartbeats to Temporal, where
`tasks/get` reads it as `statusMessage` and operators see it in the UI.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from docket.dependencies import current_execution


@dataclass
class LegProgress:
    """Progress of one leg, in the shape `Progress()` expects of Docket's."""

    current: int | None = None
    total: int = 1
    message: str | None = None

    async def set_total(self, total: int) -> None:
        self.total = total

    async def increment(self, amount: int = 1) -> None:
        self.current = (self.current or 0) + amount

    async def set_message(self, message: str | None) -> None:
        self.message = message

    def details(self) -> dict[str, Any]:
        return {"statusMessage": self.message, "current": self.current, "total": self.total}


@dataclass
class _ExecutionStandIn:
    key: str
    progress: LegProgress = field(default_factory=LegProgress)


@contextmanager
def progress_scope(task_id: str) -> Iterator[LegProgress]:
    stand_in = _ExecutionStandIn(key=task_id)
    token = current_execution.set(stand_in)  # type: ignore[arg-type]
    try:
        yield stand_in.progress
    finally:
        current_execution.reset(token)
