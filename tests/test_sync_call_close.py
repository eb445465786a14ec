"""A durable call ends when its workflow closes, whatever its relayed question is doing.

A 2025-11-25-era `fastmcp.Client` that declares elicitation calls a `task=True` tool of a
server with `sync_calls="workflow"`; the tool asks one question, relayed to the caller as an
`elicitation/create` on the open call, and the caller holds it unanswered. Its answer is
released only once the call has ended, so a call that waited for the answer (as before)
never ends and fails the test's deadline. Whatever closes the workflow ends the call, with a
-32603 that names the cause read from Temporal: the question's TTL, an operator's cancel or
terminate, or a reset. The question is withdrawn from the caller (`notifications/cancelled`),
and its late answer reaches no workflow.

A call refused because its client cannot answer (no elicitation declared) is recorded as
failed, with the reason, in Temporal and in `fastmcp-temporal tasks list`; `ctx.elicit()`
refused in a durable call says what to do instead. A `tasks/get` held for a running task's
change ends at its close by an operator too, and a read of a closed task answers the run it
found closed, not a run an operator's reset started since (it waited for that run's close).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client as TemporalClient
from temporalio.client import (
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.workflows.task import STATUS_ATTRIBUTE
from helpers.cli import cli, listed
from helpers.servers import gated_tool, server_with, serving_http
from helpers.temporal import call_workflows, closed_status, reset_workflow, task_handle, temporal_client
from helpers.waits import DEADLINE
from helpers.wire import ask, tasks_get

pytestmark = pytest.mark.anyio

TTL = timedelta(seconds=3)


async def asks_once(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        return ask("name?")
    return "answered"


@dataclass
class HeldQuestion:
    """A caller that gets the question and answers only once `release` is set."""

    asked: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    withdrawn: anyio.Event = field(default_factory=anyio.Event)  # the server cancelled the question

    async def handler(self, message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        self.asked.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.withdrawn.set()
            raise
        return ElicitResult(action="accept", content={"value": "too late"})


@dataclass
class Call:
    extension: TemporalTasksExtension
    caller: HeldQuestion
    handle: WorkflowHandle[Any, Any] | None = None
    error: MCPError | None = None
    status: WorkflowExecutionStatus | None = None  # how the run that asked closed
    events: list[HistoryEvent] = field(default_factory=list)  # that run's history
    outcome: Any = None  # its result, when it completed


@asynccontextmanager
async def a_held_question(
    make_extension: Callable[..., TemporalTasksExtension], *, http: bool = False
) -> AsyncIterator[Call]:
    """A durable call (over streamable HTTP with `http`) whose question is open on the caller; on exit,
    its error once the call ended.

    The answer is released only after the call has ended (or at the deadline, which then fails)."""
    extension = make_extension(sync_calls="workflow", task_ttl=TTL)
    server = server_with(extension, asks_once)
    caller = HeldQuestion()
    call = Call(extension, caller)
    async with AsyncExitStack() as stack:
        target: Any = server
        if http:
            target = StreamableHttpTransport(await stack.enter_async_context(serving_http(server)))
        client = await stack.enter_async_context(Client(target, mode="legacy", elicitation_handler=caller.handler))

        async def calls() -> None:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("asks_once")
            call.error = raised.value

        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as group:
                group.start_soon(calls)
                await caller.asked.wait()
                (execution,) = await call_workflows(extension)
                call.handle = temporal_client(extension).get_workflow_handle(execution.id)
                yield call
                while call.error is None:  # the call must end before its question is answered
                    await anyio.sleep(0.05)
                caller.release.set()
            await closed(call)


async def closed(call: Call) -> None:
    """How the run that asked closed, and its history."""
    assert call.handle is not None
    while (status := (await call.handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
        await anyio.sleep(0.05)
    call.status, call.events = status, (await call.handle.fetch_history()).events
    if status == WorkflowExecutionStatus.COMPLETED:
        call.outcome = await call.handle.result()


def signals(events: list[HistoryEvent]) -> list[HistoryEvent]:
    return [event for event in events if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]


async def first_run(call: Call) -> WorkflowHandle[Any, Any]:
    """The run that asked: what `call.handle` reads from now on."""
    assert call.handle is not None
    description = await call.handle.describe()
    call.handle = temporal_client(call.extension).get_workflow_handle(call.handle.id, run_id=description.run_id)
    return call.handle


@pytest.mark.parametrize("http", [False, True], ids=["in-memory", "http"])
async def test_a_question_nobody_answers_ends_the_call_when_its_ttl_ends_the_workflow(
    make_extension, http: bool
) -> None:
    async with a_held_question(make_extension, http=http) as call:
        await first_run(call)

    assert call.caller.withdrawn.is_set()
    assert call.status == WorkflowExecutionStatus.COMPLETED
    assert call.outcome["expired"]
    assert not signals(call.events)  # no answer reached the workflow
    assert call.error is not None and call.error.error.code == mcp_types.INTERNAL_ERROR
    assert call.error.error.message == (
        f"The tool's question expired: the caller did not answer within the call's task_ttl of 3s, "
        f"so its workflow {call.handle.id} ended; call the tool again."  # type: ignore[union-attr]
    )


Operator = Callable[[DevServer, WorkflowHandle[Any, Any]], Awaitable[None]]


async def cancels(temporal_server: DevServer, handle: WorkflowHandle[Any, Any]) -> None:
    await handle.cancel()


async def terminates(temporal_server: DevServer, handle: WorkflowHandle[Any, Any]) -> None:
    await handle.terminate(reason="stuck on a question")


async def resets(temporal_server: DevServer, handle: WorkflowHandle[Any, Any]) -> None:
    await reset_workflow(temporal_server, handle.id)


@pytest.mark.parametrize(
    ("operator", "status", "cause"),
    [
        (cancels, WorkflowExecutionStatus.CANCELED, "was cancelled (tasks/cancel, or an operator in Temporal)"),
        (terminates, WorkflowExecutionStatus.TERMINATED, "was terminated (reason: stuck on a question)"),
        (resets, WorkflowExecutionStatus.TERMINATED, "was reset by an operator, who started it again as run "),
    ],
    ids=["cancel", "terminate", "reset"],
)
async def test_an_operator_closing_the_workflow_ends_the_call_with_the_cause_while_its_question_is_open(
    make_extension, temporal_server: DevServer, operator: Operator, status: WorkflowExecutionStatus, cause: str
) -> None:
    async with a_held_question(make_extension) as call:
        await operator(temporal_server, await first_run(call))

    assert call.caller.withdrawn.is_set()  # the caller was told its question is withdrawn
    assert call.status == status
    assert not signals(call.events)
    assert call.error is not None and call.error.error.code == mcp_types.INTERNAL_ERROR
    assert cause in call.error.error.message, call.error.error.message


# --- a call refused because its caller cannot answer: failed, not completed -------------------


async def test_a_call_refused_because_its_client_cannot_answer_shows_failed_in_temporal_and_tasks_list(
    make_extension, temporal_server: DevServer
) -> None:
    """A 2025-11-25 client that declares no elicitation gets the inline refusal;
    operators see the call failed, with the reason."""
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, asks_once)

    async with Client(server, mode="legacy") as client:
        with anyio.fail_after(DEADLINE), pytest.raises(MCPError) as raised:
            await client.call_tool("asks_once")
        (execution,) = await call_workflows(extension)
        handle = temporal_client(extension).get_workflow_handle(execution.id)
        description = await handle.describe()
        outcome = await handle.result()

    assert raised.value.error.code == mcp_types.INVALID_PARAMS
    assert "only exists at MCP 2026-07-28" in raised.value.error.message  # what the inline call answers
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"
    assert outcome["error"]["message"] == (
        "Tool 'asks_once' asked its caller (elicitation/create), but the caller's connection cannot carry "
        "that request (a 2025-11-25-era client that did not declare the capability, or stateless HTTP); the "
        "call was refused as the same call inline is."
    )
    def this_call(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [row for row in rows if row["workflowId"] == execution.id and row["closedAt"]]

    (row,) = this_call(await listed(temporal_server, "--kind", "call", until=lambda rows: bool(this_call(rows))))
    assert row["status"] == "failed"
    code, out, err = await cli(temporal_server, "show", "--json", execution.id)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["status"] == "failed"
    assert shown["error"]["message"] == outcome["error"]["message"]


# --- ctx.elicit() in a durable call ---------------------------------------------------------------


async def elicits(ctx: Context) -> str:
    answer = await ctx.elicit("Your name?", str)
    return f"hi {answer}"


async def test_ctx_elicit_refused_in_a_durable_call_says_what_to_do_instead(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, elicits)

    async with Client(server, mode="legacy", elicitation_handler=HeldQuestion().handler) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("elicits", raise_on_error=False)
        (execution,) = await call_workflows(extension)
        assert await closed_status(extension) == WorkflowExecutionStatus.COMPLETED  # ran on a worker

    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "background task" not in text
    assert text.startswith('ctx.elicit() cannot ask from a durable call (sync_calls="workflow")')
    assert "return an InputRequiredResult" in text and '@execution_policy(sync_calls="inline")' in text


# --- a held tasks/get ends at the close too ------------------------------------------------------

LONG_HOLD = timedelta(seconds=DEADLINE * 4)


class ReadsArrive(Middleware):
    """Sets `arrived` when a `tasks/get` reaches the server."""

    def __init__(self) -> None:
        self.arrived = anyio.Event()

    async def on_request(self, context: MiddlewareContext[Any], call_next: Callable[..., Any]) -> Any:
        if context.method == "tasks/get":
            self.arrived.set()
        return await call_next(context)


async def terminates_task(handle: WorkflowHandle[Any, Any]) -> None:
    await handle.terminate(reason="stuck on a question")


async def cancels_task(handle: WorkflowHandle[Any, Any]) -> None:
    await handle.cancel()


@pytest.mark.parametrize(
    ("closes", "status", "answer"),
    [
        (terminates_task, WorkflowExecutionStatus.TERMINATED, "failed"),
        (cancels_task, WorkflowExecutionStatus.CANCELED, "cancelled"),
    ],
    ids=["terminate", "cancel"],
)
async def test_a_held_read_of_a_running_task_ends_at_its_close_by_an_operator(
    make_extension, closes: Callable[[WorkflowHandle[Any, Any]], Awaitable[None]],
    status: WorkflowExecutionStatus, answer: str,
) -> None:
    """A read held for a change (`reread_hold`, here longer than the test) answers the close as it comes,
    the tool still running."""
    extension = make_extension(read_hold=timedelta(0), reread_hold=LONG_HOLD, read_recheck=LONG_HOLD)
    started, never = anyio.Event(), anyio.Event()
    server = server_with(extension, gated_tool(started, never))
    reads = ReadsArrive()
    server.add_middleware(reads)
    seen: list[str] = []

    async with Client(server) as client:
        task = await call_tool_task(client, "gated")
        handle = task_handle(extension, task.task_id)
        with anyio.fail_after(DEADLINE):
            await started.wait()
            assert (await tasks_get(client, task.task_id)).status == "working"
            reads.arrived = anyio.Event()
            async with anyio.create_task_group() as group:

                async def held_read() -> None:
                    seen.append((await tasks_get(client, task.task_id)).status)

                group.start_soon(held_read)
                await reads.arrived.wait()
                await closes(handle)
        closed_as = (await handle.describe()).status

    assert seen == [answer]
    assert closed_as == status


# --- a read of a closed task answers that run, whatever runs after it ----------------------------


class ResetAfterDescribe(Interceptor):
    """Resets a workflow right after a `describe()` found it closed, once armed: an operator's reset
    landing between a read's `describe()` and its reading of the result."""

    def __init__(self, temporal_server: DevServer) -> None:
        self.temporal_server = temporal_server
        self.armed = False

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _ResetsAfterDescribe(next, self)


