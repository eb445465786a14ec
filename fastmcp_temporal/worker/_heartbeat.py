"""How a running tool leg heartbeats, and how it notices that its event loop was blocked.

A leg heartbeats for liveness alone: so that Temporal retries it on another worker when
this one dies (after `heartbeat_timeout`), each beat carrying the newest progress and
checkpoint. Every heartbeat is a billed Action on Temporal Cloud (and a persistence write on
a self-hosted cluster), so a leg beats no more often than the Temporal SDK's own throttle
lets a bare activity with the same timeout (`SDK_THROTTLE_SHARE` of it), or at the tool's
`heartbeat_interval`. A cancel does not wait for a heartbeat: the worker follows each leg's
workflow for its close (`_leg_follow`). The first beat comes one interval in, so a leg that
ends sooner costs no heartbeat at all. The ticker is the leg's only heartbeat source, so
this cadence is what Temporal records.

A durable call's leg that relays notices to its caller (`_notices`) also beats within
`NOTICE_DELAY` of a new notice, and only then: a tool that logs or reports progress costs at
most two heartbeats a second, one that does not costs none more. A task's leg beats as soon
(and only then) with a message after a stillness, which it stamps on its task (`_progress`).

A heartbeat reaches Temporal only when the event loop comes around twice: once to wake
the ticker, once to run the SDK's sending task. So the ticker keeps twice the loop's lag
out of the interval, besides its margin below the timeout, taking the worse of how late it
woke itself (decaying as the loop calms) and the worker's sampled lag (`_loop_lag`): a busy
loop costs heartbeats only while it is busy. An attempt's first beat counts from when
Temporal started it, which a busy worker may get to late. The worker keeps the lag small
by taking no more legs than its loop keeps up with (`_slots.py`).

The ticker also measures its own silences: a silence longer than the heartbeat
timeout means Temporal gave up on the attempt, and the leg must deliver its outcome
another way (see `_attempts.py`). A long silence is blamed on the tool whose
step held the loop (`_loop_lag.longest_step`), or, when no step was long, on the
worker that runs more legs than its loop keeps up with.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import activity

from fastmcp_temporal._policy import policy_of
from fastmcp_temporal.connection._temporal_clock import worker_clock
from fastmcp_temporal.worker._loop_lag import Step, longest_step, worker_loop_lag
from fastmcp_temporal.worker._progress import stamp_progress

if TYPE_CHECKING:
    from fastmcp.tools.base import Tool

    from fastmcp_temporal.worker._progress import LegProgress

logger = logging.getLogger("fastmcp_temporal")

# The Temporal SDK throttles an activity's heartbeats to this share of its heartbeat timeout.
SDK_THROTTLE_SHARE = 0.8
# However late the loop, a leg beats no more often than this.
_SHORTEST_INTERVAL = timedelta(milliseconds=200)
# A new notice of a durable call reaches Temporal this soon after the previous heartbeat.
NOTICE_DELAY = timedelta(milliseconds=500)
# A heartbeat must reach Temporal before the timeout despite event-loop lag.
_TIMEOUT_SHARE = 0.9
_TIMEOUT_MARGIN = timedelta(milliseconds=500)
# A heartbeat waits for the loop to come around twice (the ticker's wake, the SDK's send).
_LAG_WAITS = 2
# The measured lag halves at each beat, so a calm loop soon gets the sparse cadence back.
_LAG_DECAY = 0.5
# A stall this long makes the whole server unresponsive: worth a warning.
_NOTICEABLE_BLOCK = 1.0
# A starved worker says so at most this often, however many of its legs notice.
_STARVED_WARNING_EVERY = 60.0
_last_starved_warning: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = weakref.WeakKeyDictionary()
_reported_steps: deque[Step] = deque(maxlen=64)


@dataclass(frozen=True)
class HeartbeatCadence:
    """How often a leg beats for liveness: the tool's `heartbeat_interval`, else the SDK's throttle."""

    interval: timedelta | None = None

    def seconds_until_next(self, timeout: float, lag: float = 0.0) -> float:
        """Seconds to wait after a heartbeat, for an attempt with heartbeat timeout `timeout`, on a
        loop that lately came around `lag` seconds late."""
        wanted = self.interval.total_seconds() if self.interval is not None else SDK_THROTTLE_SHARE * timeout
        bound = min(timeout * _TIMEOUT_SHARE, timeout - _TIMEOUT_MARGIN.total_seconds()) - _LAG_WAITS * lag
        return max(min(timeout / 4, _SHORTEST_INTERVAL.total_seconds()), min(wanted, bound))

    def for_tool(self, component: Tool) -> HeartbeatCadence:
        """This cadence, with the tool's own `execution_policy(heartbeat_interval=...)`."""
        interval = policy_of(component).heartbeat_interval
        return replace(self, interval=interval) if interval is not None else self


