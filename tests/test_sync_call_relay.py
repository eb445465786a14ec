"""What a durable synchronous call relays to its 2025-11-25 callers while it waits.

A 2025-11-25 client calls `task=True` tools of a server with
`sync_calls="workflow"`. The caller is a real `fastmcp.Client` in its own process, one that
never imports `fastmcp_tasks` (`relay_client.py`), over streamable HTTP to a real server
process (`fault_app`); the leg runs on a separate worker process, so everything relayed
travels through Temporal. The caller gets what the inline call gives it:

1. the body's log messages (`notifications/message`, honouring `logging/setLevel`) and its
   progress (`notifications/progress` with the request's token), in order, while the call
   waits (the tool ends only once its caller has seen its last message), at no history
   event of their own;
2. the body's questions, as `elicitation/create` requests on the open call: several in a
   round, over two rounds, a decline among them; each round's answers reach the workflow
   as one `submit_input` signal, and each leg's body runs once.

The TypeScript SDK's client (`@modelcontextprotocol/sdk` 1.x, installed from npm once per
session into a temporary folder; skipped, saying why, when npm cannot reach its registry)
gets the same (`relay_client.mjs`).

In process: every progress report reaches the caller in order, a log message is never
pushed out of the leg's window by a tight progress loop, a request without a
`progressToken` gets no progress, a stateless HTTP
connection keeps the inline call's refusal of an ask, an ask the client answers with an error
ends the call with that error and cancels its workflow, and sampling and roots asks are
relayed as elicitations are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StreamableHttpTransport
from mcp.shared.exceptions import MCPError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal.devserver import DevServer, free_port
from fastmcp_temporal.worker._notices import WINDOW_NOTICES, LegNotices
from helpers.npm import node_script
from helpers.processes import PROCESS_DEADLINE, AttemptLog, Processes, answering_client
from helpers.servers import Session2025_11_25, server_with, serving_http, session_2025_11_25
from helpers.temporal import call_workflows, closed_status
from helpers.wire import ask

pytestmark = pytest.mark.anyio

CLIENT = Path(__file__).with_name("relay_client.py")


async def call_from_a_plain_client(
    processes: Processes, url: str, tool: str, arguments: dict[str, Any], *, answers: dict[str, str] | None = None,
    level: str | None = None, client: list[str] | None = None,
) -> dict[str, Any]:
    """Run a caller process (`relay_client.py` unless `client` gives another command) once against `url`;
    what it saw."""
    report = processes.directory / f"report-{len(processes.started)}.json"
    command = [*(client or [sys.executable, str(CLIENT)]), url, str(report), tool, json.dumps(arguments)]
    caller = processes._start([*command, json.dumps(answers or {}), *([level] if level else [])], {}, "client")
    with anyio.fail_after(PROCESS_DEADLINE):
        while caller.poll() is None:
            await anyio.sleep(0.05)
    assert caller.returncode == 0, processes.output(caller)
    seen = json.loads(report.read_text())
    assert seen["protocol"] == "2025-11-25"
    assert seen["imports_fastmcp_tasks"] is False
    return seen


@pytest.fixture
def typescript_client(typescript_sdk: Path) -> list[str]:
    """`node relay_client.mjs` beside the TypeScript SDK (1.x)."""
    return node_script(typescript_sdk, CLIENT.with_suffix(".mjs"))


async def serving_app(temporal_server: DevServer, task_queue: str, processes: Processes) -> str:
    """fault_app over HTTP with `sync_calls="workflow"`, API-only, and a worker process of its own."""
    worker = processes.worker(temporal_server.address, task_queue)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = {"FASTMCP_TEMPORAL_SYNC_CALLS": "workflow", "FASTMCP_TEMPORAL_WORKER": "false"}
    server = processes.http_server(temporal_server.address, task_queue, port, env=env)
    await processes.polling(worker)
    async with answering_client(url, server, processes):
        pass  # it answers
    return url


async def call_histories(temporal_server: DevServer, task_queue: str) -> list[list[HistoryEvent]]:
    """The call workflows' histories, oldest first, once each completed."""
    temporal = await TemporalClient.connect(temporal_server.address)
    executions = [w async for w in temporal.list_workflows(f"TaskQueue = '{task_queue}'")]
    histories = []
    for execution in sorted(executions, key=lambda execution: execution.start_time):
        assert execution.id.startswith("mcp-call/")
        handle = temporal.get_workflow_handle(execution.id)
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
        histories.append((await handle.fetch_history()).events)
    return histories


def of_type(events: list[HistoryEvent], kind: int) -> list[HistoryEvent]:
    return [event for event in events if event.event_type == kind]


def chatty_notices(key: str, steps: int, *, debug: bool = True, info: bool = True) -> list[list[Any]]:
    """What `chatty` sends inline, in order, at the caller's log level."""
    expected: list[list[Any]] = []
    for done in range(1, steps + 1):
        expected += [["log", "debug", f"{key} debug {done}"]] if debug else []
        expected += [["log", "info", f"{key} step {done}"]] if info else []
        expected.append(["progress", done, steps, f"{key} {done}/{steps}"])
    return [*expected, ["log", "warning", f"{key} waits"]]


