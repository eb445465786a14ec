"""Raw `tasks/*` requests, and the asks and answers they carry, as a client sends them.

Requests go through the client's own session, which stamps the tasks capability in
`_meta` exactly as `fastmcp_tasks`' client does; the answers come back as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp import Client, Context
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
    UpdateTaskRequest,
    UpdateTaskRequestParams,
)
from mcp_types import ElicitRequest, InputRequiredResult, Result


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


async def two_rounds(ctx: Context) -> str | InputRequiredResult:
    """A guard tool: asks "first", then "second", then returns "done"."""
    if ctx.request_state is None:
        return ask("first", state="first")
    if ctx.request_state == "first":
        return ask("second", state="second")
    return "done"


async def parks(ctx: Context) -> str | InputRequiredResult:
    """A guard tool: asks "name" and waits for it."""
    return ask("name") if ctx.input_responses is None else "answered"


def asking(key: str) -> Callable[[ClientGetTaskResult], bool]:
    """The read shows one open request, asking `key`."""

    def check(read: ClientGetTaskResult) -> bool:
        requests = list((read.input_requests or {}).values())
        return len(requests) == 1 and requests[0]["params"]["message"] == key

    return check


def only_key(read: ClientGetTaskResult) -> str:
    """The one open request's key."""
    (key,) = read.input_requests or {}
    return key
