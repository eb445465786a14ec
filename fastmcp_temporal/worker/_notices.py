"""What a durable call's leg relays to its waiting caller: the body's log messages and progress.

A plain `tools/call` served by a workflow (`sync_calls="workflow"`) runs its body on a worker,
far from the caller's connection. The body's `ctx.log` / `ctx.info` ... messages and its
`ctx.report_progress` reports (when the caller sent a `progressToken`) go into `LegNotices`,
an ordered stream the leg's heartbeats carry to Temporal as part of their details; the
server that waits on the call reads it there (`server/_relay.py`) and sends each notice to the
caller as the inline call would have sent it. The leg's outcome carries the stream's
latest window too, for the notices no heartbeat carried before the leg ended.

Heartbeat details are replaced, not appended, so each carries a window: the notices of
the last `WINDOW_AGE` (longer when the SDK sends a leg's heartbeats at longer intervals), at most `WINDOW_NOTICES` of them and `WINDOW_BYTES` in all; one
message is cut to `MESSAGE_CHARS`. Every progress report stays in the window, as every log
message does; over its count or size, a report a later one supersedes leaves first, then the
oldest notice, so a tight progress loop never pushes out a log message. Each notice has a
sequence number within the stream, so the server relays each once and knows how many it
missed (more than the window holds between two reads).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WINDOW_AGE = 5.0
WINDOW_NOTICES = 64
WINDOW_BYTES = 32 * 1024
MESSAGE_CHARS = 4 * 1024


@dataclass
class _Notice:
    at: float
    seq: int
    kind: str  # "log" or "progress"
    data: dict[str, Any]
    size: int


@dataclass
class LegNotices:
    """The notices one execution of a leg's body relays, identified by `stream`."""

    progress: bool
    """Whether the caller asked for progress (sent a `progressToken`)."""
    age: float = WINDOW_AGE
    """Seconds a notice stays in the window: at least as long as a heartbeat takes to carry it."""
    stream: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    _notices: deque[_Notice] = field(default_factory=deque)
    _seq: int = 0
    _bytes: int = 0

    def log(self, level: str, message: str, logger: str | None, extra: Mapping[str, Any] | None) -> None:
        """A `ctx.log` message, relayed as `notifications/message`."""
        data: dict[str, Any] = {"level": level, "message": message[:MESSAGE_CHARS]}
        if logger is not None:
            data["logger"] = logger
        if extra:
            data["extra"] = json.loads(json.dumps(dict(extra), default=str))
        self._add("log", data)

    def report(self, progress: float, total: float | None, message: str | None) -> None:
        """A `ctx.report_progress` report, relayed as `notifications/progress` (when asked for)."""
        if not self.progress:
            return
        data = {"progress": progress, "total": total, "message": message[:MESSAGE_CHARS] if message else message}
        self._add("progress", data)

    def window(self) -> dict[str, Any] | None:
        """The recent notices, as a heartbeat or the leg's outcome carries them; None before any."""
        self._prune(time.monotonic())
        if not self._notices:
            return None
        return {"stream": self.stream, "notices": [[n.seq, n.kind, n.data] for n in self._notices]}

    def _add(self, kind: str, data: dict[str, Any]) -> None:
        self._seq += 1
        size = len(json.dumps(data))
        if size > WINDOW_BYTES:  # an `extra` too large to relay: the message goes without it
            data.pop("extra", None)
            size = len(json.dumps(data))
        self._notices.append(_Notice(time.monotonic(), self._seq, kind, data, size))
        self._bytes += size
        self._prune(time.monotonic())
        self.changed.set()

    def _prune(self, now: float) -> None:
        notices = self._notices
        while notices and now - notices[0].at > self.age:
            self._bytes -= notices.popleft().size
        while len(notices) > WINDOW_NOTICES or self._bytes > WINDOW_BYTES:
            dropped = _superseded_progress(notices) or notices[0]
            notices.remove(dropped)  # notices are unique by their sequence number
            self._bytes -= dropped.size


def _superseded_progress(notices: deque[_Notice]) -> _Notice | None:
    """The oldest progress report a later one in the window supersedes; None if at most one is there."""
    reports = (notice for notice in notices if notice.kind == "progress")
    oldest, later = next(reports, None), next(reports, None)
    return oldest if later is not None else None