# --- 1. log messages and progress ------------------------------------------------------------


@pytest.mark.slow
async def test_a_plain_client_gets_the_durable_calls_logs_and_progress_while_it_waits(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    """Every level first; then, after `logging/setLevel` to warning, the warnings alone (progress is no log)."""
    url = await serving_app(temporal_server, task_queue, processes)

    every = await call_from_a_plain_client(processes, url, "chatty", {"key": "all", "steps": 3})
    warnings = await call_from_a_plain_client(processes, url, "chatty", {"key": "few", "steps": 3}, level="warning")

    assert every["text"] == "all done"  # chatty ends only after its caller saw "all waits"
    assert every["seen"] == chatty_notices("all", 3)
    assert warnings["text"] == "few done"
    assert warnings["seen"] == chatty_notices("few", 3, debug=False, info=False)
    for events in await call_histories(temporal_server, task_queue):
        assert len(of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)) == 1
        kinds = {event.event_type for event in events}
        assert not kinds & {
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
            EventType.EVENT_TYPE_MARKER_RECORDED,
            EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
            EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
        }  # nothing relayed is written to history
    assert len(attempts.starts("all")) == len(attempts.starts("few")) == 1


# --- 2. questions ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_plain_client_answers_the_durable_calls_questions_on_the_open_call(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    url = await serving_app(temporal_server, task_queue, processes)
    answers = {"q name?": "Ada", "q colour?": "decline", "q sure?": "yes"}

    seen = await call_from_a_plain_client(processes, url, "interview", {"key": "q"}, answers=answers)

    assert seen.get("error") is None, seen
    assert seen["text"] == "colour=decline,name=Ada;sure=yes"
    assert seen["seen"] == [["elicit", "q name?"], ["elicit", "q colour?"], ["elicit", "q sure?"]]
    (events,) = await call_histories(temporal_server, task_queue)
    signals = of_type(events, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == ["submit_input"] * 2
    assert len(of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)) == 3
    started = of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    assert [event.activity_task_started_event_attributes.attempt for event in started] == [1, 1, 1]
    assert [start["round"] for start in attempts.starts("q")] == [None, "round-2", "colour=decline,name=Ada"]


