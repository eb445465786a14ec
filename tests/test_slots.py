"""Which legs a worker's `LoopBoundSlots` lets in: polls only while every slot runs a leg, eager
legs whenever the loop keeps up, neither while it lags. Pure decisions, no server: the busy
worker on a real dev server is `test_busy_worker.py`."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from temporalio.worker import SlotMarkUsedContext, SlotReserveContext

from fastmcp_temporal.worker._loop_lag import LoopLag
from fastmcp_temporal.worker._slots import LAG_LIMIT, MINIMUM_LEGS, LoopBoundSlots

pytestmark = pytest.mark.anyio

CONTEXT = cast(SlotReserveContext, None)  # the supplier reads nothing from it
USED = cast(SlotMarkUsedContext, None)


def busy_slots(lag: Any) -> LoopBoundSlots:
    """A supplier whose first `MINIMUM_LEGS` slots run legs, with the loop sampled since."""
    slots = LoopBoundSlots(most=10, lag=cast(LoopLag, lag))
    for _ in range(MINIMUM_LEGS):
        assert slots.try_reserve_slot(CONTEXT) is not None
        slots.mark_slot_used(USED)
    lag.sampled_at = time.monotonic()
    return slots


async def polled(slots: LoopBoundSlots) -> bool:
    """Whether a poll gets a slot within 0.1 s: the fake loop never changes, so a refusal stands."""
    try:
        await asyncio.wait_for(slots.reserve_slot(CONTEXT), 0.1)
    except TimeoutError:
        return False
    return True


async def test_an_eager_leg_gets_a_slot_while_a_poll_waits_on_an_idle_one() -> None:
    lag = SimpleNamespace(sampled_at=0.0, seconds=0.0)
    slots = busy_slots(lag)

    assert await polled(slots), "a poll waited although every slot ran a leg"
    lag.sampled_at = time.monotonic()
    assert not await polled(slots), "a second poll took a slot while the first one's was idle"
    assert slots.try_reserve_slot(CONTEXT) is not None, "an eager leg was refused by the idle poll's slot"


async def test_no_leg_gets_a_slot_while_the_loop_lags_or_was_not_seen_since() -> None:
    lag = SimpleNamespace(sampled_at=0.0, seconds=LAG_LIMIT * 2)
    slots = busy_slots(lag)

    assert slots.try_reserve_slot(CONTEXT) is None, "an eager leg got a slot on a lagging loop"
    assert not await polled(slots)
    lag.seconds = 0.0
    assert slots.try_reserve_slot(CONTEXT) is not None
    assert slots.try_reserve_slot(CONTEXT) is None, "two slots in one turn of the loop"
