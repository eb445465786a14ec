"""Closed tasks answered from memory, so a finished task's reads cost Temporal nothing.

A run never changes once closed, so its answer is kept, bounded in entries and in result size,
until its TTL ends on Temporal's clock: from the close event a long poll sees (`remember_close`:
a completion whose result is small and stored inline), else from the `describe()` a read makes.
An operator can start a closed workflow again (a reset):
a remembered close is re-checked one poll interval after it was last known current, then at
doubling intervals up to `_CLOSED_RECHECK_MAX`.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from fastmcp_temporal._fastmcp_private import GetTaskResult, TaskStatus
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._watch import Timing
from fastmcp_temporal.workflows.models import TaskOutcome

# Closed tasks answered from memory: at most this many, each result at most this big.
_CLOSED_CACHE_ENTRIES = 1_000
CLOSED_CACHE_MAX_RESULT_CHARS = 64 * 1024
# A remembered close is re-checked for a new run (a reset) one poll interval after it was
# known current, then after twice as long each time the run is the same, up to this.
_CLOSED_RECHECK_MAX = timedelta(minutes=1)

# What the task methods pass in: a completed outcome's status and answer fields (None: it expired
# unanswered).
OutcomeState = Callable[[TaskOutcome], tuple[TaskStatus, dict[str, Any]] | None]


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


# What the task methods pass in: a remembered close's answer.
ClosedAnswer = Callable[[Closed], GetTaskResult]


class ClosedAnswers:
    """The remembered closes of one running extension, keyed by workflow id."""

    def __init__(self, clock: TemporalClock, converter: DataConverter, outcome_state: OutcomeState) -> None:
        self._clock = clock  # Temporal's: a remembered close expires by it
        self._storeless = replace(converter, external_storage=None)
        self._outcome_state = outcome_state
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

    async def remember_close(self, key: str, event: HistoryEvent, timing: Timing, run_id: str) -> bool:
        """Remember a completed run's answer from its close event, when small enough; whether it was.

        Decoded without the payload store: a stored result is never fetched just to be
        remembered (its reference fails to decode, and it is too big anyway). Anything else
        (failed, cancelled, expired, a stored result) is left to the `describe()` of a read.
        """
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        if sum(payload.ByteSize() for payload in payloads) > CLOSED_CACHE_MAX_RESULT_CHARS:
            return False
        try:
            (outcome,) = await self._storeless.decode(payloads, [TaskOutcome])
        except Exception:  # a stored result's reference, or one this server cannot decrypt
            return False
        if (state := self._outcome_state(outcome)) is None:
            return False
        expires_at = event.event_time.ToDatetime(tzinfo=timezone.utc) + timedelta(milliseconds=timing.ttl_ms)
        self.remember(key, *state, timing, expires_at, run_id)
        return True
