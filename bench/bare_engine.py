"""The yardstick for `compare.py`: a bare Temporal workflow running one activity.

Scheduled exactly as fastmcp-temporal schedules a tool leg (same timeouts, retry
policy, cancellation type, heartbeat cadence and worker settings), so the
difference between the two is what the MCP layer costs. Imported by name from the
sandbox, hence its own module.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

HEARTBEAT_TIMEOUT = timedelta(seconds=5)
HEARTBEAT_EVERY = 0.2
ANSWER_SIGNAL = "answer"

# The worker tuning `McpTasksPlugin` applies (without importing FastMCP). The bare workflow
# keeps Temporal's default sandbox, as a user's own workflow would, with beartype passed
# through because FastMCP's import hook is installed in the same process.
WORKER_SETTINGS = {
    "workflow_runner": SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("beartype")
    ),
    "max_concurrent_activities": 50,
    "max_heartbeat_throttle_interval": timedelta(milliseconds=200),
    "default_heartbeat_throttle_interval": timedelta(milliseconds=200),
    "sticky_queue_schedule_to_start_timeout": timedelta(seconds=1),
}


def _options() -> dict:
    return {
        "start_to_close_timeout": timedelta(hours=1),
        "heartbeat_timeout": HEARTBEAT_TIMEOUT,
        "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_attempts=5),
        "cancellation_type": workflow.ActivityCancellationType.TRY_CANCEL,
    }


class BareActivities:
    """Activity bodies that report to the benchmark process they run in."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled_at: dict[str, float] = {}
        self.cancelled: dict[str, asyncio.Event] = {}
        self.ran = 0

    @activity.defn(name="bare_trivial")
    async def trivial(self, n: int) -> int:
        self.ran += 1
        return n

    @activity.defn(name="bare_hold")
    async def hold(self, key: str) -> str:
        self.started.setdefault(key, asyncio.Event()).set()
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(HEARTBEAT_EVERY)
        except asyncio.CancelledError:
            self.cancelled_at[key] = asyncio.get_running_loop().time()
            self.cancelled.setdefault(key, asyncio.Event()).set()
            raise


@workflow.defn(name="BareTrivial")
class BareTrivial:
    @workflow.run
    async def run(self, n: int) -> int:
        return await workflow.execute_activity("bare_trivial", n, result_type=int, **_options())


@workflow.defn(name="BareTrivialLocal")
class BareTrivialLocal:
    """The same trivial body as a local activity: the whole task in one workflow task."""

    @workflow.run
    async def run(self, n: int) -> int:
        return await workflow.execute_local_activity(
            "bare_trivial",
            n,
            result_type=int,
            start_to_close_timeout=timedelta(hours=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_attempts=5),
        )


@workflow.defn(name="BareHold")
class BareHold:
    @workflow.run
    async def run(self, key: str) -> str:
        return await workflow.execute_activity("bare_hold", key, result_type=str, **_options())


@workflow.defn(name="BareParked")
class BareParked:
    """One leg, then wait for an answer as a task parked on input does (TTL 15 min)."""

    def __init__(self) -> None:
        self._answered = False

    @workflow.run
    async def run(self, n: int) -> int:
        await workflow.execute_activity("bare_trivial", n, result_type=int, **_options())
        try:
            await workflow.wait_condition(lambda: self._answered, timeout=timedelta(minutes=15))
        except asyncio.TimeoutError:
            return -1
        return n

    @workflow.signal(name=ANSWER_SIGNAL)
    def answer(self) -> None:
        self._answered = True
