"""Durable synchronous calls (`sync_calls="workflow"`), over the MCP wire.

A client that does not opt in to tasks calls a `task=True` tool; with the mode on,
the call runs as an `mcp-call/...` workflow on the workers and the client gets,
byte for byte, what the same call gets inline (the reference's behaviour): every
return type, tool errors and masking, protocol errors, argument rejection, the
tool's own `timeout=`, and a guard tool's ask (SEP-2322). Each test also reads
Temporal: the call's workflow exists, completed, with one activity, or none was
started when the call was rejected or served inline. A request the client cancels
cancels the workflow; a workflow cancelled by an operator, or a leg that gives up,
ends the call with a -32603 that says why. The caller's identity and scope hash are
a task's. The close the server followed answers the call: it is not read from Temporal again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.dependencies import get_context
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import (
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventAsyncIterator,
    WorkflowHistoryEventFilterType,
)

from fastmcp_temporal import TemporalTasksExtension, TemporalTasksSettings, execution_policy
from fastmcp_temporal._fastmcp_private import cancel_requested
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG
from helpers.results import (
    ERROR_CASES,
    INVALID_CALLS,
    RETURN_CASES,
    raises_protocol_error,
    sleeps_past_timeout,
    wire,
)
from helpers.servers import (
    NoTasksClient,
    identity,
    server_with,
    serving_http,
    session_2025_11_25,
    square,
    verifier,
    whoami,
)
from helpers.temporal import call_workflows, closed_status
from helpers.waits import DEADLINE

pytestmark = pytest.mark.anyio


@dataclass
class Pair:
    """The same tool on two servers: one serving non-opted-in calls by workflow, one inline."""

    durable: Client
    inline: Client
    extension: TemporalTasksExtension


@asynccontextmanager
async def durable_and_inline(
    make_extension: Callable[..., TemporalTasksExtension],
    register: Callable[[FastMCP], None],
    *,
    client: type[Client] = NoTasksClient,
    client_options: dict[str, Any] | None = None,
    **server_options: Any,
) -> AsyncIterator[Pair]:
    async with AsyncExitStack() as stack:
        clients, extensions = [], []
        for sync_calls in ("workflow", "inline"):
            extension = make_extension(sync_calls=sync_calls)
            server = server_with(extension, **server_options)
            register(server)
            clients.append(await stack.enter_async_context(client(server, **(client_options or {}))))
            extensions.append(extension)
        yield Pair(*clients, extensions[0])


def tool(fn: Callable[..., Any], **options: Any) -> Callable[[FastMCP], None]:
    """Register `fn` as task tool "x"."""

    def register(server: FastMCP) -> None:
        server.tool(fn, name="x", task=True, **options)

    return register


async def ran_once_on_a_worker(extension: TemporalTasksExtension, execution: WorkflowExecution) -> None:
    """The call's workflow completed after exactly one tool activity."""
    assert extension.client is not None
    handle = extension.client.get_workflow_handle(execution.id)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    history = await handle.fetch_history()
    scheduled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert len(scheduled) == 1
    assert (await description.memo())["kind"] == "call"


def same_json(durable: mcp_types.CallToolResult, inline: mcp_types.CallToolResult) -> bool:
    """The same JSON on the wire, byte for byte (key order inside `structuredContent` included)."""
    return durable.model_dump_json(by_alias=True) == inline.model_dump_json(by_alias=True)


