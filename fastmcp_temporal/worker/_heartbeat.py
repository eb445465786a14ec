"""How a running tool leg heartbeats, and how it notices that its event loop was blocked.

A Temporal activity learns of cancellation only from the answer to a heartbeat, and
every heartbeat is a billed Action on Temporal Cloud. A leg therefore heartbeats fast
(every `FAST_INTERVAL`) for its first `fast_period`, when an impatient client most often
cancels, then every `interval`, kept safely below the heartbeat timeout. The first
beat comes one interval in, so a leg that ends sooner costs no heartbeat at all. The ticker
is the leg's only heartbeat source, so this cadence is what Temporal records.

A durable call's leg that relays notices to its caller (`_notices`) also beats within
`NOTICE_DELAY` of a new notice once past its fast period, and only then: a tool that logs
or reports progress costs at most two heartbeats a second, one that does not costs none more.

The ticker also measures its own silences: a silence longer than the heartbeat
timeout means the tool blocked the event loop, Temporal gave up on the attempt, and
the leg must deliver its outcome another way (see `activities/tool_leg.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from temporalio import activity

from fastmcp_temporal._settings import DEFAULT_HEARTBEAT_FAST_PERIOD, DEFAULT_HEARTBEAT_INTERVAL

if TYPE_CHECKING:
    from fastmcp_temporal.worker._progress import LegProgress

logger = logging.getLogger("fastmcp_temporal")

FAST_INTERVAL = timedelta(milliseconds=200)
# A new notice of a durable call reaches Temporal this soon after the previous heartbeat.
NOTICE_DELAY = timedelta(milliseconds=500)
# A heartbeat must reach Temporal before the timeout despite event-loop lag.
_TIMEOUT_SHARE = 0.9
_TIMEOUT_MARGIN = timedelta(milliseconds=500)
# A stall this long makes the whole server unresponsive: worth a warning.
_NOTICEABLE_BLOCK = 1.0


@dataclass(frozen=True)
class HeartbeatCadence:
    """Fast while a leg is young, then sparse: cost against how soon a cancel arrives."""

    interval: timedelta = DEFAULT_HEARTBEAT_INTERVAL
    fast_period: timedelta = DEFAULT_HEARTBEAT_FAST_PERIOD

    def seconds_until_next(self, elapsed: float, timeout: float) -> float:
        """Seconds to wait after a heartbeat sent `elapsed` seconds into the leg."""
        fast = min(timeout / 4, FAST_INTERVAL.total_seconds())
        if elapsed < self.fast_period.total_seconds():
            return fast
        bound = min(timeout * _TIMEOUT_SHARE, timeout - _TIMEOUT_MARGIN.total_seconds())
        return max(fast, min(self.interval.total_seconds(), bound))


class Ticker:
    """Heartbeats one attempt's progress and records the longest silence between beats."""

    def __init__(self, tool: str, progress: LegProgress, cadence: HeartbeatCadence) -> None:
        info = activity.info()
        self._tool = tool
        self._progress = progress
        self._cadence = cadence
        self._timeout = (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds()
        self._loop = asyncio.get_running_loop()
        self._started = self._last_beat = self._due = self._loop.time()
        self._warned = False
        self._waited_for_dispatch = (datetime.now(timezone.utc) - info.started_time).total_seconds()
        self.longest_silence = 0.0

    @property
    def missed_heartbeat_timeout(self) -> bool:
        """Whether this attempt went silent, here, for longer than the heartbeat timeout."""
        return self.longest_silence > self._timeout

    @property
    def timed_out(self) -> bool:
        """Whether Temporal may have given up on this attempt for silence.

        Also true when the attempt reached the tool only after its timeout had passed (the
        worker's loop was blocked or starved while Temporal had already started it), going
        by Temporal's clock against ours.
        """
        return self.missed_heartbeat_timeout or self._waited_for_dispatch > self._timeout

    def observe(self) -> None:
        """Account for the silence up to now; warn once when the tool blocked the loop."""
        now = self._loop.time()
        self.longest_silence = max(self.longest_silence, now - self._last_beat)
        blocked = now - self._due
        if self._warned or (blocked < _NOTICEABLE_BLOCK and not self.missed_heartbeat_timeout):
            return
        self._warned = True
        logger.warning(
            "Task tool %r blocked the event loop for about %.1f s, so this server answered nothing "
            "meanwhile%s. Run blocking calls with `await anyio.to_thread.run_sync(...)`, or make "
            "the tool a plain `def` (FastMCP runs it in a thread).",
            self._tool,
            blocked,
            f"; Temporal gave up on the attempt after its heartbeat_timeout of {self._timeout:g} s, "
            "and the leg delivers its outcome once anyway"
            if self.missed_heartbeat_timeout
            else "",
        )

    async def _beat(self) -> None:
        while True:
            pause = self._cadence.seconds_until_next(self._last_beat - self._started, self._timeout)
            self._due = self._last_beat + pause
            await self._pause(pause)
            if activity.is_cancelled():
                return
            self.observe()
            activity.heartbeat(self._progress.details())
            self._last_beat = self._loop.time()

    async def _pause(self, pause: float) -> None:
        """Wait `pause`, or less when a notice to relay comes: then beat `NOTICE_DELAY` after the last beat."""
        notices = self._progress.notices
        if notices is None or pause <= NOTICE_DELAY.total_seconds():
            await asyncio.sleep(pause)
            return
        notices.changed.clear()
        try:
            await asyncio.wait_for(notices.changed.wait(), pause)
        except asyncio.TimeoutError:
            return
        soonest = self._last_beat + NOTICE_DELAY.total_seconds()
        await asyncio.sleep(max(0.0, min(soonest, self._due) - self._loop.time()))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Ticker]:
        """Heartbeat until the block exits, then account for the final silence."""
        beating = asyncio.create_task(self._beat())
        try:
            yield self
        finally:
            beating.cancel()
            self.observe()
