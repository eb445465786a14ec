"""Fairness between callers, a tool's priority, and rate limits, read back from Temporal.

A task's workflow starts with the caller's fairness key and the tool's priority key; its
legs inherit them. On a fair task queue (the dev server's, `FAIR_TASK_QUEUES`) a caller's
single task starts while another caller's backlog still waits, where a first-come
first-served queue runs it last: proven from the ActivityTaskStarted events Temporal
recorded, on a worker that runs one leg at a time. The running embedded worker starts legs
no faster than `max_activities_per_second` (their bodies' start, and Temporal's
ActivityTaskStarted events), and so does a `fastmcp-temporal worker` given
`--max-activities-per-second`; the task queue's limit reaches Temporal from either, and a
user-built Worker's own limits win over the settings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.enums.v1 import EventType, RateLimitSource, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowHandle
from temporalio.worker import Worker, WorkerConfig

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension, execution_policy
from fastmcp_temporal.devserver import DevServer, start_dev_server
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, FAIRNESS_KEY_BYTES, fairness_key
from helpers.processes import Processes
from helpers.servers import (
    WORKER_SERVER,
    NoTasksClient,
    http_client,
    server_with,
    serving_http,
    square,
    verifier,
)
from helpers.temporal import call_workflows, task_handle, temporal_client, workflow_of
from helpers.waits import DEADLINE, eventually, finished, polled_until
from helpers.wire import accept, ask, tasks_update

pytestmark = pytest.mark.anyio

BACKLOG = 4
"""Caller A's tasks queued behind its running one: small, as each leg is released by hand."""

# One partition, so a queue's order is the queue's, not the luck of which partition a poll reaches.
_ONE_PARTITION = {"matching.numTaskqueueReadPartitions": "1", "matching.numTaskqueueWritePartitions": "1"}
_ORDERS = {
    "fair": _ONE_PARTITION,
    "first-come": {**_ONE_PARTITION, "matching.enableFairness": "false"},
}


@pytest.fixture(scope="module", params=sorted(_ORDERS))
def ordered_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, DevServer]]:
    """A dev server of its own whose task queues are fair, or first come, first served."""
    server = start_dev_server(ui=False, dynamic_config=_ORDERS[request.param])
    try:
        yield request.param, server
    finally:
        server.stop()


class Gates:
    """Legs that say they started, in order, and return once the test releases each one."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._gates: dict[str, anyio.Event] = {}

    def gate(self, label: str) -> anyio.Event:
        return self._gates.setdefault(label, anyio.Event())

    def tool(self) -> Callable[..., Any]:
        async def leg(label: str) -> str:
            self.started.append(label)
            await self.gate(label).wait()
            return label

        return leg

    async def release_in_turn(self, legs: int) -> None:
        """Release each leg once it has started, one at a time, until `legs` have run."""
        for turn in range(legs):
            await eventually(lambda: len(self.started) > turn, what=f"leg {turn + 1} of {legs} to start")
            self.gate(self.started[turn]).set()


async def leg_scheduled(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the task's leg waits in the task queue (or runs)."""
    with anyio.fail_after(DEADLINE):
        while not (await handle.describe()).raw_description.pending_activities:
            await anyio.sleep(0.05)


async def leg_started_at(handle: WorkflowHandle[Any, Any]) -> datetime:
    """When Temporal recorded the task's (one) leg starting."""
    history = await handle.fetch_history()
    (started,) = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    return started.event_time.ToDatetime()


