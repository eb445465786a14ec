"""How far behind the worker's event loop runs, and which tool step held it.

A worker runs every leg's body, its heartbeats and its polls on one event loop. When the
loop falls behind, either one step of a tool held it (a blocking call: the tool's fault)
or many short steps queue up behind each other (too much work at once: the worker's
fault). Both delay every heartbeat alike, so distinguishing them takes two measures:

- `LoopLag` samples how late a short sleep wakes: the time the loop takes to come
  around, whatever holds it. The plugin samples `worker_loop_lag` while its worker runs;
  the worker's slot supplier (`_slots.py`) takes no more legs while it is high, and a
  leg's heartbeats leave room for it (`_heartbeat.py`).
- `timed_steps` wraps a leg's body so each step it runs between two awaits is timed,
  and `longest_step` says which tool held the loop longest since a given time.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# Also the fastest a worker takes legs past its first few (one per sample): 100 a second.
SAMPLE_PERIOD = 0.01
# The lag is the worst of the last few samples, so one quick turn of a busy loop is not taken for calm.
_SAMPLES_KEPT = 3
# Steps shorter than this are not kept: they cannot explain a noticeable stall.
_KEPT_STEP = 0.05
_STEPS_KEPT = 256


class LoopLag:
    """The event loop's recent lag: how late a `SAMPLE_PERIOD` sleep woke, at worst, lately."""

    def __init__(self) -> None:
        self._samples: deque[float] = deque([0.0], maxlen=_SAMPLES_KEPT)
        self.sampled_at = 0.0
        """`time.monotonic()` of the last sample (0: never sampled)."""

    @property
    def seconds(self) -> float:
        return max(self._samples)

    @asynccontextmanager
    async def sampling(self) -> AsyncIterator[LoopLag]:
        """Sample the running loop until the block exits."""
        sampler = asyncio.create_task(self._sample())
        try:
            yield self
        finally:
            sampler.cancel()

    async def _sample(self) -> None:
        while True:
            due = time.monotonic() + SAMPLE_PERIOD
            await asyncio.sleep(SAMPLE_PERIOD)
            self.sampled_at = time.monotonic()
            self._samples.append(max(0.0, self.sampled_at - due))


worker_loop_lag = LoopLag()
"""The lag of this process's workers' loop, sampled while a worker of the plugin runs."""


@dataclass(frozen=True)
class Step:
    """One step of a tool's body: what it ran between two awaits, and when that ended."""

    tool: str
    seconds: float
    ended: float


_long_steps: deque[Step] = deque(maxlen=_STEPS_KEPT)


def longest_step(since: float) -> Step | None:
    """The longest kept step of any tool body that ended after `since` (`time.monotonic()`)."""
    recent = [step for step in _long_steps if step.ended > since]
    return max(recent, key=lambda step: step.seconds, default=None)


class _TimedSteps(Coroutine[Any, Any, T]):
    """`coroutine`, with each step it runs between two awaits timed."""

    def __init__(self, coroutine: Coroutine[Any, Any, T], tool: str) -> None:
        self._coroutine = coroutine
        self._tool = tool

    def send(self, value: Any) -> Any:
        started = time.monotonic()
        try:
            return self._coroutine.send(value)
        finally:
            self._timed(started)

    def throw(self, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return self._coroutine.throw(*args)
        finally:
            self._timed(started)

    def close(self) -> None:
        self._coroutine.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self._coroutine.__await__()

    def __getattr__(self, name: str) -> Any:
        """The wrapped coroutine's own attributes (`cr_frame`, `cr_running`...), which `inspect`
        and anyio read of a task's coroutine."""
        return getattr(self._coroutine, name)

    def _timed(self, started: float) -> None:
        ended = time.monotonic()
        if ended - started >= _KEPT_STEP:
            _long_steps.append(Step(self._tool, ended - started, ended))


def timed_steps(coroutine: Coroutine[Any, Any, T], tool: str) -> Coroutine[Any, Any, T]:
    """`coroutine` for `asyncio.create_task`, each step of it timed for `longest_step`."""
    return _TimedSteps(coroutine, tool)