@pytest.mark.slow
async def test_the_typescript_sdks_client_gets_the_logs_and_answers_the_questions(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog, typescript_client: list[str]
) -> None:
    url = await serving_app(temporal_server, task_queue, processes)
    answers = {"ts name?": "Grace", "ts colour?": "blue", "ts sure?": "decline"}

    asked = await call_from_a_plain_client(
        processes, url, "interview", {"key": "ts"}, answers=answers, client=typescript_client
    )
    chatted = await call_from_a_plain_client(processes, url, "chatty", {"key": "js", "steps": 2}, client=typescript_client)

    assert asked.get("error") is None, asked
    assert asked["text"] == "colour=blue,name=Grace;sure=decline"
    assert asked["seen"] == [["elicit", "ts name?"], ["elicit", "ts colour?"], ["elicit", "ts sure?"]]
    assert chatted["text"] == "js done"
    assert chatted["seen"] == chatty_notices("js", 2)
    interview, _ = await call_histories(temporal_server, task_queue)
    signals = of_type(interview, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == ["submit_input"] * 2
    started = of_type(interview, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    assert [event.activity_task_started_event_attributes.attempt for event in started] == [1, 1, 1]
    assert len(attempts.starts("ts")) == 3


# --- 3. in process: what a connection cannot carry ----------------------------------------------


async def reports(ctx: Context) -> str:
    await ctx.report_progress(1, 2, "half")
    await ctx.info("halfway")
    return "done"


async def reports_thrice(ctx: Context) -> str:
    """As the conformance suite's `tools-call-with-progress`: three reports back to back."""
    for done in (1, 2, 3):
        await ctx.report_progress(done, 3, f"step {done}")
    return "done"


async def asks(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        return ask("value")
    return "answered"


def sse_messages(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data:"):]) for line in body.splitlines() if line.startswith("data:")]


async def call_raw(
    session: Session2025_11_25, tool: str, meta: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """`tools/call` on a raw 2025-11-25-era session: every message of its response stream."""
    params: dict[str, Any] = {"name": tool, "arguments": {}, **({"_meta": meta} if meta else {})}
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    response = await session.http.post(session.url, headers=session.headers, json=message)
    return sse_messages(response.text)


async def test_progress_goes_only_to_a_request_with_a_progress_token(make_extension) -> None:
    server = server_with(make_extension(sync_calls="workflow"), reports)

    async with serving_http(server) as url, session_2025_11_25(url) as session:
        with anyio.fail_after(PROCESS_DEADLINE):
            without = await call_raw(session, "reports", None)
            with_token = await call_raw(session, "reports", {"progressToken": "t-1"})

    def methods(messages: list[dict[str, Any]]) -> list[str | None]:
        return [message.get("method") for message in messages]

    assert methods(without) == ["notifications/message", None]
    assert methods(with_token) == ["notifications/progress", "notifications/message", None]
    assert with_token[0]["params"] == {"progressToken": "t-1", "progress": 1.0, "total": 2.0, "message": "half"}
    assert with_token[-1]["result"]["content"] == [{"type": "text", "text": "done"}]


async def test_every_progress_report_reaches_the_caller_in_order(make_extension) -> None:
    server = server_with(make_extension(sync_calls="workflow"), reports_thrice)

    async with serving_http(server) as url, session_2025_11_25(url) as session:
        with anyio.fail_after(PROCESS_DEADLINE):
            messages = await call_raw(session, "reports_thrice", {"progressToken": "t-3"})

    assert [message["params"] for message in messages[:-1]] == [
        {"progressToken": "t-3", "progress": float(done), "total": 3.0, "message": f"step {done}"}
        for done in (1, 2, 3)
    ]
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "done"}]


def test_a_tight_progress_loop_never_pushes_a_log_message_out_of_the_window() -> None:
    """Unit: what the leg's heartbeats carry, past the window's count of notices."""
    notices = LegNotices(progress=True)
    notices.log("info", "started", None, None)
    for done in range(1, 1001):
        notices.report(done, 1000, None)
    notices.log("info", "finished", None, None)

    window = notices.window()
    assert window is not None
    kinds = [(kind, data.get("message") or data.get("progress")) for _, kind, data in window["notices"]]
    assert kinds[0] == ("log", "started") and kinds[-1] == ("log", "finished")
    assert kinds[-2] == ("progress", 1000)
    assert len(kinds) == WINDOW_NOTICES
    reports = [progress for kind, progress in kinds if kind == "progress"]
    assert reports == sorted(reports)


async def answer_anything(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
    return ElicitResult(action="accept", content={"value": "x"})


async def test_a_stateless_connection_keeps_the_inline_refusal_of_an_ask(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, asks)

    async with serving_http(server, stateless_http=True) as url:
        client = Client(StreamableHttpTransport(url), mode="legacy", elicitation_handler=answer_anything)
        async with client:
            with anyio.fail_after(PROCESS_DEADLINE), pytest.raises(MCPError) as raised:
                await client.call_tool("asks")
        assert raised.value.error.code == mcp_types.INVALID_PARAMS
        assert "only exists at MCP 2026-07-28" in raised.value.error.message
        assert await closed_status(extension) == WorkflowExecutionStatus.COMPLETED  # nothing parked


async def answer_badly(message: str, response_type: Any, params: Any, context: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content={"value": {"not": "a primitive"}})  # type: ignore[dict-item]


async def test_an_ask_the_client_fails_to_answer_ends_the_call_with_its_error_and_cancels_the_workflow(
    make_extension,
) -> None:
    """The client refuses its own handler's answer (not a valid `ElicitResult`) with a JSON-RPC error."""
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, asks)

    async with Client(server, mode="legacy", elicitation_handler=answer_badly) as client:
        with anyio.fail_after(PROCESS_DEADLINE), pytest.raises(MCPError) as raised:
            await client.call_tool("asks")
        (execution,) = await call_workflows(extension)
        assert await closed_status(extension) == WorkflowExecutionStatus.CANCELED
    assert raised.value.error.code == mcp_types.INTERNAL_ERROR, raised.value.error
    assert "validation errors for ElicitResult" in raised.value.error.message
    assert execution.id.startswith("mcp-call/")


async def asks_for_sampling_and_roots(ctx: Context) -> str | mcp_types.InputRequiredResult:
    if ctx.input_responses is None:
        message = mcp_types.SamplingMessage(role="user", content=mcp_types.TextContent(type="text", text="hi?"))
        sample = mcp_types.CreateMessageRequest(
            params=mcp_types.CreateMessageRequestParams(messages=[message], max_tokens=10)
        )
        return mcp_types.InputRequiredResult(
            input_requests={"sample": sample, "roots": mcp_types.ListRootsRequest()}
        )
    sampled, roots = ctx.input_responses["sample"], ctx.input_responses["roots"]
    return f"{sampled.content.text} / {[str(root.uri) for root in roots.roots]}"  # type: ignore[union-attr]


async def sample_hello(messages: Any, params: Any, context: Any) -> str:
    return "hello"


async def test_sampling_and_roots_asks_are_relayed_too(make_extension) -> None:
    extension = make_extension(sync_calls="workflow")
    server = server_with(extension, asks_for_sampling_and_roots)

    async with Client(server, mode="legacy", sampling_handler=sample_hello, roots=["file:///work"]) as client:
        with anyio.fail_after(PROCESS_DEADLINE):
            result = await client.call_tool("asks_for_sampling_and_roots")
        (execution,) = await call_workflows(extension)
        assert extension.client is not None
        history = await extension.client.get_workflow_handle(execution.id).fetch_history()
    assert result.data == "hello / ['file:///work']"
    signals = of_type(history.events, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == ["submit_input"]