async def test_a_fair_queue_starts_another_callers_task_before_a_backlog_drains(
    ordered_server: tuple[str, DevServer], task_queue: str
) -> None:
    order, temporal_server = ordered_server
    extension = TemporalTasksExtension(
        address=temporal_server.address,
        task_queue=task_queue,
        max_concurrent_activities=1,  # one leg at a time: the rest wait in the queue
        shutdown_grace=timedelta(0),
    )
    gates = Gates()
    server = server_with(extension, gates.tool(), auth=verifier())
    async with (
        serving_http(server) as url,
        http_client(url, "token-a") as caller_a,
        http_client(url, "token-b") as caller_b,
    ):
        a_tasks = [await call_tool_task(caller_a, "leg", {"label": f"a{i}"}) for i in range(BACKLOG + 1)]
        await eventually(lambda: len(gates.started) == 1, what="one of caller A's legs to run")
        handles = {f"a{i}": await workflow_of(extension, task.task_id) for i, task in enumerate(a_tasks)}
        for handle in handles.values():
            await leg_scheduled(handle)  # A's backlog is in the queue before B asks
        b_task = await call_tool_task(caller_b, "leg", {"label": "b"})
        handles["b"] = await workflow_of(extension, b_task.task_id)
        await leg_scheduled(handles["b"])
        await gates.release_in_turn(BACKLOG + 2)
        for task in [*a_tasks, b_task]:
            assert (await finished(task)).status == "completed"
        started_at = {label: await leg_started_at(handle) for label, handle in handles.items()}

    in_temporal_order = sorted(started_at, key=started_at.__getitem__)
    assert in_temporal_order == gates.started  # one leg at a time: the worker saw Temporal's order
    a_last = max(at for label, at in started_at.items() if label != "b")
    if order == "fair":
        assert started_at["b"] < a_last, in_temporal_order
    else:
        assert started_at["b"] > a_last, in_temporal_order


# --- a fairness key and a priority Temporal accepts --------------------------------------


@pytest.mark.parametrize("priority", [0, 6, 2.5, True, "1"])
def test_a_priority_outside_1_to_5_is_refused_where_the_tool_is_declared(priority: object) -> None:
    with pytest.raises(ValueError, match=r"priority=.*: use an integer from 1 \(runs first\) to 5"):
        execution_policy(priority=priority)  # type: ignore[arg-type]


def test_every_scope_tag_is_its_own_fairness_key_and_a_longer_one_is_hashed_to_fit() -> None:
    minted = [ANONYMOUS_SCOPE_TAG, "v2-" + "f" * 32, "e" * 32]  # anonymous, keyed, legacy
    assert [fairness_key(tag) for tag in minted] == minted
    long_tag = "v9-" + "x" * 100
    hashed = fairness_key(long_tag)
    assert len(hashed.encode()) <= FAIRNESS_KEY_BYTES and hashed == fairness_key(long_tag)
    assert hashed != fairness_key(long_tag + "y")


# --- what Temporal records of a task's priority -----------------------------------------


def tag_of(handle: WorkflowHandle[Any, Any]) -> str:
    """The caller's scope tag a task's workflow id carries (`mcp-task/<tag>/<task id>`)."""
    return handle.id.split("/")[1]


