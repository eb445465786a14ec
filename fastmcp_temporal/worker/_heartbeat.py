"""How a running tool leg heartbeats, and how it notices that its event loop was blocked.

A leg heartbeats for liveness alone: so that Temporal retries it on another worker when
this one dies (after `heartbeat_timeout`), each beat carrying the newest progress and
checkpoint. Every heartbeat is a billed Action on Temporal Cloud (and a persistence write on
a self-hosted cluster), so a leg's heartbeats reach Temporal as a bare activity's do: the
SDK's core sends the first one it is given at once, then at most one per throttle window,
`min(SDK_THROTTLE_SHARE x heartbeat_timeout, the worker's heartbeat_interval)`, each
carrying the newest details recorded in that window. Its throttle timer runs on the core's
own thread, so when a heartbeat reaches Temporal does not depend on this event loop.

The ticker only *records* (`activity.heartbeat`, local and unbilled), `RECORDS_PER_WINDOW`
times a window, so a recording waits in the core whenever a window ends although the loop
turns late; a loop late by most of a window still costs no attempt. Its first recording
comes `_FIRST_RECORD_SHARE` of a window after Temporal started the attempt (at once when the
attempt's start waited longer than that for a busy loop), so a leg that ends sooner costs no
heartbeat at all, and the first beat (sent at once, as the loop gets to it) keeps half a
window of room for a busy loop. A cancel does not wait for a heartbeat:
the worker follows each leg's workflow for its close (`_leg_follow`).

A leg records a new message, and a durable call's leg a new notice it relays to its caller
(`_notices`), within `NOTICE_DELAY`, so the heartbeat that ends the window carries it; a
task's leg records at once a message after a stillness, which it stamps on its task
(`_progress`) once the window that sends it has ended. None costs a heartbeat more, as the
core sends one per window whatever was recorded in it; before its first recording a leg
waits for none of them, so a leg that ends within half a window still costs no heartbeat.

The ticker also measures its own silences: the core goes no longer between two sends than
a window or the longest gap between two recordings, so a gap longer than the heartbeat
timeout (allowing for the loop's lag in handing a recording to the core) means Temporal
gave up on the attempt, and the leg must deliver its outcome another way (see
`_attempts.py`). A long silence is blamed on the tool whose step held the loop
(`_loop_lag.longest_step`), or, when no step was long, on the worker that runs more legs
than its loop keeps up with.
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
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import activity

from fastmcp_temporal.connection._temporal_clock import worker_clock
from fastmcp_temporal.worker._loop_lag import Step, longest_step, worker_loop_lag
from fastmcp_temporal.worker._progress import stamp_progress

if TYPE_CHECKING:
    from fastmcp_temporal.worker._progress import LegProgress

logger = logging.getLogger("fastmcp_temporal")

# The Temporal SDK throttles an activity's heartbeats to this share of its heartbeat timeout.
SDK_THROTTLE_SHARE = 0.8
# A leg records its details this many times a throttle window.
RECORDS_PER_WINDOW = 4
# An attempt's first recording comes this share of a window after Temporal started it.
_FIRST_RECORD_SHARE = 0.5
# A new notice of a durable call is recorded this soon after the previous recording.
NOTICE_DELAY = timedelta(milliseconds=500)
# A heartbeat sent at a window's end reaches Temporal within this.
_SEND_MARGIN = timedelta(milliseconds=500)
# The measured lag halves at each recording, so a calm loop soon reads as calm again.
_LAG_DECAY = 0.5
# A stall this long makes the whole server unresponsive: worth a warning.
_NOTICEABLE_BLOCK = 1.0
# A starved worker says so at most this often, however many of its legs notice.
_STARVED_WARNING_EVERY = 60.0
_last_starved_warning: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = weakref.WeakKeyDictionary()
_reported_steps: deque[Step] = deque(maxlen=64)


@dataclass(frozen=True)
class HeartbeatCadence:
    """How often the SDK sends a leg's heartbeats: its throttle, capped by the worker's `heartbeat_interval`."""

    interval: timedelta | None = None

    def window(self, timeout: float) -> float:
        """Seconds between two heartbeats the SDK sends for an attempt with heartbeat timeout `timeout`."""
        throttle = SDK_THROTTLE_SHARE * timeout
        return throttle if self.interval is None else min(throttle, self.interval.total_seconds())

    def record_every(self, timeout: float) -> float:
        """Seconds between two recordings, so one waits in the core whenever a window ends."""
        return self.window(timeout) / RECORDS_PER_WINDOW

    def first_record(self, timeout: float) -> float:
        """Seconds from Temporal's start of an attempt to its first recording."""
        return self.window(timeout) * _FIRST_RECORD_SHARE

    def sent_within(self, timeout: float) -> float:
        """Seconds within which a recording reaches Temporal."""
        return self.window(timeout) + _SEND_MARGIN.total_seconds()


