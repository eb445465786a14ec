"""What a test reads or does in Temporal itself, behind the MCP wire.

The handle of an anonymous caller's task, any caller's task found by listing its queue,
waits on visibility and on a workflow's close, the synchronous-call workflows of a test's
queue, an operator's reset, a task workflow whose own code fails, the requests one
Temporal client makes, and the history long polls it has in flight. Only for proving what
the wire cannot show; what users see is read over the wire.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer, find_temporal_binary
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, WorkflowKind, workflow_id
from fastmcp_temporal.workflows.models import SCOPE_MEMO, TOOL_MEMO, TTL_MEMO, LegPolicy, TaskInput, ToolCall
from fastmcp_temporal.workflows.task import STATUS_ATTRIBUTE, McpTaskWorkflow
from helpers.waits import DEADLINE

_REQUEST_METRICS = ("temporal_request", "temporal_long_request")


def temporal_client(reach: TemporalTasksExtension | Client) -> Client:
    """`reach` itself, or the Temporal client of an extension whose server runs."""
    if isinstance(reach, Client):
        return reach
    assert reach.client is not None, "the extension's server must be running"
    return reach.client


def anonymous_workflow_id(task_id: str, kind: WorkflowKind = "task") -> str:
    """The workflow id of an anonymous caller's task (or, `kind="call"`, synchronous call)."""
    return workflow_id(ANONYMOUS_SCOPE_TAG, task_id, kind)


def task_handle(
    reach: TemporalTasksExtension | Client, task_id: str, kind: WorkflowKind = "task"
) -> WorkflowHandle[Any, Any]:
    """The workflow of an anonymous caller's task, through an extension's client or a plain one."""
    return temporal_client(reach).get_workflow_handle(anonymous_workflow_id(task_id, kind))


async def workflow_closed(
    extension: TemporalTasksExtension, task_id: str, scope_tag: str = ANONYMOUS_SCOPE_TAG
) -> None:
    """Wait until a task's workflow (an anonymous one's by default) has closed.

    Only for proving that nothing more happens afterwards.
    """
    handle = temporal_client(extension).get_workflow_handle(workflow_id(scope_tag, task_id))
    with anyio.fail_after(DEADLINE):
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await anyio.sleep(0.05)


async def checkpoint_recorded(workflow: WorkflowHandle[Any, Any]) -> None:
    """Wait until a heartbeat of the workflow's running leg has carried a checkpoint to Temporal:
    legs heartbeat sparsely, so a kill as soon as the body checkpointed can leave none behind."""

    async def recorded() -> bool:
        pending = (await workflow.describe()).raw_description.pending_activities
        return any(leg.HasField("heartbeat_details") for leg in pending)

    with anyio.fail_after(2 * DEADLINE):
        while not await recorded():
            await anyio.sleep(0.1)


async def no_workflow_running(reach: TemporalTasksExtension | Client, task_queue: str | None = None) -> None:
    """Wait until Temporal's visibility lists no running workflow on `task_queue` (an extension's own
    by default); visibility lags behind the workflows."""
    if task_queue is None:
        assert isinstance(reach, TemporalTasksExtension), "a plain client needs the task queue"
        task_queue = reach.temporal_settings.task_queue
    running = f'TaskQueue="{task_queue}" AND ExecutionStatus="Running"'
    temporal = temporal_client(reach)
    with anyio.fail_after(DEADLINE):
        while [w.id async for w in temporal.list_workflows(running)]:
            await anyio.sleep(0.2)


async def workflows_listed(
    extension: TemporalTasksExtension, at_least: int, query: str | None = None
) -> list[str]:
    """The ids of the workflows on the extension's task queue (that match the visibility `query`),
    once visibility lists `at_least` of them."""
    on_queue = f"TaskQueue = '{extension.temporal_settings.task_queue}'"
    scoped = f"{on_queue} AND {query}" if query else on_queue
    temporal = temporal_client(extension)
    with anyio.fail_after(DEADLINE):
        while len(ids := [execution.id async for execution in temporal.list_workflows(scoped)]) < at_least:
            await anyio.sleep(0.1)
    return ids


async def workflow_of(extension: TemporalTasksExtension, task_id: str) -> WorkflowHandle[Any, Any]:
    """Find a task's workflow as an operator would: by listing the task queue."""
    client = extension.client
    assert client is not None
    query = f"TaskQueue = '{extension.temporal_settings.task_queue}'"
    with anyio.fail_after(DEADLINE):
        while True:
            async for execution in client.list_workflows(query):
                if execution.id.endswith(task_id):
                    return client.get_workflow_handle(execution.id)
            await anyio.sleep(0.1)


