"""The yardstick for the `compare` scenario: a bare Temporal workflow running one activity.

Scheduled exactly as fastmcp-temporal schedules a tool leg (same timeouts, retry
policy, cancellation type, heartbeat cadence and worker settings), so the
difference between the two is what the MCP layer costs. Imported by name from the
sandbox, hence its own module. Run as a script, it is the bare engine's worker process
in production's shape:

    python bench/bare_engine.py --address 127.0.0.1:7233 --task-queue q --marks DIR

(its Temporal calls served for Prometheus at `FASTMCP_TEMPORAL_METRICS_ADDRESS`, as this
project's worker serves them). With `--sleepers` it is instead the worker of `BareSleep`
(`scale.py --legs`): one activity that waits in silence, heartbeating through the SDK's own
throttle as a hand-written long activity does, on the worker's defaults but for
`max_concurrent_activities`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from bench.marks import Marks

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
    "max_concurrent_activities": 1000,
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
    """Activity bodies; `hold` leaves its start and cancel marks where the driver reads them."""

    def __init__(self, marks: Marks) -> None:
        """Args:
        marks: the engine's shared marks folder.
        """
        self.marks = marks

    @activity.defn(name="bare_trivial")
    async def trivial(self, n: int) -> int:
        return n

    @activity.defn(name="bare_hold")
    async def hold(self, key: str) -> str:
        self.marks.started(key)
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(HEARTBEAT_EVERY)
        except asyncio.CancelledError:
            self.marks.cancelled(key)
            raise

    @activity.defn(name="bare_sleep")
    async def sleep(self, key: str, seconds: float) -> str:
        """Wait `seconds`, heartbeating every second (the SDK sends one per 0.8 x the heartbeat
        timeout), its run marked at the start and the end as `scale_sleep`'s is."""
        self.marks.ran(key, "leg")
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            activity.heartbeat()
            await asyncio.sleep(min(1.0, left))
        self.marks.ran(key, "slept")
        return f"done:{key}"


def sleepers_worker(client: Client, task_queue: str, marks: Marks) -> Worker:
    """The worker of `BareSleep`: Temporal's defaults, with as many slots as this project's worker."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[BareSleep],
        activities=[BareActivities(marks).sleep],
        workflow_runner=WORKER_SETTINGS["workflow_runner"],
        max_concurrent_activities=WORKER_SETTINGS["max_concurrent_activities"],
    )


def bare_worker(client: Client, task_queue: str, marks: Marks) -> Worker:
    """The bare engine's worker: every bare workflow and activity, with a tool leg's settings.

    Args:
        client: a connected client.
        task_queue: the queue the driver starts its workflows on.
        marks: the engine's shared marks folder.
    """
    activities = BareActivities(marks)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[BareTrivial, BareTrivialLocal, BareHold, BareParked],
        activities=[activities.trivial, activities.hold],
        **WORKER_SETTINGS,
    )


async def start(
    client: Client, task_queue: str, workflow_name: str, arg: object, *, eager: bool = True
) -> Any:
    """Start a bare workflow as the bare driver and the `bare-mcp` engine's tool both do.

    Args:
        client: a connected client.
        task_queue: the engine's queue.
        workflow_name: `BareTrivial`, `BareHold`, … .
        arg: its one argument.
        eager: request eager start (a worker of this client then runs its first workflow task at once).
    """
    return await client.start_workflow(
        workflow_name, arg, id=f"bare/{uuid.uuid4().hex}", task_queue=task_queue, request_eager_start=eager
    )


def metrics_runtime(address: str) -> Runtime:
    """A runtime whose SDK metrics (Temporal calls among them) Prometheus scrapes at `address`.

    Args:
        address: `host:port` to serve them on.
    """
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))


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


@workflow.defn(name="BareSleep")
class BareSleep:
    """One activity waiting `seconds` with a given heartbeat timeout, as a long tool leg does."""

    @workflow.run
    async def run(self, key: str, seconds: float, heartbeat_timeout: float) -> str:
        return await workflow.execute_activity(
            "bare_sleep",
            args=[key, seconds],
            result_type=str,
            **_options() | {"heartbeat_timeout": timedelta(seconds=heartbeat_timeout)},
        )


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


async def _serve(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, runtime=metrics_runtime(os.environ["FASTMCP_TEMPORAL_METRICS_ADDRESS"])
    )
    if args.sleepers:
        worker = sleepers_worker(client, args.task_queue, Marks(args.marks))
    else:
        worker = bare_worker(client, args.task_queue, Marks(args.marks))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, lambda: asyncio.ensure_future(worker.shutdown()))
    await worker.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The bare engine's worker process for the compare scenario.")
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--marks", type=Path, required=True)
    parser.add_argument("--sleepers", action="store_true", help="run BareSleep only, at Temporal's defaults")
    asyncio.run(_serve(parser.parse_args()))
