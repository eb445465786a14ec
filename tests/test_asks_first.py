"""A task tool's first questions answered on the `tools/call` itself (SEP-2663's MRTR → task).

Proves, over the MCP wire on a real Temporal server, with `execution_policy(ask_before_task=True)`:
an unmodified `fastmcp.Client` (with `fastmcp_tasks`) and its elicitation handler gets the
tool's first question as SEP-2322's answer to its `tools/call`, answers it on a second
`tools/call`, and gets the task's result, which reflects the answer, with no `tasks/update`.
In Temporal: one workflow, from the first round on, one `submit_input` signal, each leg's
body run once. On the raw wire: the first round carries the questions and a `requestState`
and no task, the second the task and neither; a retried second round names the same task
and delivers nothing twice; a state naming no task of the caller's is refused (-32602) and
creates nothing; a tool that has not asked by then gets its task at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.client.elicitation import ElicitResult
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientCreateTaskResult
from mcp.shared.exceptions import MCPError
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.temporal import temporal_client, workflows_listed
from helpers.waits import finished
from helpers.wire import accept, ask

pytestmark = pytest.mark.anyio


class _Methods(Middleware):
    """Counts the MCP requests the server answers, by method."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    async def on_request(self, context: MiddlewareContext[Any], call_next: Callable[..., Any]) -> Any:
        self.count[context.method or "?"] += 1
        return await call_next(context)


def _greeter(runs: list[str | None]) -> Callable[..., Any]:
    @execution_policy(ask_before_task=True)
    async def greets(ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Asks the caller's name, then greets it; `runs` records each body run's answer."""
        answer = None if ctx.input_responses is None else next(iter(ctx.input_responses.values()))
        runs.append(None if answer is None else answer.content["value"])
        return ask("user_name") if answer is None else f"hello {answer.content['value']}"

    return greets


@execution_policy(ask_before_task=True)
async def answers_at_once(n: int) -> int:
    return n


def _server(extension: TemporalTasksExtension, runs: list[str | None], methods: _Methods) -> FastMCP:
    server = FastMCP("asks-first", middleware=[methods])
    server.add_extension(extension)
    server.tool(_greeter(runs), task=True)
    server.tool(answers_at_once, task=True)
    return server


async def _signals(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [
        event.workflow_execution_signaled_event_attributes.signal_name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


async def _call(client: Client, result_type: type[Any], **params: Any) -> Any:
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name="greets", arguments={}, **params)
    )
    return await client.session.send_request(request, result_type)


async def test_a_fastmcp_client_answers_the_first_question_on_its_call_and_gets_the_tasks_result(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str | None] = []
    methods = _Methods()
    extension = make_extension()

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        return ElicitResult(action="accept", content={"value": "Alice"})

    async with Client(_server(extension, runs, methods), elicitation_handler=answer) as client:
        result = await client.call_tool("greets", {})
        (workflow_id,) = await workflows_listed(extension, 1)
        assert await _signals(temporal_client(extension).get_workflow_handle(workflow_id)) == ["submit_input"]

    assert result.data == "hello Alice"
    assert methods.count["tools/call"] == 2 and methods.count["tasks/update"] == 0
    assert runs == [None, "Alice"]


async def test_the_rounds_wire_a_retried_answer_a_foreign_state_and_a_tool_that_does_not_ask(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str | None] = []
    extension = make_extension()
    async with Client(_server(extension, runs, _Methods())) as client:
        first = await _call(client, mcp_types.InputRequiredResult)
        (key,) = first.input_requests or {}
        assert first.request_state is not None
        assert "taskId" not in first.model_dump(by_alias=True)

        answered = {"input_responses": {key: accept("Bob")}, "request_state": first.request_state}
        created = await _call(client, ClientCreateTaskResult, **answered)
        again = await _call(client, ClientCreateTaskResult, **answered)  # a client retrying its round
        assert again.task_id == created.task_id
        dumped = created.model_dump(by_alias=True, exclude_none=True)
        assert (
            dumped["resultType"] == "task" and "requestState" not in dumped and "inputRequests" not in dumped
        )

        with pytest.raises(MCPError) as refused:
            await _call(
                client, ClientCreateTaskResult, **{**answered, "request_state": "fastmcp-temporal/task/nope"}
            )
        assert refused.value.error.code == mcp_types.INVALID_PARAMS

        quick = await call_tool_task(client, "answers_at_once", {"n": 7})
        assert (await finished(quick)).status == "completed"

        (greeting,) = [wid for wid in await workflows_listed(extension, 2) if wid.endswith(created.task_id)]
        handle = temporal_client(extension).get_workflow_handle(greeting)
        assert await handle.result() is not None
        assert await _signals(handle) == ["submit_input"]
        assert runs == [None, "Bob"]
        assert len(await workflows_listed(extension, 2)) == 2  # the refused round created nothing
