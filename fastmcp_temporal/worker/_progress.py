"""What a running leg reports to Temporal: progress, and the tool's last checkpoint.

Core FastMCP reads a background task's progress sink from Docket's
`current_execution` ContextVar (`Progress()` and `ctx.report_progress` both do);
there is no other hook. While a leg runs that ContextVar holds a stand-in
(`_fastmcp_private.docket_progress`) whose progress lands in `LegProgress`. The
activity heartbeats it to Temporal, where `tasks/get` reads it as `statusMessage`,
operators see it in the UI, and a retried attempt reads the last checkpoint back.
A durable call's leg also heartbeats the notices it relays to its caller (`_notices`),
and a leg waiting for its payload store says so (`payloadStore`, from `_store_outage`),
which `tasks/get` and `tasks list --stuck` read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from temporalio import activity

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal.worker._notices import LegNotices
from fastmcp_temporal.workflows.models import STORE_WAITING_DETAIL


@dataclass
class LegProgress:
    """Progress of one leg, in the shape `Progress()` expects of Docket's."""

    current: int | None = None
    total: int = 1
    message: str | None = None
    checkpoint: Any = None
    notices: LegNotices | None = None
    store_waiting: str | None = None
    """Why the leg waits for its payload store, while it does."""

    async def set_total(self, total: int) -> None:
        self.total = total

    async def increment(self, amount: int = 1) -> None:
        self.current = (self.current or 0) + amount

    async def set_message(self, message: str | None) -> None:
        self.message = message

    @classmethod
    def resumed(cls) -> LegProgress:
        """This attempt's progress, from what a failed earlier attempt of its leg last heartbeated:
        its message and checkpoint."""
        details = activity.info().heartbeat_details
        previous = details[0] if details and isinstance(details[0], dict) else {}
        return cls(message=previous.get("statusMessage"), checkpoint=previous.get("checkpoint"))

    def details(self) -> dict[str, Any]:
        details = {
            "statusMessage": self.message,
            "current": self.current,
            "total": self.total,
            "checkpoint": self.checkpoint,
        }
        if self.notices is not None:
            details["notices"] = self.notices.window()
        if self.store_waiting is not None:
            details[STORE_WAITING_DETAIL] = self.store_waiting
        return details


current_progress: ContextVar[LegProgress | None] = ContextVar("fastmcp_temporal_progress", default=None)


@contextmanager
def progress_scope(task_id: str, progress: LegProgress) -> Iterator[LegProgress]:
    """Collect this leg's progress in `progress`."""
    token = current_progress.set(progress)
    try:
        with _fastmcp_private.docket_progress(task_id, progress):
            yield progress
    finally:
        current_progress.reset(token)