async def call_workflows(extension: TemporalTasksExtension, expected: int = 1) -> list[WorkflowExecution]:
    """The synchronous-call workflows on this test's task queue, once `expected` are listed."""
    client = temporal_client(extension)
    query = f"TaskQueue = '{extension.temporal_settings.task_queue}'"
    with anyio.fail_after(DEADLINE):
        while True:
            found = [w async for w in client.list_workflows(query)]
            if len(found) >= expected:
                assert all(w.id.startswith(f"mcp-call/{ANONYMOUS_SCOPE_TAG}/") for w in found), found
                return found
            await anyio.sleep(0.1)


async def closed_status(extension: TemporalTasksExtension) -> WorkflowExecutionStatus | None:
    """How the test's one call workflow closed, once it has."""
    (execution,) = await call_workflows(extension)
    handle = temporal_client(extension).get_workflow_handle(execution.id)
    with anyio.fail_after(DEADLINE):
        while (status := (await handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
            await anyio.sleep(0.05)
    return status


async def reset_workflow(temporal_server: DevServer, workflow: str) -> None:
    """What an operator does to re-run a task: `temporal workflow reset --type FirstWorkflowTask`."""
    await anyio.run_process(
        [
            str(find_temporal_binary()),
            "workflow",
            "reset",
            "--address",
            temporal_server.address,
            "--workflow-id",
            workflow,
            "--type",
            "FirstWorkflowTask",
            "--reason",
            "re-run the task",
        ]
    )


async def start_broken_task(extension: TemporalTasksExtension, task_id: str) -> WorkflowHandle[Any, Any]:
    """Start a task workflow whose own code raises (a leg timeout no timedelta holds).

    Only for proving what happens when workflow code fails: no tool call creates one.
    """
    call = ToolCall(task_id=task_id, component_key="tool:square@", arguments={"n": 2}, snapshot="")
    broken = TaskInput(call=call, ttl_ms=60_000, policy=LegPolicy(float("inf"), 1))
    return await temporal_client(extension).start_workflow(
        McpTaskWorkflow.run,
        broken,
        id=anonymous_workflow_id(task_id),
        task_queue=extension.temporal_settings.task_queue,
        memo={SCOPE_MEMO: ANONYMOUS_SCOPE_TAG, TOOL_MEMO: "square", TTL_MEMO: 60_000},
        search_attributes=TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "working")]),
    )


class TemporalRequests:
    """Counts, by operation, the requests of the clients connected through it.

    A client connected through `connect` reports every call it makes (each long poll too)
    to its own metric buffer, so a test counts what one server asked of Temporal, separately
    from the worker and the test's own client.
    """

    def __init__(self) -> None:
        self._buffer = MetricBuffer(100_000)
        self._runtime = Runtime(telemetry=TelemetryConfig(metrics=self._buffer))
        self._totals: Counter[str] = Counter()

    async def connect(self, address: str, **options: Any) -> Client:
        """A client whose every request is counted.

        Args:
            address: host:port of the Temporal frontend.
            options: more of `Client.connect`'s options (its plugins, ...).
        """
        return await Client.connect(address, runtime=self._runtime, **options)

    def count(self) -> Counter[str]:
        """Requests so far, by operation (`DescribeWorkflowExecution`, ...)."""
        for update in self._buffer.retrieve_updates():
            if update.metric.name in _REQUEST_METRICS:
                self._totals[str(update.attributes.get("operation"))] += int(update.value)
        return Counter(self._totals)


class HistoryLongPolls:
    """The history long polls one Temporal client has in flight, by workflow id.

    Wraps that client's own `GetWorkflowExecutionHistory` call, so every request still goes
    to Temporal: one that waits for new events counts from when it is sent until it answers,
    fails or is cancelled (a server letting go of a watch cancels its long poll).
    """

    def __init__(self, client: Client) -> None:
        self._in_flight: Counter[str] = Counter()
        service = client.workflow_service
        call = service.get_workflow_execution_history

        async def counted(
            request: GetWorkflowExecutionHistoryRequest, *args: Any, **kwargs: Any
        ) -> GetWorkflowExecutionHistoryResponse:
            if not request.wait_new_event:
                return await call(request, *args, **kwargs)
            workflow_id = request.execution.workflow_id
            self._in_flight[workflow_id] += 1
            try:
                return await call(request, *args, **kwargs)
            finally:
                self._in_flight[workflow_id] -= 1

        service.get_workflow_execution_history = counted  # type: ignore[method-assign]

    def in_flight(self, workflow_id: str) -> int:
        """Long polls of the workflow's history sent and not yet answered."""
        return self._in_flight[workflow_id]