class Ticker:
    """Heartbeats one attempt's progress and records the longest silence between beats."""

    def __init__(self, tool: str, progress: LegProgress, cadence: HeartbeatCadence) -> None:
        info = activity.info()
        self._tool = tool
        self._progress = progress
        self._cadence = cadence
        self._timeout = (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds()
        self._loop = asyncio.get_running_loop()
        self._attempt = _attempt_beats(self._loop, self._timeout)
        self._due = self._attempt.last
        self._now = asyncio.Event()
        self._warned = False
        self._lag = 0.0
        self.longest_silence = 0.0

    @property
    def timed_out(self) -> bool:
        """Whether Temporal may have given up on this attempt for silence: the silence counts from
        when Temporal started the attempt, and allows for the loop's lag in sending a heartbeat."""
        return self.longest_silence > self._timeout

    def beat_now(self) -> None:
        """Heartbeat at once, whatever the cadence: its answer tells the SDK the attempt was cancelled."""
        self._now.set()

    @property
    def _last_beat(self) -> float:
        return self._attempt.last

    def observe(self) -> None:
        """Account for the silence and the loop's lag up to now; warn once when the loop stalled."""
        now = self._loop.time()
        silence = now - self._last_beat
        late = max(0.0, now - self._due)
        self._lag = max(late, self._lag * _LAG_DECAY)
        # The heartbeat this silence ends reaches Temporal once the loop comes around again.
        self.longest_silence = max(self.longest_silence, silence + self._loop_lag())
        if self._warned or (late < _NOTICEABLE_BLOCK and not self.timed_out):
            return
        self._warned = True
        step = longest_step(since=time.monotonic() - silence)
        if step is None or step.seconds < late / 2:
            _warn_starved(self._tool, late, self._gave_up())
        elif step.tool == self._tool and step not in _reported_steps:  # each attempt's ticker sees it
            _reported_steps.append(step)
            logger.warning(
                "Task tool %r blocked the event loop for about %.1f s in one step, so this server "
                "answered nothing meanwhile%s. Run blocking calls with `await anyio.to_thread.run_sync(...)`, "
                "or make the tool a plain `def` (FastMCP runs it in a thread).",
                self._tool,
                step.seconds,
                self._gave_up(),
            )

    def _gave_up(self) -> str:
        if not self.timed_out:
            return ""
        return (
            f"; Temporal gave up on the attempt after its heartbeat_timeout of {self._timeout:g} s, "
            "and the leg delivers its outcome once anyway"
        )

    async def _beat(self) -> None:
        while True:
            pause = self._cadence.seconds_until_next(self._timeout, self._loop_lag())
            self._due = self._last_beat + pause
            await self._pause(max(0.0, self._due - self._loop.time()))
            if activity.is_cancelled():
                return
            self.observe()
            activity.heartbeat(self._progress.details())
            self._attempt.last = self._loop.time()
            if self._progress.stamp_due.is_set():
                self._progress.stamp_due.clear()
                stamp_progress()

    def _loop_lag(self) -> float:
        return max(self._lag, worker_loop_lag.seconds)

    async def _pause(self, pause: float) -> None:
        """Wait `pause`, or less when a notice to relay or a message to stamp comes (then beat
        `NOTICE_DELAY` after the last beat), or `beat_now` is asked (then beat at once)."""
        notices = self._progress.notices
        if notices is not None:
            notices.changed.clear()
        wakers = [self._now, self._progress.stamp_due] + ([notices.changed] if notices is not None else [])
        waits = [asyncio.ensure_future(waker.wait()) for waker in wakers]
        try:
            done, _ = await asyncio.wait(waits, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not done or self._now.is_set():
            self._now.clear()
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


@dataclass
class _AttemptBeats:
    """When, on the loop's clock, Temporal last heard from this attempt (or started it)."""

    last: float


_attempt: ContextVar[_AttemptBeats | None] = ContextVar("fastmcp_temporal_attempt_beats", default=None)


def _attempt_beats(loop: asyncio.AbstractEventLoop, timeout: float) -> _AttemptBeats:
    """The beats of the running attempt, shared by its tickers; a new attempt counts from when
    Temporal started it (its dispatch may have waited for a busy loop), by Temporal's clock."""
    beats = _attempt.get()
    if beats is None:
        waited = worker_clock.since_written(activity.info().started_time).total_seconds()
        started = loop.time() - min(max(waited, 0.0), 2 * timeout)
        beats = _AttemptBeats(started)
        _attempt.set(beats)
    return beats


def _warn_starved(tool: str, late: float, gave_up: str) -> None:
    """Say, at most every `_STARVED_WARNING_EVERY` for each loop, that the worker runs more than its
    loop keeps up with."""
    loop, now = asyncio.get_running_loop(), time.monotonic()
    if now - _last_starved_warning.get(loop, -_STARVED_WARNING_EVERY) < _STARVED_WARNING_EVERY:
        return
    _last_starved_warning[loop] = now
    logger.warning(
        "This worker's event loop is starved: a heartbeat of a %r leg came %.1f s late although no "
        "tool step held the loop that long: many legs computing between their awaits share it, or the "
        "machine gives this process too little CPU%s. "
        "Lower max_concurrent_activities or add workers, or move the tools' computing into a thread "
        "(`await anyio.to_thread.run_sync(...)`, or a plain `def` tool).",
        tool,
        late,
        gave_up,
    )
