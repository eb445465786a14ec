"""A durable call a client's timeout cut short, joined by the client's repeat (`execution_policy(rejoin=True)`).

Proves, over the MCP wire on a real Temporal server, with `fastmcp.Client`:

- A client with no tasks whose request timeout (2 s) is shorter than the tool (5 s) calls
  again each time its request times out, and gets the tool's result, its body run once
  though every timed-out request was withdrawn; equal arguments after validation (`1` and
  `1.0` for a float, a default left out or given) are the same call.
- Only the same caller joins: two sessions without auth with equal arguments each run the
  body and see their own result.
- A result is delivered once: a repeat gets a completed result nobody received; after that the
  same arguments run the body again. An error result is never replayed.
- A joined call gets progress when it asks, though the first did not.
- Questions: a 2025-11-25-era caller that joins a call in its second round is asked only that
  round's question, and one that refuses it cancels nothing; a 2026-07-28 caller that answers
  a question gets the result (each round its own call), asked once.
- `rejoin=True` where no call would honour it is refused when the tool is declared or the server starts.
- A tool without `rejoin` still has its workflow cancelled by a withdrawn request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.servers import (
    NoTasksClient,
    Session2025_11_25,
    server_with,
    serving_http,
    session_2025_11_25,
    verifier,
)
from helpers.temporal import temporal_client, workflows_listed
from helpers.waits import DEADLINE
from helpers.wire import question

pytestmark = pytest.mark.anyio

# The body ends between two of the client's timeouts, not as one cuts a request: a result that
# reaches the client just as it gives up on the request is lost to it (see docs/sync-calls.md).
TOOL_SECONDS = 5
CLIENT_TIMEOUT = 2


def _tools(runs: list[str]) -> list[Callable[..., Any]]:
    @execution_policy(rejoin=True)
    async def slow_report(name: str) -> str:
        runs.append(name)
        run = len(runs)
        await anyio.sleep(TOOL_SECONDS)
        return f"report {name} (run {run})"

    @execution_policy(rejoin=True)
    async def measure(length: float, unit: str = "m") -> str:
        runs.append(f"{length}{unit}")
        await anyio.sleep(TOOL_SECONDS)
        return f"{length} {unit}"

    @execution_policy(rejoin=True)
    async def flaky(name: str) -> str:
        runs.append(name)
        await anyio.sleep(TOOL_SECONDS)
        if len(runs) == 1:
            raise ToolError("upstream returned 503, try again")
        return f"fetched {name}"

    @execution_policy(rejoin=True)
    async def counts(ctx: Context, steps: int) -> str:
        runs.append(f"counts {steps}")
        for done in range(1, steps + 1):
            await ctx.report_progress(done, steps, f"step {done}")
            await anyio.sleep(0.5)
        return "counted"

    async def slow_once(name: str) -> str:
        runs.append(f"once {name}")
        await anyio.sleep(TOOL_SECONDS)
        return f"once {name}"

    return [slow_report, measure, flaky, counts, slow_once]


def _session(server: FastMCP, **options: Any) -> Client:
    """A 2025-11-25-era client with no tasks: one MCP session, kept across its calls."""
    return NoTasksClient(server, mode="legacy", timeout=CLIENT_TIMEOUT, **options)


async def _until_answered(
    client: Client, tool: str, arguments: dict[str, Any], **options: Any
) -> tuple[str, int]:
    """Call until a call is answered: its text, and how many calls timed out first."""
    timed_out = 0
    with anyio.fail_after(DEADLINE):
        while True:
            try:
                result = await client.call_tool(tool, arguments, **options)
            except (MCPError, TimeoutError):
                timed_out += 1
                continue
            return result.content[0].text, timed_out


async def _until_closed(extension: TemporalTasksExtension, workflow_id: str) -> WorkflowExecutionStatus:
    handle = temporal_client(extension).get_workflow_handle(workflow_id)
    with anyio.fail_after(DEADLINE):
        while (status := (await handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
            await anyio.sleep(0.1)
    assert status is not None
    return status


async def _timed_out(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    with pytest.raises((MCPError, TimeoutError)):
        await client.call_tool(tool, arguments)


async def test_a_client_whose_timeout_is_shorter_than_the_tool_gets_its_result_by_calling_again(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with _session(server_with(extension, *_tools(runs))) as client:
        await _timed_out(client, "slow_report", {"name": "q3"})
        (workflow_id,) = await workflows_listed(extension, 1)
        assert workflow_id.startswith("mcp-call/")

        text, timed_out = await _until_answered(client, "slow_report", {"name": "q3"})
        assert text == "report q3 (run 1)" and runs == ["q3"]

        other, _ = await _until_answered(client, "slow_report", {"name": "q4"})
        assert other == "report q4 (run 2)" and runs == ["q3", "q4"]


async def test_arguments_equal_after_validation_are_the_same_call(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with _session(server_with(extension, *_tools(runs))) as client:
        await _timed_out(client, "measure", {"length": 1})
        text, _ = await _until_answered(client, "measure", {"length": 1.0, "unit": "m"})
    assert (text, runs) == ("1.0 m", ["1.0m"])


async def test_two_sessions_without_auth_never_join_each_other(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, *_tools(runs))
    texts: list[str] = []

    async def call(client: Client) -> None:
        result = await client.call_tool("slow_report", {"name": "invoices"}, timeout=DEADLINE)
        texts.append(result.content[0].text)

    async with _session(server) as alice, _session(server) as bob:
        with anyio.fail_after(DEADLINE):
            async with anyio.create_task_group() as calls:
                calls.start_soon(call, alice)
                calls.start_soon(call, bob)
    assert runs == ["invoices", "invoices"]
    assert sorted(texts) == ["report invoices (run 1)", "report invoices (run 2)"]


async def test_a_result_is_delivered_once(make_extension: Callable[..., TemporalTasksExtension]) -> None:
    """A completed result nobody received goes to the repeat; the next equal call runs the tool again."""
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with _session(server_with(extension, *_tools(runs))) as client:
        await _timed_out(client, "slow_report", {"name": "latest"})
        (workflow_id,) = await workflows_listed(extension, 1)
        assert await _until_closed(extension, workflow_id) == WorkflowExecutionStatus.COMPLETED

        first, timed_out = await _until_answered(client, "slow_report", {"name": "latest"})
        assert (first, timed_out, runs) == ("report latest (run 1)", 0, ["latest"])

        second, _ = await _until_answered(client, "slow_report", {"name": "latest"})
    assert (second, runs) == ("report latest (run 2)", ["latest", "latest"])


async def test_an_error_result_is_never_replayed(make_extension: Callable[..., TemporalTasksExtension]) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with _session(server_with(extension, *_tools(runs))) as client:
        await _timed_out(client, "flaky", {"name": "prices"})
        (workflow_id,) = await workflows_listed(extension, 1)
        assert await _until_closed(extension, workflow_id) == WorkflowExecutionStatus.COMPLETED

        text, _ = await _until_answered(client, "flaky", {"name": "prices"})
    assert (text, runs) == ("fetched prices", ["prices", "prices"])


async def _raw_call(
    session: Session2025_11_25, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> list[Any]:
    """`tools/call` on a raw 2025-11-25-era session (whose progress token is the caller's own
    choice, where `fastmcp.Client` always sends one): every message of its response stream."""
    params = {"name": tool, "arguments": arguments, "_meta": meta}
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    response = await session.http.post(session.url, headers=session.headers, json=message)
    return [json.loads(line.removeprefix("data:")) for line in response.text.splitlines() if line.startswith("data:")]


async def test_a_joined_call_gets_progress_when_it_asks(make_extension: Callable[..., TemporalTasksExtension]) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with serving_http(server_with(extension, *_tools(runs))) as url, session_2025_11_25(url) as session:
        with anyio.move_on_after(CLIENT_TIMEOUT):  # no progress token; withdrawn by closing its request
            await _raw_call(session, "counts", {"steps": 12}, {})
        with anyio.fail_after(DEADLINE):
            messages = await _raw_call(session, "counts", {"steps": 12}, {"progressToken": "joined"})
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "counted"}]
    assert runs == ["counts 12"]
    assert progress and all(report["progressToken"] == "joined" for report in progress)


def _two_rounds(runs: list[str]) -> Callable[..., Any]:
    @execution_policy(rejoin=True)
    async def interview(ctx: Context) -> str | mcp_types.InputRequiredResult:
        runs.append(ctx.request_state or "first")
        if ctx.input_responses is None:
            return mcp_types.InputRequiredResult(input_requests={"name": question("name?")}, request_state="second")
        if ctx.request_state == "second":
            name = ctx.input_responses["name"].content["value"]  # type: ignore[union-attr]
            ask = {"sure": question(f"sure, {name}?")}
            return mcp_types.InputRequiredResult(input_requests=ask, request_state=f"last {name}")
        return f"{ctx.request_state}: {ctx.input_responses['sure'].content['value']}"  # type: ignore[union-attr]

    return interview


async def test_a_2025_11_25_era_caller_rejoining_in_the_second_round_is_asked_only_its_question(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    """It refuses the second round's question once (the call fails, the workflow waits on), then
    calls again and is asked that question alone, not the first round's it answered."""
    runs: list[str] = []
    asked: list[str] = []

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        asked.append(message)
        if message == "sure, Ada?" and asked.count(message) == 1:
            raise RuntimeError("not now")
        return ElicitResult(action="accept", content={"value": "Ada" if message == "name?" else "yes"})

    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, _two_rounds(runs))
    async with _session(server, elicitation_handler=answer) as client:
        with anyio.fail_after(DEADLINE), pytest.raises(MCPError):
            await client.call_tool("interview", timeout=DEADLINE)
        (workflow_id,) = await workflows_listed(extension, 1)
        handle = temporal_client(extension).get_workflow_handle(workflow_id)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING  # not cancelled

        with anyio.fail_after(DEADLINE):
            result = await client.call_tool("interview", timeout=DEADLINE)
    assert result.content[0].text == "last Ada: yes"
    assert asked == ["name?", "sure, Ada?", "sure, Ada?"]
    assert runs == ["first", "second", "last Ada"]


