"""What happens inside a leg: it runs once and ends once, whatever the tool does.

Each test drives a real FastMCP server, whose embedded worker runs the legs on a real
Temporal dev server, through a real `fastmcp.Client`, and counts the executions of the
tool body itself:

- a tool that blocks its event loop past the heartbeat timeout (Temporal gives up on
  the attempt and retries it) runs once, and its own result is the task's result;
- a tool raising `SystemExit`, `KeyboardInterrupt`, another `BaseException` or a
  `CancelledError` of its own completes the task once with the masked `isError`, and
  the worker keeps running tasks;
- `checkpoint()` with a value Temporal cannot store raises `TypeError` at the call;
- the default heartbeat cadence keeps a one-hour leg under 1,000 heartbeats;
- legs past the frontend's cap on concurrent long polls (`frontend.namespaceCount`, on a
  dev server of their own) ask to follow their task once a minute, not in a retry loop;
- a leg that ends at once asks Temporal for nothing to follow its task;
- a new message is recorded for the SDK's next heartbeat at once, not at the leg's next
  recording (driven by the SDK's `ActivityEnvironment`, which hands each recording over).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import datetime, timedelta, timezone

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from temporalio.api.enums.v1 import EventType
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension, checkpoint
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._temporal_clock import worker_clock
from fastmcp_temporal.devserver import start_dev_server
from fastmcp_temporal.worker._heartbeat import SDK_THROTTLE_SHARE, HeartbeatCadence, Ticker
from fastmcp_temporal.worker._plugin import heartbeat_cadence
from fastmcp_temporal.worker._progress import LegProgress
from fastmcp_temporal.workflows.models import LEG_OUTCOME_SIGNAL
from helpers.servers import server_with
from helpers.temporal import TemporalRequests, task_handle

pytestmark = pytest.mark.anyio

DEADLINE = 60


class NotAnException(BaseException):
    pass


async def test_a_leg_that_blocks_its_loop_past_the_heartbeat_timeout_runs_once(
    make_extension, caplog: pytest.LogCaptureFixture
) -> None:
    extension = make_extension(maximum_attempts=5)
    server = server_with(extension)
    runs: list[float] = []

    @server.tool(task=True)
    async def blocking_driver(seconds: float) -> str:
        runs.append(time.monotonic())
        time.sleep(seconds)  # a synchronous library call on the event loop
        await asyncio.sleep(0.2)
        return f"run {len(runs)} done"

    caplog.set_level(logging.WARNING, logger="fastmcp_temporal")
    async with Client(server) as client:
        task = await call_tool_task(client, "blocking_driver", {"seconds": 5})
        result = await task.wait(timeout=DEADLINE)
        history = await task_handle(extension, task.task_id).fetch_history()

    assert (result.status, result.result["structuredContent"]) == ("completed", {"result": "run 1 done"})
    assert len(runs) == 1
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert signals in ([], [LEG_OUTCOME_SIGNAL])
    assert signals or max(attempts, default=1) >= 2, "Temporal never gave up on the blocked attempt"
    (warning,) = [r.getMessage() for r in caplog.records if "blocked the event loop" in r.getMessage()]
    assert "'blocking_driver'" in warning and "anyio.to_thread.run_sync" in warning


@pytest.mark.parametrize(
    "raised",
    [SystemExit(3), KeyboardInterrupt("interrupted"), NotAnException("escaped"), asyncio.CancelledError()],
    ids=["SystemExit", "KeyboardInterrupt", "BaseException", "own-CancelledError"],
)
@pytest.mark.parametrize("masked", [False, True], ids=["details", "masked"])
async def test_a_base_exception_completes_the_task_once_with_the_masked_error(
    make_extension, raised: BaseException, masked: bool
) -> None:
    server = server_with(make_extension(maximum_attempts=3), mask_error_details=masked)
    runs: list[str] = []

    @server.tool(task=True)
    async def escape() -> str:
        runs.append("escape")
        raise raised

    @server.tool(task=True)
    async def after() -> str:
        return "the worker still runs tasks"

    async with Client(server) as client:
        done = await (await call_tool_task(client, "escape", raise_on_error=False)).wait(timeout=DEADLINE)
        later = await (await call_tool_task(client, "after")).wait(timeout=DEADLINE)

    expected = "Error calling tool 'escape'" + ("" if masked else f": {raised}")
    assert (done.status, done.result["isError"]) == ("completed", True)
    assert done.result["content"] == [{"type": "text", "text": expected}]
    assert runs == ["escape"]
    assert later.result["structuredContent"] == {"result": "the worker still runs tasks"}


async def test_checkpoint_refuses_a_value_temporal_cannot_store_at_the_call(make_extension) -> None:
    server = server_with(make_extension(maximum_attempts=3))
    runs: list[str] = []

    @server.tool(task=True)
    async def resumable() -> str:
        runs.append("resumable")
        checkpoint({"done": 1})
        try:
            checkpoint({"handle": object()})
        except TypeError as exc:
            return f"refused: {exc}"
        return "stored"

    async with Client(server) as client:
        done = await (await call_tool_task(client, "resumable")).wait(timeout=DEADLINE)

    text = done.result["structuredContent"]["result"]
    assert text.startswith("refused: checkpoint() needs a value Temporal can store as JSON"), text
    assert "got dict" in text
    assert (done.status, runs) == ("completed", ["resumable"])


def test_a_leg_beats_as_sparsely_as_the_sdk_throttles_a_plain_activity_by_default() -> None:
    cadence = heartbeat_cadence(TemporalTasksSettings())
    timeout = TemporalTasksSettings().heartbeat_timeout.total_seconds()
    assert cadence.window(timeout) == pytest.approx(SDK_THROTTLE_SHARE * timeout)
    assert cadence.window(60) == pytest.approx(SDK_THROTTLE_SHARE * 60)


def test_the_workers_heartbeat_interval_caps_the_sdk_throttle(monkeypatch) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_HEARTBEAT_INTERVAL", "20")
    cadence = heartbeat_cadence(TemporalTasksSettings())
    assert cadence == HeartbeatCadence(timedelta(seconds=20))
    assert (cadence.window(timeout=60), cadence.window(timeout=5)) == (20, 4)
    assert cadence.record_every(timeout=60) < cadence.window(timeout=60)


# A frontend that holds this many long polls per operation at once refuses the rest (enough
# for the worker's own task queue polls).
LONG_POLL_CAP = 10
CAPPED_LEGS = 20
CAPPED_WINDOW = 20  # seconds over which the legs' requests to follow their tasks are counted


async def test_legs_past_the_frontends_long_poll_cap_do_not_retry_their_follow_in_a_loop(tmp_path) -> None:
    dev = await asyncio.to_thread(
        start_dev_server,
        db_path=tmp_path / "temporal.db",
        ui=False,
        dynamic_config={"frontend.namespaceCount": str(LONG_POLL_CAP)},
    )
    try:
        settings = {"address": dev.address, "task_queue": "capped", "heartbeat_timeout": timedelta(seconds=2)}
        release = asyncio.Event()

        async def wait_for_release(job: int) -> int:
            await release.wait()
            return job

        api = server_with(TemporalTasksExtension(worker=False, **settings), wait_for_release)
        hosted = server_with(TemporalTasksExtension(**settings), wait_for_release)
        requests = TemporalRequests()
        temporal = await requests.connect(dev.address, plugins=[McpTasksPlugin(hosted)])
        async with Worker(temporal, task_queue="capped"), Client(api) as client:
            tasks = [await call_tool_task(client, "wait_for_release", {"job": job}) for job in range(CAPPED_LEGS)]
            with anyio.fail_after(DEADLINE):  # every leg has asked once
                while (before := requests.count()["GetWorkflowExecutionHistory"]) < CAPPED_LEGS:
                    await asyncio.sleep(0.1)
            await asyncio.sleep(CAPPED_WINDOW)
            follows = requests.count()["GetWorkflowExecutionHistory"] - before
            release.set()
            statuses = [(await task.wait(timeout=DEADLINE)).status for task in tasks]
    finally:
        dev.stop()

    assert statuses == ["completed"] * CAPPED_LEGS
    assert follows <= 2 * CAPPED_LEGS, f"{follows} requests to follow {CAPPED_LEGS} legs in {CAPPED_WINDOW} s"


SHORT_LEGS = 10


async def test_a_leg_that_ends_at_once_asks_temporal_nothing_to_follow_its_task(
    temporal_server, task_queue
) -> None:
    """Following a task for its cancel is a history long poll; a leg done in milliseconds needs none."""
    settings = {"address": temporal_server.address, "task_queue": task_queue}

    async def quick(job: int) -> int:
        return job

    api = server_with(TemporalTasksExtension(worker=False, **settings), quick)
    hosted = server_with(TemporalTasksExtension(**settings), quick)
    requests = TemporalRequests()
    temporal = await requests.connect(temporal_server.address, plugins=[McpTasksPlugin(hosted)])
    async with Worker(temporal, task_queue=task_queue), Client(api) as client:
        for job in range(SHORT_LEGS):
            task = await call_tool_task(client, "quick", {"job": job})
            assert (await task.wait(timeout=DEADLINE)).status == "completed"
    follows = requests.count()["GetWorkflowExecutionHistory"]

    # a loop stalled by a busy machine may let a leg reach its follow now and then
    assert follows <= SHORT_LEGS // 3, f"{follows} requests to follow {SHORT_LEGS} legs that ended at once"


async def test_a_new_message_is_recorded_at_once_not_at_the_legs_next_recording() -> None:
    """At a 10-minute heartbeat timeout a leg records every 2 minutes; its attempt started 5 minutes
    ago, so it records at once, and a new message then is recorded long before the next tick."""
    environment = ActivityEnvironment()
    started = datetime.now(timezone.utc) - timedelta(minutes=5)
    environment.info = dataclasses.replace(
        environment.info, heartbeat_timeout=timedelta(minutes=10), started_time=started
    )
    worker_clock.saw(datetime.now(timezone.utc))
    recorded: list[str] = []
    environment.on_heartbeat = lambda *details: recorded.append(details[0]["statusMessage"])
    progress = LegProgress(message="first")

    async def until(message: str) -> None:
        async with asyncio.timeout(DEADLINE / 2):
            while message not in recorded:
                await asyncio.sleep(0.01)

    async def leg() -> None:
        async with Ticker("tool", progress, HeartbeatCadence()).running():
            await until("first")
            await progress.set_message("second")
            await until("second")

    await environment.run(leg)
    assert recorded == ["first", "second"]
