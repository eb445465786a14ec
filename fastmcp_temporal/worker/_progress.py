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

Heartbeats add no history event, so a server that follows a task's history (or the change
feed) cannot see a new message; it re-reads a copy as often as the copy's progress has
been changing. A message that comes after the leg's message stood still for
`PROGRESS_STAMP_AFTER`, and a leg's first message once it has run `FIRST_MESSAGE_STAMP_AFTER`
(its wait for the payload store counts: `tasks/get` shows it as the message), are therefore
stamped on the task: the leg records it at once, then, once the SDK sent it,
signals the workflow (`PROGRESSED_SIGNAL`), whose history and `McpTaskChangedAt` tell every
server to re-read. So a server re-reads a silent leg only in its first seconds, not for as
long as its silence could end in an unstamped message. A tool that reports from its start
costs no signal; one that first reports later, or again after a long silence, costs one
signal (and its workflow task) per such message. A durable call's leg stamps nothing once
its input is read: its caller hears its notices directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.service import RPCError

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal.worker._detached_signals import signal_detached
from fastmcp_temporal.worker._notices import LegNotices
from fastmcp_temporal.workflows.models import PROGRESSED_SIGNAL, STORE_WAITING_DETAIL

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

logger = logging.getLogger(__name__)

PROGRESS_STAMP_AFTER = timedelta(seconds=30)
# A message the leg shows where it showed none, this long or more after it began, is stamped too:
# the reference's poll interval, within which a reader's own re-reads find an earlier one.
FIRST_MESSAGE_STAMP_AFTER = timedelta(seconds=5)


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
    stamps: bool = True
    """Whether a message after a stillness is stamped on the task: a task's leg; a durable call's is
    told it is one once its input is read (a wait for the store before then is stamped)."""
    began: float = field(default_factory=time.monotonic)
    """When (`time.monotonic()`) the leg's attempt began."""
    message_since: float = field(default_factory=time.monotonic)
    """When (`time.monotonic()`) what `tasks/get` shows of the leg last changed, or the leg began."""
    stamp_due: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a message to stamp: the ticker heartbeats it, then signals the workflow."""
    message_changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a new message: the ticker records it soon, so the SDK's next heartbeat carries it."""

    async def set_total(self, total: int) -> None:
        self.total = total

    async def increment(self, amount: int = 1) -> None:
        self.current = (self.current or 0) + amount

    async def set_message(self, message: str | None) -> None:
        if message != self.message:
            self._shows_anew()
            self.message_changed.set()
        self.message = message

    def wait_for_store(self, why: str | None) -> None:
        """Say why the leg waits for its payload store (None: it no longer does): `tasks/get` shows it
        as the leg's message, so it starts and ends as a message does."""
        if (why is None) != (self.store_waiting is None):
            self._shows_anew()
        self.store_waiting = why

    def _shows_anew(self) -> None:
        """What `tasks/get` shows of the leg is about to change: stamped when no server's re-read would
        look for it (`_stamped`)."""
        now = time.monotonic()
        if self.stamps and self._stamped(now):
            self.stamp_due.set()
        self.message_since = now

    def _stamped(self, now: float) -> bool:
        """Whether what the leg shows, changing now, is stamped: the first it shows once its attempt
        has run `FIRST_MESSAGE_STAMP_AFTER`, or a change after what it shows stood still for
        `PROGRESS_STAMP_AFTER` (`server._described` re-reads a copy until either would hold)."""
        if self.store_waiting is None and self.message is None:
            return now - self.began >= FIRST_MESSAGE_STAMP_AFTER.total_seconds()
        return now - self.message_since >= PROGRESS_STAMP_AFTER.total_seconds()

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


def stamp_progress(after: float) -> None:
    """Signal the running leg's workflow that its message changed, `after` seconds from now, once the
    heartbeat that carries the message reached Temporal (so a server that re-reads the task at the
    signal finds it), from a task detached from the attempt, which Temporal may cancel any moment; a
    failed signal only leaves the message to the next re-read."""
    signal_detached(functools.partial(_stamp, after=after))


async def _stamp(handle: WorkflowHandle[Any, Any], after: float) -> None:
    await asyncio.sleep(after)
    try:
        await handle.signal(PROGRESSED_SIGNAL)
    except RPCError as exc:
        logger.info("A leg's new message was not stamped on its task (%s); reads show it at their next re-read.",
                    exc.message)


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
