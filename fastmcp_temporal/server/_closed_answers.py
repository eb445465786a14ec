"""Closed tasks answered from memory, so a finished task's reads cost Temporal nothing.

A run never changes once closed, so its answer is kept, bounded in entries and in result size,
until its TTL ends on Temporal's clock. An operator can start a closed workflow again (a reset):
a remembered close is re-checked one poll interval after it was last known current, then at
doubling intervals up to `_CLOSED_RECHECK_MAX`.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from fastmcp_temporal._fastmcp_private import TaskStatus
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._watch import Timing

# Closed tasks answered from memory: at most this many, each result at most this big.
_CLOSED_CACHE_ENTRIES = 1_000
CLOSED_CACHE_MAX_RESULT_CHARS = 64 * 1024
# A remembered close is re-checked for a new run (a reset) one poll interval after it was
# known current, then after twice as long each time the run is the same, up to this.
_CLOSED_RECHECK_MAX = timedelta(minutes=1)


@dataclass(frozen=True)
class Closed:
    """What a closed run of a task answers until its TTL ends, while it is the workflow's latest.

    A run never changes once closed, but an operator can start the workflow again (a reset):
    a read `recheck` seconds after `checked_at` describes the workflow to compare its run.
    """

    status: TaskStatus
    fields: dict[str, Any]
    timing: Timing
    expires_at: datetime
    run_id: str
    checked_at: float  # event-loop time `run_id` was last known to be the latest run
    recheck: float

    def due(self, now: float) -> bool:
        return now - self.checked_at >= self.recheck

    def confirmed(self, now: float) -> Closed:
        """Still the latest run at `now`: re-checked after twice as long next time."""
        recheck = min(2 * self.recheck, _CLOSED_RECHECK_MAX.total_seconds())
        return replace(self, checked_at=now, recheck=recheck)


class ClosedAnswers:
    """The remembered closes of one running extension, keyed by workflow id."""

    def __init__(self, clock: TemporalClock) -> None:
        self._clock = clock  # Temporal's: a remembered close expires by it
        self._closed: OrderedDict[str, Closed] = OrderedDict()

    def cached(self, key: str) -> Closed | None:
        """The task's remembered close, unless its TTL has ended or its run is due a re-check."""
        closed = self._closed.get(key)
        if closed is not None and closed.expires_at < self._clock.now():
            del self._closed[key]
            return None
        if closed is not None and closed.due(asyncio.get_running_loop().time()):
            return None
        return closed

    def confirmed(self, key: str, run_id: str) -> Closed | None:
        """The remembered close of `run_id`, which a `describe()` has just found the latest run."""
        known = self._closed.get(key)
        if known is None or known.run_id != run_id:
            return None
        self._closed[key] = known.confirmed(asyncio.get_running_loop().time())
        return self._closed[key]

    def remember(
        self,
        key: str,
        status: TaskStatus,
        fields: dict[str, Any],
        timing: Timing,
        expires_at: datetime,
        run_id: str,
    ) -> Closed:
        """A closed run's answer, remembered (in place of an earlier run's) when its result is small
        enough; first re-checked one poll interval on."""
        now = asyncio.get_running_loop().time()
        closed = Closed(status, fields, timing, expires_at, run_id, now, timing.poll_interval_ms / 1000)
        self._closed.pop(key, None)
        if len(json.dumps(fields.get("result"), default=str)) <= CLOSED_CACHE_MAX_RESULT_CHARS:
            self._closed[key] = closed
            while len(self._closed) > _CLOSED_CACHE_ENTRIES:
                self._closed.popitem(last=False)
        return closed
