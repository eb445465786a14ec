"""How many tool legs a worker takes at once: no more than its event loop keeps up with.

A worker's legs share one event loop. A fixed number of slots lets a worker take legs
that compute between their awaits until the loop takes seconds to come around: every
leg's heartbeat is then late, Temporal times the attempts out and starts them again.
Temporal's resource-based tuner does not see this: it watches the machine's CPU and
memory, and one event loop saturates a single core, which on a machine of several
cores never reaches its CPU target.

So the worker's activity slots come from `LoopBoundSlots`: up to
`max_concurrent_activities`, but beyond `MINIMUM_LEGS` a new slot only when the loop has
been seen to come around within `LAG_LIMIT` since the last slot was given
(`_loop_lag.LoopLag`): one more leg per turn of a loop that keeps up. A poll gets such a
slot only when every slot given runs a leg; an eager leg (handed over as its workflow task
completes, with no poll) gets one without that rule, since it runs at once: refusing it would
send a short task's leg through the task queue (docs/performance.md, "Eager legs").
Legs the worker does not take wait in the task queue for it, or for another worker.
Workflow tasks, local activities and Nexus tasks keep Temporal's fixed slots.
"""

from __future__ import annotations

import asyncio
import threading
import time

from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerConfig,
    WorkerTuner,
)

from fastmcp_temporal.worker._loop_lag import SAMPLE_PERIOD, LoopLag

# A loop that takes longer than this to come around answers requests and heartbeats late:
# a heartbeat waits for it about twice, the default heartbeat margin is 500 ms.
LAG_LIMIT = 0.1
# Legs a worker takes whatever its loop's lag (a worker always makes progress).
MINIMUM_LEGS = 2
# Temporal's own slots for what is not a tool leg (`WorkerTuner.create_fixed`'s default).
_TEMPORAL_DEFAULT_SLOTS = 100
_OTHER_SLOTS = {
    "max_concurrent_workflow_tasks": "workflow_supplier",
    "max_concurrent_local_activities": "local_activity_supplier",
    "max_concurrent_nexus_tasks": "nexus_supplier",
}


class LoopBoundSlots(CustomSlotSupplier):
    """Activity slots, at most `most`, given only while the worker's event loop keeps up."""

    def __init__(self, most: int, lag: LoopLag) -> None:
        self._most = most
        self._lag = lag
        self._guard = threading.Lock()  # Temporal may reserve and release from its own threads
        self._reserved = 0
        self._running = 0
        self._last_given = 0.0

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        while (permit := self._reserve(for_poll=True)) is None:
            await asyncio.sleep(SAMPLE_PERIOD)
        return permit

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        """A slot for an eager leg, which Temporal hands over as its workflow task completes."""
        return self._reserve(for_poll=False)

    def _reserve(self, *, for_poll: bool) -> SlotPermit | None:
        with self._guard:
            if self._reserved >= self._most or (self._reserved >= MINIMUM_LEGS and not self._room(for_poll)):
                return None
            self._reserved += 1
            self._last_given = time.monotonic()
            return SlotPermit()

    def _room(self, for_poll: bool) -> bool:
        """Whether one more leg fits: the loop came around in time since the last slot was given (so
        that leg's load counts), and, for a poll, every slot given runs a leg (idle polls hold none of
        the surplus, so a burst cannot fill them all at once; an eager leg runs as soon as it has its
        slot)."""
        idle = self._reserved - self._running
        return (
            (idle == 0 or not for_poll)
            and self._lag.sampled_at > self._last_given
            and self._lag.seconds < LAG_LIMIT
        )

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        with self._guard:
            self._running += 1

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._guard:
            self._reserved -= 1
            if ctx.slot_info is not None:
                self._running -= 1


def loop_bound_tuner(config: WorkerConfig, most_legs: int, lag: LoopLag) -> WorkerTuner:
    """The worker's tuner: `LoopBoundSlots` for tool legs, the config's own slots or Temporal's
    default for the rest; those options move out of `config` into the tuner, which excludes them."""
    others = {}
    for option, supplier in _OTHER_SLOTS.items():
        others[supplier] = FixedSizeSlotSupplier(config.get(option) or _TEMPORAL_DEFAULT_SLOTS)
        config[option] = None  # type: ignore[literal-required]
    return WorkerTuner.create_composite(activity_supplier=LoopBoundSlots(most_legs, lag), **others)