async def test_a_2026_caller_that_answers_a_question_gets_the_result_asked_once(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    asked: list[str] = []

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        asked.append(message)
        return ElicitResult(action="accept", content={"value": "Ada" if message == "name?" else "yes"})

    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, _two_rounds(runs), auth=verifier())
    async with serving_http(server) as url:
        transport = StreamableHttpTransport(url, auth="token-a")
        async with NoTasksClient(transport, elicitation_handler=answer) as client:
            with anyio.fail_after(DEADLINE):
                result = await client.call_tool("interview")
    assert result.content[0].text == "last Ada: yes"
    assert asked == ["name?", "sure, Ada?"]
    assert runs == ["first", "second", "last Ada"]


async def test_rejoin_where_no_call_honours_it_is_refused(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    with pytest.raises(ValueError, match="sync_calls='workflow'"):
        execution_policy(rejoin=True, sync_calls="inline")

    @execution_policy(rejoin=True)
    async def report(name: str) -> str:
        return name

    server = server_with(make_extension(), report)  # sync_calls="inline"
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the server's start fails, as FastMCP reports it
        async with NoTasksClient(server):
            pass
    assert "add sync_calls='workflow'" in repr(raised.value) + "".join(
        repr(error) for error in getattr(raised.value, "exceptions", ())
    )


async def test_a_call_without_rejoin_is_still_cancelled_when_withdrawn(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = make_extension(sync_calls="workflow")
    async with _session(server_with(extension, *_tools(runs))) as client:
        await _timed_out(client, "slow_once", {"name": "q5"})
        (workflow_id,) = await workflows_listed(extension, 1)
        assert await _until_closed(extension, workflow_id) == WorkflowExecutionStatus.CANCELED