async def test_each_callers_tasks_carry_their_fairness_key_and_the_tools_priority(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension()
    release = anyio.Event()

    @execution_policy(priority=1)
    async def urgent() -> str:
        await release.wait()
        return "done"

    server = server_with(extension, urgent, square, auth=verifier())
    async with (
        serving_http(server) as url,
        http_client(url, "token-a") as caller_a,
        http_client(url, "token-b") as caller_b,
    ):
        a_urgent = await workflow_of(extension, (await call_tool_task(caller_a, "urgent")).task_id)
        b_urgent = await workflow_of(extension, (await call_tool_task(caller_b, "urgent")).task_id)
        await leg_scheduled(a_urgent)
        running = (await a_urgent.describe()).raw_description
        release.set()
        b_square = await workflow_of(extension, (await call_tool_task(caller_b, "square", {"n": 3})).task_id)
        described = {
            name: (await handle.describe()).raw_description.workflow_execution_info.priority
            for name, handle in {"a_urgent": a_urgent, "b_urgent": b_urgent, "b_square": b_square}.items()
        }
        history = await a_urgent.fetch_history()

    assert described["a_urgent"].fairness_key == tag_of(a_urgent)
    assert described["b_urgent"].fairness_key == described["b_square"].fairness_key == tag_of(b_urgent)
    assert tag_of(a_urgent) != tag_of(b_urgent)
    assert described["a_urgent"].priority_key == described["b_urgent"].priority_key == 1
    assert described["b_square"].priority_key == 0  # unset: Temporal's default (3) applies
    # The workflow commands no priority of its own for the leg: Temporal dispatches it with the
    # workflow's (the fair-queue test above shows the order that gives) and records none on it.
    (pending,) = running.pending_activities
    assert (pending.priority.priority_key, pending.priority.fairness_key) == (0, "")
    (scheduled,) = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    commanded = scheduled.activity_task_scheduled_event_attributes.priority
    assert (commanded.priority_key, commanded.fairness_key) == (0, "")


async def test_a_durable_synchronous_call_carries_the_callers_fairness_key_and_priority(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension(sync_calls="workflow")

    @execution_policy(priority=2)
    async def ranked(n: int) -> int:
        return n + 1

    async with NoTasksClient(server_with(extension, ranked)) as client:
        assert (await client.call_tool("ranked", {"n": 1})).data == 2
        (call,) = await call_workflows(extension)
        description = await temporal_client(extension).get_workflow_handle(call.id).describe()
    info = description.raw_description.workflow_execution_info
    assert (info.priority.priority_key, info.priority.fairness_key) == (2, ANONYMOUS_SCOPE_TAG)


async def test_a_task_that_continues_as_new_keeps_its_priority(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    rounds = 4
    extension = make_extension(history_events_limit=20)

    @execution_policy(priority=4)
    async def interview(ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0) + (ctx.input_responses is not None)
        return ask(f"q{done}", state=str(done)) if done < rounds else f"answered {done}"

    async with Client(server_with(extension, interview)) as client:
        task = await call_tool_task(client, "interview")
        answered: set[str] = set()
        for _ in range(rounds):
            asked = await polled_until(
                task.status, "input_required", lambda s: bool(set(s.input_requests or {}) - answered)
            )
            keys = set(asked.input_requests or {}) - answered
            await tasks_update(client, task.task_id, {key: accept("x") for key in keys})
            answered |= keys
        assert (await finished(task)).status == "completed"
        description = await task_handle(extension, task.task_id).describe()
    info = description.raw_description.workflow_execution_info
    assert description.run_id != info.first_run_id  # it did continue as new
    assert (info.priority.priority_key, info.priority.fairness_key) == (4, ANONYMOUS_SCOPE_TAG)


# --- rate limits --------------------------------------------------------------------------


async def workers_rate_limit(temporal: TemporalClient, task_queue: str) -> float:
    """The activity rate limit Temporal applies to `task_queue`, once it is the one its workers set."""
    request = DescribeTaskQueueRequest(
        namespace=temporal.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        report_config=True,
    )
    with anyio.fail_after(DEADLINE):
        while True:
            limit = (await temporal.workflow_service.describe_task_queue(request)).effective_rate_limit
            if limit.rate_limit_source == RateLimitSource.RATE_LIMIT_SOURCE_WORKER:
                return limit.requests_per_second
            await anyio.sleep(0.2)


def rate_limits(config: WorkerConfig) -> tuple[float | None, float | None]:
    """A Worker's own activities per second, and its task queue's."""
    return config.get("max_activities_per_second"), config.get("max_task_queue_activities_per_second")


PACED_LEGS = 4
WORKER_RATE = 1.0  # max_activities_per_second: legs the running worker starts per second at most


def assert_paced(spread: float, what: str) -> None:
    """`PACED_LEGS` legs, all waiting at once, started over about (legs - 1) / `WORKER_RATE` seconds.

    A worker without the limit starts them all within moments. A lower bound, not a timing:
    load only widens the spread.
    """
    least = 0.6 * (PACED_LEGS - 1) / WORKER_RATE
    assert spread >= least, (
        f"{PACED_LEGS} legs' {what} came within {spread:.2f} s: faster than the worker's limit"
    )


async def legs_started_in_temporal(extension: TemporalTasksExtension, task_ids: list[str]) -> list[datetime]:
    """When Temporal recorded each task's leg starting, earliest first."""
    handles = [await workflow_of(extension, task_id) for task_id in task_ids]
    return sorted([await leg_started_at(handle) for handle in handles])


async def test_the_running_embedded_worker_starts_legs_no_faster_than_its_rate_limit_and_temporal_has_the_queues(
    make_extension: Callable[..., TemporalTasksExtension], task_queue: str
) -> None:
    extension = make_extension(
        max_activities_per_second=WORKER_RATE, max_task_queue_activities_per_second=3 * PACED_LEGS
    )
    started: list[float] = []

    async def paced(n: int) -> int:
        started.append(time.monotonic())
        return n

    async with Client(server_with(extension, paced)) as client:
        tasks = await asyncio.gather(*(call_tool_task(client, "paced", {"n": n}) for n in range(PACED_LEGS)))
        for n, task in enumerate(tasks):
            assert (await task.result()).data == n
        temporal = extension.client
        assert temporal is not None
        applied = await workers_rate_limit(temporal, task_queue)
        in_temporal = await legs_started_in_temporal(extension, [task.task_id for task in tasks])

    assert len(started) == PACED_LEGS  # each body ran once
    assert_paced(max(started) - min(started), "bodies")
    assert_paced((in_temporal[-1] - in_temporal[0]).total_seconds(), "ActivityTaskStarted events")
    assert applied == 3 * PACED_LEGS  # the queue's limit is the one the running worker set


async def test_a_user_built_workers_own_rate_limits_win_over_the_settings(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    async def worker(**own: float) -> WorkerConfig:
        temporal = await TemporalClient.connect(temporal_server.address)  # one worker per client and queue
        extension = make_extension(max_activities_per_second=7.5, max_task_queue_activities_per_second=3.0)
        plugin = McpTasksPlugin(server_with(extension, square))
        return Worker(temporal, task_queue=task_queue, plugins=[plugin], **own).config(active_config=True)

    assert rate_limits(await worker()) == (7.5, 3.0)
    own = await worker(max_activities_per_second=2.0, max_task_queue_activities_per_second=1.0)
    assert rate_limits(own) == (2.0, 1.0)


async def test_the_worker_command_starts_legs_no_faster_than_its_rate_limit_and_sets_the_queues(
    temporal_server: DevServer, task_queue: str, processes: Processes, tmp_path: Path
) -> None:
    app = tmp_path / "server.py"
    app.write_text(WORKER_SERVER)
    worker = processes.worker(
        temporal_server.address,
        task_queue,
        app=app,
        options=[
            "--max-activities-per-second",
            str(WORKER_RATE),
            "--max-task-queue-activities-per-second",
            str(3 * PACED_LEGS),
        ],
    )
    await processes.polling(worker)
    api = TemporalTasksExtension(address=temporal_server.address, task_queue=task_queue, worker=False)
    async with Client(server_with(api, square)) as client:
        tasks = await asyncio.gather(*(call_tool_task(client, "square", {"n": n}) for n in range(PACED_LEGS)))
        for n, task in enumerate(tasks):
            assert (await task.result()).data == n * n
        in_temporal = await legs_started_in_temporal(api, [task.task_id for task in tasks])
        temporal = api.client
        assert temporal is not None
        assert await workers_rate_limit(temporal, task_queue) == 3 * PACED_LEGS
    assert_paced((in_temporal[-1] - in_temporal[0]).total_seconds(), "ActivityTaskStarted events")