class _ResetsAfterDescribe(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, owner: ResetAfterDescribe) -> None:
        super().__init__(next)
        self._owner = owner

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        description = await super().describe_workflow(input)
        if self._owner.armed and description.status != WorkflowExecutionStatus.RUNNING:
            self._owner.armed = False
            await reset_workflow(self._owner.temporal_server, input.id)
        return description


async def test_a_read_of_a_closed_task_answers_its_close_while_a_reset_run_works(
    make_extension, temporal_server: DevServer
) -> None:
    """The read answers the run it found closed at once, not the new run's result when that one ends."""
    runs: list[str] = []
    never = anyio.Event()

    async def twice() -> str:
        runs.append("run")
        if len(runs) > 1:
            await never.wait()  # the reset's run works on
        return "first"

    runner = make_extension(read_hold=timedelta(0))
    reset_after_describe = ResetAfterDescribe(temporal_server)
    temporal = await TemporalClient.connect(temporal_server.address, interceptors=[reset_after_describe])
    reader = make_extension(client=temporal, worker=False)
    async with Client(server_with(runner, twice)) as creator, Client(server_with(reader, twice)) as other:
        task = await call_tool_task(creator, "twice")
        with anyio.fail_after(DEADLINE):
            while (await tasks_get(creator, task.task_id)).status != "completed":
                pass
            reset_after_describe.armed = True
            answer = await tasks_get(other, task.task_id)  # through a server that never followed it
            while len(runs) < 2:  # the reset's run is at work
                await anyio.sleep(0.05)
            assert (await task_handle(runner, task.task_id).describe()).status == WorkflowExecutionStatus.RUNNING

    assert answer.status == "completed"
    assert answer.result["structuredContent"] == {"result": "first"}