async def assert_same_answer(pair: Pair, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both servers answer the call with the same bytes; the durable one through a workflow."""
    args = args or {}
    with anyio.fail_after(DEADLINE):
        durable = await pair.durable.call_tool_mcp("x", args)
        inline = await pair.inline.call_tool_mcp("x", args)
    assert same_json(durable, inline)
    (execution,) = await call_workflows(pair.extension)
    await ran_once_on_a_worker(pair.extension, execution)
    return wire(durable)


async def same_json_rpc_error(pair: Pair) -> mcp_types.ErrorData:
    """Both servers refuse "x" with the same JSON-RPC error; the durable one after one leg."""
    errors = []
    for client in (pair.durable, pair.inline):
        with anyio.fail_after(DEADLINE), pytest.raises(MCPError) as raised:
            await client.call_tool_mcp("x", {})
        errors.append(raised.value.error)
    (execution,) = await call_workflows(pair.extension)
    await ran_once_on_a_worker(pair.extension, execution)
    assert errors[0] == errors[1]
    return errors[0]


# --- 1. results -------------------------------------------------------------------------


@pytest.mark.parametrize(("fn", "options", "expect"), RETURN_CASES)
async def test_durable_call_answers_what_an_inline_call_answers(make_extension, fn, options, expect) -> None:
    async with durable_and_inline(make_extension, tool(fn, **options)) as pair:
        result = await assert_same_answer(pair)
    assert expect.items() <= result.items()


class CloseReads(Interceptor):
    """Counts the history reads that ask for the close event alone, as `handle.result()` reads it."""

    def __init__(self) -> None:
        self.count = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        owner = self

        class Outbound(OutboundInterceptor):
            def fetch_workflow_history_events(
                self, input: FetchWorkflowHistoryEventsInput
            ) -> WorkflowHistoryEventAsyncIterator:
                owner.count += input.event_filter_type == WorkflowHistoryEventFilterType.CLOSE_EVENT
                return super().fetch_workflow_history_events(input)

        return Outbound(next)


async def test_the_close_the_relay_followed_answers_the_call_unread_again(
    make_extension, temporal_server: DevServer
) -> None:
    close_reads = CloseReads()
    temporal = await TemporalClient.connect(temporal_server.address, interceptors=[close_reads])
    server = server_with(make_extension(sync_calls="workflow", client=temporal))
    server.tool(square, task=True)
    async with NoTasksClient(server) as client:
        with anyio.fail_after(DEADLINE):
            result = await client.call_tool_mcp("square", {"n": 3})
    assert wire(result)["structuredContent"] == {"result": 9}
    assert close_reads.count == 0


@ERROR_CASES
async def test_a_tool_error_is_the_same_result(make_extension, fn, mask, text) -> None:
    async with durable_and_inline(make_extension, tool(fn), mask_error_details=mask) as pair:
        result = await assert_same_answer(pair)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": text}]


async def raises_missing_capability() -> str:
    raise MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY, message="needs sampling")


def raises_http(status: int) -> Callable[[], Any]:
    async def call_upstream() -> str:
        request = httpx2.Request("GET", "https://upstream.invalid/")
        raise httpx2.HTTPStatusError("upstream said no", request=request, response=httpx2.Response(status))

    return call_upstream


async def times_out_upstream() -> str:
    raise httpx2.ReadTimeout("upstream is slow")


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (raises_protocol_error, "Error calling tool 'x': protocol fault"),
        (raises_http(429), "Rate limited by upstream API, please retry later"),
        (raises_http(500), "Error calling tool 'x': upstream said no"),
        (times_out_upstream, "Upstream request timed out, please retry"),
    ],
    ids=["protocol-error", "http-429", "http-500", "upstream-timeout"],
)
async def test_errors_fastmcp_rewrites_inline_are_rewritten_the_same(make_extension, fn, text) -> None:
    async with durable_and_inline(make_extension, tool(fn)) as pair:
        result = await assert_same_answer(pair)
    assert result["content"] == [{"type": "text", "text": text}]


async def test_a_missing_client_capability_is_the_same_json_rpc_error(make_extension) -> None:
    async with durable_and_inline(make_extension, tool(raises_missing_capability)) as pair:
        error = await same_json_rpc_error(pair)
    assert error.code == MISSING_REQUIRED_CLIENT_CAPABILITY


@pytest.mark.parametrize(
    ("mask", "text"),
    [(True, "Error calling tool 'x'"), (False, "Error calling tool 'x': Tool 'x' execution timed out after 0.5s")],
    ids=["masked", "unmasked"],
)
async def test_the_tools_own_timeout_gives_the_same_result(make_extension, mask, text) -> None:
    async with durable_and_inline(
        make_extension, tool(sleeps_past_timeout, timeout=0.5), mask_error_details=mask
    ) as pair:
        result = await assert_same_answer(pair)
    assert result["content"] == [{"type": "text", "text": text}]


@INVALID_CALLS
async def test_invalid_arguments_get_the_same_rejection_and_start_nothing(make_extension, args, strict) -> None:
    async with durable_and_inline(make_extension, tool(square), strict_input_validation=strict) as pair:
        durable = await pair.durable.call_tool_mcp("x", args)
        inline = await pair.inline.call_tool_mcp("x", args)
        assert durable.is_error is True
        assert same_json(durable, inline)
        # A workflow started by the rejected call would be listed no later than this one's.
        assert (await pair.durable.call_tool("x", {"n": 2})).data == 4
        (execution,) = await call_workflows(pair.extension)
        await ran_once_on_a_worker(pair.extension, execution)


async def test_a_legacy_era_client_is_served_by_a_workflow_too(make_extension) -> None:
    async with durable_and_inline(
        make_extension, tool(square), client=Client, client_options={"mode": "legacy"}
    ) as pair:
        result = await assert_same_answer(pair, {"n": 6})
    assert result["structuredContent"] == {"result": 36}


# --- 2. choosing the mode ------------------------------------------------------------------


async def test_a_tools_policy_overrides_the_extension_default(make_extension) -> None:
    extension = make_extension()  # sync_calls="inline"
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(sync_calls="workflow")
    async def durable(n: int) -> int:
        return n + 1

    @server.tool(task=True)
    async def inline(n: int) -> int:
        return n + 2

    async with NoTasksClient(server) as client:
        assert (await client.call_tool("inline", {"n": 1})).data == 3
        assert (await client.call_tool("durable", {"n": 1})).data == 2
        # a workflow for the inline call would be listed no later than the durable call's
        (execution,) = await call_workflows(extension)
        await ran_once_on_a_worker(extension, execution)


async def test_a_tools_policy_can_keep_it_inline(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(sync_calls="inline")
    async def quick(n: int) -> int:
        return n

    server.tool(square, task=True)  # follows the extension: served by a workflow

    async with NoTasksClient(server) as client:
        assert (await client.call_tool("quick", {"n": 4})).data == 4
        assert (await client.call_tool("square", {"n": 4})).data == 16
        # a workflow for the inline call would be listed no later than square's
        (execution,) = await call_workflows(extension)
        await ran_once_on_a_worker(extension, execution)


def test_the_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_SYNC_CALLS", "workflow")
    assert TemporalTasksExtension().temporal_settings.sync_calls == "workflow"
    monkeypatch.setenv("FASTMCP_TEMPORAL_SYNC_CALLS", "sometimes")
    with pytest.raises(ValueError, match="sync_calls"):
        TemporalTasksSettings()
    with pytest.raises(ValueError, match="use 'inline' or 'workflow'"):
        execution_policy(sync_calls="always")  # type: ignore[arg-type]


async def test_an_opted_in_client_still_gets_a_task(make_extension) -> None:
    async with durable_and_inline(make_extension, tool(square), client=Client) as pair:
        task = await call_tool_task(pair.durable, "x", {"n": 3})
        assert (await task.result()).data == 9
        client = pair.extension.client
        assert client is not None
        query = f"TaskQueue = '{pair.extension.temporal_settings.task_queue}'"
        assert [w.id async for w in client.list_workflows(query)] == [f"mcp-task/anon/{task.task_id}"]


# --- 3. cancellation ---------------------------------------------------------------------


def add_wait_forever(server: FastMCP) -> tuple[asyncio.Event, asyncio.Event]:
    """Task tool "wait_forever"; its events: it started, and it saw CancelledError."""
    started, stopped = asyncio.Event(), asyncio.Event()

    @server.tool(task=True)
    async def wait_forever() -> str:
        started.set()
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    return started, stopped


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_cancelled_request_cancels_the_workflow_and_the_tool(make_extension, transport) -> None:
    """In memory the client sends `notifications/cancelled`; over 2026 HTTP it closes the response stream."""
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension)
    started, stopped = add_wait_forever(server)

    async with AsyncExitStack() as stack:
        target: Any = server
        if transport == "http":
            target = StreamableHttpTransport(await stack.enter_async_context(serving_http(server)))
        client = await stack.enter_async_context(NoTasksClient(target))
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "wait_forever")
                await started.wait()
                group.cancel_scope.cancel()
            await stopped.wait()
        assert await closed_status(extension) == WorkflowExecutionStatus.CANCELED


@pytest.mark.parametrize("peer_cancel_mode", ["interrupt", "signal"])
async def test_a_cancel_notification_cancels_the_workflow_and_the_tool(
    make_extension, peer_cancel_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2025-11-25-era client cancels by `notifications/cancelled` and keeps the request open.

    mcp applies it by interrupting the request, or (its `signal` mode) by only setting the
    request's `cancel_requested`; the workflow is cancelled either way.
    """
    monkeypatch.setitem(JSONRPCDispatcher.__init__.__kwdefaults__, "peer_cancel_mode", peer_cancel_mode)
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension)
    started, stopped = add_wait_forever(server)

    async with serving_http(server) as url, session_2025_11_25(url) as session:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as group:
                group.start_soon(session.call_wait_forever)
                await started.wait()
                await session.cancel_the_call()
                await stopped.wait()
                group.cancel_scope.cancel()
        assert await closed_status(extension) == WorkflowExecutionStatus.CANCELED


