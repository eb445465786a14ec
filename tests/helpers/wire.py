"""Raw `tasks/*` requests, asks and answers, and condition waits shared by the tests.

Requests go through the client's own session, which stamps the tasks capability in
`_meta` exactly as `fastmcp_tasks`' client does. Waits poll with a generous deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from fastmcp import Client
from fastmcp_tasks.client import ToolTask
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
    UpdateTaskRequest,
    UpdateTaskRequestParams,
)
from mcp_types import ElicitRequest, InputRequiredResult, Result
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from fastmcp_temporal.workflows.models import LegPolicy, TaskInput, ToolCall
from fastmcp_temporal.workflows.task import STATUS_ATTRIBUTE, McpTaskWorkflow

DEADLINE = 30


async def tasks_get(client: Client, task_id: str) -> ClientGetTaskResult:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, ClientGetTaskResult)


async def tasks_update(client: Client, task_id: str, responses: dict[str, Any]) -> Result:
    params = UpdateTaskRequestParams(task_id=task_id, input_responses=responses)
    return await client.session.send_request(UpdateTaskRequest(params=params), Result)


async def tasks_cancel(client: Client, task_id: str) -> Result:
    request = CancelTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, Result)


TASK_METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


async def send_task_method(
    client: Client, method: str, task_id: str, responses: dict[str, Any] | None = None
) -> Result:
    """One of `TASK_METHODS` by name; an update carries `responses`."""
    if method == "tasks/get":
        return await tasks_get(client, task_id)
    if method == "tasks/update":
        return await tasks_update(client, task_id, responses or {})
    assert method == "tasks/cancel", method
    return await tasks_cancel(client, task_id)


def question(text: str) -> ElicitRequest:
    """A form elicitation asking for one string, `value`."""
    return ElicitRequest(
        method="elicitation/create",
        params={
            "mode": "form",
            "message": text,
            "requestedSchema": {"type": "object", "properties": {"value": {"type": "string"}}},
        },
    )


def ask(*keys: str, state: str | None = None) -> InputRequiredResult:
    """A guard tool's ask for one string per key (the key doubles as the question)."""
    return InputRequiredResult(
        result_type="input_required",
        input_requests={key: question(key) for key in keys},
        request_state=state,
    )


def accept(value: str) -> dict[str, Any]:
    """The answer a client sends to `question`."""
    return {"action": "accept", "content": {"value": value}}


def text_of(status: ClientGetTaskResult) -> str:
    """The text a finished task's result carries."""
    assert status.result is not None, status
    return "".join(block.get("text", "") for block in status.result["content"])


async def finished(task: ToolTask) -> ClientGetTaskResult:
    """Poll `tasks/get` until the task is terminal; that read."""
    return await task.wait(timeout=DEADLINE)


async def eventually(check: Callable[[], bool], timeout: float = DEADLINE, what: str = "condition") -> None:
    """Poll a condition in this process until it holds."""
    try:
        with anyio.fail_after(timeout):
            while not check():
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


async def polled_until(
    fetch: Callable[[], Awaitable[ClientGetTaskResult]],
    status: str,
    until: Callable[[ClientGetTaskResult], bool] = lambda _: True,
) -> ClientGetTaskResult:
    """Poll `fetch` until it reports `status` (and `until` holds); return that read."""
    with anyio.fail_after(DEADLINE):
        while True:
            current = await fetch()
            if current.status == status and until(current):
                return current
            await anyio.sleep(0.05)


async def status_becomes(
    task: ToolTask, status: str, *, until: Callable[[ClientGetTaskResult], bool] = lambda _: True
) -> ClientGetTaskResult:
    return await polled_until(task.status, status, until)


async def workflow_closed(
    extension: TemporalTasksExtension, task_id: str, scope_tag: str = ANONYMOUS_SCOPE_TAG
) -> None:
    """Wait in Temporal itself until a task's workflow (an anonymous one's by default) has closed.

    Only for proving that nothing more happens afterwards; what users see is read
    over the wire.
    """
    assert extension.client is not None, "the extension's server must be running"
    handle = extension.client.get_workflow_handle(workflow_id(scope_tag, task_id))
    with anyio.fail_after(DEADLINE):
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await anyio.sleep(0.05)


async def start_broken_task(extension: TemporalTasksExtension, task_id: str) -> WorkflowHandle[Any, Any]:
    """Start a task workflow whose own code raises (a leg timeout no timedelta holds).

    Only for proving what happens when workflow code fails: no tool call creates one.
    """
    assert extension.client is not None, "the extension's server must be running"
    call = ToolCall(task_id=task_id, component_key="tool:square@", arguments={"n": 2}, snapshot="")
    broken = TaskInput(call=call, ttl_ms=60_000, policy=LegPolicy(float("inf"), 1))
    return await extension.client.start_workflow(
        McpTaskWorkflow.run,
        broken,
        id=workflow_id(ANONYMOUS_SCOPE_TAG, task_id),
        task_queue=extension.temporal_settings.task_queue,
        memo={"scope": ANONYMOUS_SCOPE_TAG, "tool": "square", "ttlMs": 60_000},
        search_attributes=TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "working")]),
    )