class Ticker:
    """Records one attempt's progress for the SDK to heartbeat, and the longest silence between recordings."""

    def __init__(self, tool: str, progress: LegProgress, cadence: HeartbeatCadence) -> None:
        info = activity.info()
        self._tool = tool
        self._progress = progress
        self._cadence = cadence
        self._timeout = (info.heartbeat_timeout or timedelta(seconds=30)).total_seconds()
        self._loop = asyncio.get_running_loop()
        self._attempt = _attempt_beats(self._loop, self._timeout)
        self._due = self._attempt.last
        self._warned = False
        self._lag = 0.0
        self.longest_silence = 0.0

    @property
    def timed_out(self) -> bool:
        """Whether Temporal may have given up on this attempt for silence: the silence counts from
        when Temporal started the attempt, and allows for the loop's lag in sending a heartbeat."""
        return self.longest_silence > self._timeout

    @property
    def sent_within(self) -> float:
        """Seconds within which a recording reaches Temporal."""
        return self._cadence.sent_within(self._timeout)

    def record(self) -> None:
        """Hand the newest details to the SDK now; its core sends them at its window's end."""
        self.observe()
        self._progress.message_changed.clear()
        if self._progress.notices is not None:
            self._progress.notices.changed.clear()
        activity.heartbeat(self._progress.details())
        self._attempt.last = self._loop.time()

    @property
    def _last_beat(self) -> float:
        return self._attempt.last

    def observe(self) -> None:
        """Account for the silence and the loop's lag up to now; warn once when the loop stalled."""
        now = self._loop.time()
        silence = now - self._last_beat
        late = max(0.0, now - self._due)
        self._lag = max(late, self._lag * _LAG_DECAY)
        # The recording this silence ends reaches the core once the loop comes around again.
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

    async def _beat(self, *, recorded: bool) -> None:
        pause = self._cadence.record_every(self._timeout) if recorded else self._cadence.first_record(self._timeout)
        while True:
            self._due = self._last_beat + pause
            await self._pause(max(0.0, self._due - self._loop.time()), messages=recorded)
            recorded = True
            if activity.is_cancelled():
                return
            self.record()
            if self._progress.stamp_due.is_set():
                self._progress.stamp_due.clear()
                stamp_progress(self.sent_within)
            pause = self._cadence.record_every(self._timeout)

    def _loop_lag(self) -> float:
        return max(self._lag, worker_loop_lag.seconds)

    async def _pause(self, pause: float, *, messages: bool) -> None:
        """Wait `pause`, or less when a message to stamp comes (then record at once), or a notice to
        relay or (with `messages`) a new message (then record `NOTICE_DELAY` after the last recording);
        a change since the last recording wakes it at once."""
        notices, changed = self._progress.notices, self._progress.message_changed
        wakers = [self._progress.stamp_due] + ([notices.changed] if notices is not None else [])
        wakers += [changed] if messages else []
        waits = [asyncio.ensure_future(waker.wait()) for waker in wakers]
        try:
            done, _ = await asyncio.wait(waits, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not done or self._progress.stamp_due.is_set():
            return
        soonest = self._last_beat + NOTICE_DELAY.total_seconds()
        await asyncio.sleep(max(0.0, min(soonest, self._due) - self._loop.time()))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Ticker]:
        """Record until the block exits, then account for the final silence. An attempt whose start
        waited for a busy loop past its first recording records at once: its beat task, and the SDK's
        task that hands a recording to the core, would each wait for another turn of that loop."""
        overdue = self._loop.time() >= self._attempt.last + self._cadence.first_record(self._timeout)
        if overdue:
            self.record()
        beating = asyncio.create_task(self._beat(recorded=overdue))
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