class CancelWhileStarting(Interceptor):
    """The caller's cancel arrives after Temporal started the call's workflow, before the server
    heard back: the start is answered only once mcp has applied the cancel to the request."""

    def __init__(self) -> None:
        self.cancel: Callable[[], Awaitable[None]] | None = None

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        owner = self

        class Outbound(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
                handle = await super().start_workflow(input)
                assert owner.cancel is not None
                await owner.cancel()
                withdrawn = cancel_requested(get_context())
                assert withdrawn is not None
                await withdrawn.wait()
                return handle

        return Outbound(next)


async def test_a_cancel_arriving_while_the_workflow_starts_cancels_it(
    make_extension, temporal_server: DevServer
) -> None:
    interceptor = CancelWhileStarting()
    temporal = await TemporalClient.connect(temporal_server.address, interceptors=[interceptor])
    extension = make_extension(sync_calls="workflow", client=temporal)
    server = server_with(extension)
    add_wait_forever(server)

    async with serving_http(server) as url, session_2025_11_25(url) as session:
        interceptor.cancel = session.cancel_the_call
        async with anyio.create_task_group() as group:
            group.start_soon(session.call_wait_forever)
            assert await closed_status(extension) == WorkflowExecutionStatus.CANCELED
            group.cancel_scope.cancel()


async def test_an_operator_cancelling_the_workflow_ends_the_call_with_an_error(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension)
    started = asyncio.Event()

    @server.tool(task=True)
    async def wait_forever() -> str:
        started.set()
        await asyncio.sleep(300)
        return "never"

    async with NoTasksClient(server) as client:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as group:

                async def operator() -> None:
                    await started.wait()
                    (execution,) = await call_workflows(extension)
                    assert extension.client is not None
                    await extension.client.get_workflow_handle(execution.id).cancel()

                group.start_soon(operator)
                with pytest.raises(MCPError) as raised:
                    await client.call_tool_mcp("wait_forever", {})
    assert raised.value.error.code == mcp_types.INTERNAL_ERROR
    assert "was cancelled (tasks/cancel, or an operator in Temporal)" in raised.value.error.message


async def test_a_leg_that_gives_up_ends_the_call_with_the_reason(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension)

    @server.tool(task=True)
    @execution_policy(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=1)
    async def stuck() -> str:
        await asyncio.sleep(60)
        return "never"

    async with NoTasksClient(server) as client:
        with anyio.fail_after(DEADLINE), pytest.raises(MCPError) as raised:
            await client.call_tool_mcp("stuck", {})
    assert raised.value.error.code == mcp_types.INTERNAL_ERROR
    assert raised.value.error.message == (
        "The tool did not finish within its start_to_close_timeout of 1s, after 1 attempt(s)."
    )


# --- 4. a guard tool's ask (SEP-2322) --------------------------------------------------------


async def greets(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        ask = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message="Your name?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
        )
        return mcp_types.InputRequiredResult(input_requests={"who": ask}, request_state="round-1")
    answer = ctx.input_responses["who"]
    return f"hello {answer.content['name']} ({ctx.request_state})"  # type: ignore[union-attr]


async def answer_ada(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
    return ElicitResult(action="accept", content={"name": "Ada"})


async def test_an_ask_goes_back_to_the_caller_and_the_next_call_answers_it(make_extension) -> None:
    """The client drives the rounds itself; each round is one call workflow that completes."""
    async with durable_and_inline(
        make_extension, tool(greets), client_options={"elicitation_handler": answer_ada}
    ) as pair:
        with anyio.fail_after(DEADLINE):
            durable = await pair.durable.call_tool("x")
            inline = await pair.inline.call_tool("x")
        assert durable.content == inline.content
        assert durable.data == "hello Ada (round-1)"
        rounds = await call_workflows(pair.extension, expected=2)
        for execution in rounds:
            await ran_once_on_a_worker(pair.extension, execution)
    assert len(rounds) == 2


async def test_an_ask_on_a_legacy_connection_gets_the_inline_error(make_extension) -> None:
    async with durable_and_inline(
        make_extension, tool(greets), client=Client, client_options={"mode": "legacy"}
    ) as pair:
        error = await same_json_rpc_error(pair)
    assert "only exists at MCP 2026-07-28" in error.message


# --- 5. the caller's identity and scope ---------------------------------------------------------


async def test_a_durable_call_runs_as_its_caller_in_the_callers_scope(make_extension) -> None:
    """Token, claims and headers reach the leg as they do a task's, and the scope hash is the task's."""
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, whoami, auth=verifier())

    async with serving_http(server) as url:
        transport = StreamableHttpTransport(url, headers={"x-tenant": "acme"}, auth="token-a")
        async with NoTasksClient(transport) as caller:
            answered = await caller.call_tool("whoami")
        async with Client(StreamableHttpTransport(url, auth="token-a")) as tasks_client:
            task = await call_tool_task(tasks_client, "whoami")
            await task.result()

        assert answered.structured_content == identity("token-a", "acme")
        assert extension.client is not None
        query = f"TaskQueue = '{extension.temporal_settings.task_queue}'"
        ids = sorted([w.id async for w in extension.client.list_workflows(query)])
    (call_id, task_id) = ids
    call_kind, call_scope, _ = call_id.split("/")
    task_kind, task_scope, _ = task_id.split("/")
    assert (call_kind, task_kind) == ("mcp-call", "mcp-task")
    assert call_scope == task_scope != ANONYMOUS_SCOPE_TAG


async def test_a_mounted_tools_policy_is_read_from_the_child(make_extension) -> None:
    extension = make_extension()  # sync_calls="inline"
    parent, child = FastMCP("parent"), FastMCP("child")
    parent.add_extension(extension)

    @child.tool(task=True)
    @execution_policy(sync_calls="workflow")
    async def durable(n: int) -> int:
        return n * 10

    parent.mount(child, namespace="c")
    async with NoTasksClient(parent) as client:
        assert (await client.call_tool("c_durable", {"n": 2})).data == 20
        (execution,) = await call_workflows(extension)
        await ran_once_on_a_worker(extension, execution)
