"""Durable synchronous calls with real processes and real `kill -9`.

A client that does not opt in to tasks calls `fault_app`'s `count` tool on a server
with `sync_calls="workflow"`, and:

1. the worker process running the leg (the server is API-only) runs it across several
   heartbeat timeouts on one attempt, is killed -9, and a new worker resumes the leg
   from its last checkpoint: the same `tools/call` still answers, with the full result;
2. the MCP server process (HTTP, with its embedded worker) is killed -9 mid-call and
   restarted on its port: the call's workflow still completes, once, in Temporal.

Every process is started here and stopped by PID at teardown, failed test or not.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import suppress
from typing import Any

import anyio
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

import fault_app
from fastmcp_temporal.devserver import DevServer, free_port
from fastmcp_temporal.workflows.models import TaskOutcome
from helpers.processes import PROCESS_DEADLINE, AttemptLog, Processes, answering_client
from helpers.servers import NoTasksClient
from helpers.temporal import checkpoint_recorded
from helpers.waits import eventually

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

STEP = 0.25
HEARTBEAT_TIMEOUTS_ON_ONE_ATTEMPT = 3


async def the_call_workflow(temporal: TemporalClient, task_queue: str) -> WorkflowHandle[Any, TaskOutcome]:
    query = f"TaskQueue = '{task_queue}'"
    with anyio.fail_after(PROCESS_DEADLINE):
        while not (found := [w.id async for w in temporal.list_workflows(query)]):
            await anyio.sleep(0.1)
    (workflow_id,) = found
    assert workflow_id.startswith("mcp-call/")
    return temporal.get_workflow_handle(workflow_id, result_type=TaskOutcome)


async def leg_events(handle: WorkflowHandle[Any, Any]) -> list[int]:
    return [event.event_type for event in (await handle.fetch_history()).events]


async def test_a_durable_call_answers_after_its_worker_is_killed_resuming_from_its_checkpoint(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    first = processes.worker(temporal_server.address, task_queue)
    await processes.polling(first)
    server = fault_app.build_server(
        address=temporal_server.address, task_queue=task_queue, worker=False, sync_calls="workflow"
    )
    heartbeat = fault_app.HEARTBEAT_TIMEOUT.total_seconds()
    long_enough = math.ceil(HEARTBEAT_TIMEOUTS_ON_ONE_ATTEMPT * heartbeat / STEP) + 1
    answers: list[Any] = []

    async with NoTasksClient(server) as client:

        async def call() -> None:
            answers.append(await client.call_tool("count", {"key": "job", "to": 2 * long_enough, "step": STEP}))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await eventually(
                lambda: attempts.progress("job") >= long_enough,
                timeout=PROCESS_DEADLINE,
                what="the leg to run long",
            )
            assert len(attempts.starts("job")) == 1, "the leg was retried while its worker was alive"
            processes.kill(first)
            second = processes.worker(temporal_server.address, task_queue)
            with anyio.fail_after(PROCESS_DEADLINE):
                while not answers:
                    await anyio.sleep(0.1)

    (result,) = answers
    assert result.structured_content == {"key": "job", "counted": 2 * long_enough}
    retry = attempts.starts("job")[-1]
    assert retry["pid"] == second.pid and retry["attempt"] == 2
    assert retry["resumed_from"] is not None and retry["resumed_from"] >= 1

    temporal = await TemporalClient.connect(temporal_server.address)
    handle = await the_call_workflow(temporal, task_queue)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    events = await leg_events(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) == 1


async def test_a_durable_calls_workflow_completes_after_its_server_is_killed_and_restarted(
    temporal_server: DevServer,
    task_queue: str,
    processes: Processes,
    attempts: AttemptLog,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_SYNC_CALLS", "workflow")  # inherited by the server process
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = processes.http_server(temporal_server.address, task_queue, port)
    async with answering_client(url, server, processes):
        pass  # the server answers

    async def call() -> None:
        async with NoTasksClient(url, timeout=PROCESS_DEADLINE) as client:
            await client.call_tool("count", {"key": "running", "to": 16, "step": STEP})

    def call_on_its_own_loop() -> None:
        """The client's session fails in the background when its server dies; keep that off the test's loop."""
        with suppress(Exception):
            asyncio.run(call())

    with anyio.fail_after(PROCESS_DEADLINE):
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, call_on_its_own_loop)
            await eventually(
                lambda: attempts.progress("running") >= 3,
                timeout=PROCESS_DEADLINE,
                what="the tool to checkpoint",
            )
            handle = await the_call_workflow(await TemporalClient.connect(temporal_server.address), task_queue)
            await checkpoint_recorded(handle)
            processes.kill(server)

    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    restarted = processes.http_server(temporal_server.address, task_queue, port)
    with anyio.fail_after(PROCESS_DEADLINE):
        outcome = await handle.result()

    assert outcome.result is not None
    assert outcome.result["structuredContent"] == {"key": "running", "counted": 16}
    events = await leg_events(handle)
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) == 1
    retry = attempts.starts("running")[-1]
    assert retry["pid"] == restarted.pid and retry["resumed_from"] is not None
