"""Clients of the 2025-11-25 tasks (SEP-1686) get tasks of this engine.

Proven with the TypeScript SDK's client (`@modelcontextprotocol/sdk`
1.x and its `client.experimental.tasks`, installed from npm once per session; skipped, saying why,
when npm cannot reach its registry) over streamable HTTP: the server declares the tasks capability,
a `task=True` tool's call is a task whose question reaches the caller with the related-task
`_meta`, whose statuses an open `tasks/result` pushes, whose result `tasks/result` answers, and
which `tasks/cancel` cancels; each asserted in Temporal (the workflow, its `submit_input`
signal, its close). On the raw wire, for
what a client should never see: the error codes of the 2025-11-25 spec, a caller's list of its
own tasks, page by page, and no task of one era found by the other era's methods.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult, Request, RequestParams, Result
from pydantic import ConfigDict, Field
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server import _asks_2025_11_25, _tasks_2025_11_25
from helpers.npm import node_script
from helpers.servers import (
    VERSION_2025_11_25,
    HeldRequest,
    Session2025_11_25,
    WireError,
    gated_tool,
    serving_http,
    session_2025_11_25,
    verifier,
)
from helpers.temporal import anonymous_workflow_id, temporal_client
from helpers.waits import DEADLINE
from helpers.wire import ask, tasks_get

pytestmark = pytest.mark.anyio

CLIENT = Path(__file__).with_name("tasks_2025_11_25_client.mjs")
CLIENT_TASKS = {"list": {}, "cancel": {}, "requests": {}}
LIST_ROWS, DESCRIBE = "list_workflow_executions", "describe_workflow_execution"
HISTORY, CANCEL = "get_workflow_execution_history", "request_cancel_workflow_execution"


async def interview(ctx: Context) -> str | InputRequiredResult:
    """Asks the caller's name, then greets them."""
    if ctx.input_responses is None:
        return ask("name?")
    return f"hello {ctx.input_responses['name?'].content['value']}"


async def refuses() -> str:
    raise MCPError(-32042, "no such thing", {"why": "test"})


async def plain() -> str:
    return "plain"


async def answers_an_error() -> str:
    raise ToolError("upstream returned 503, try again")


def served(extension: TemporalTasksExtension, **options: Any) -> tuple[FastMCP, anyio.Event]:
    """A server with the tools these tests call; the event releases `gated`."""
    started, release = anyio.Event(), anyio.Event()
    server = FastMCP("tasks-2025-11-25", **options)
    server.add_extension(extension)
    for tool in (interview, refuses, answers_an_error, gated_tool(started, release)):
        server.tool(tool, task=True)
    server.tool(plain)
    server.tool(plain, name="plain_task", task=True)
    server.tool(interview, name="only_as_task", task=TaskConfig(mode="required"))
    return server, release


async def run_client(typescript_sdk: Path, url: str, scenario: str, tool: str, answers: dict[str, str]) -> dict[str, Any]:
    command = node_script(typescript_sdk, CLIENT)
    report = typescript_sdk / f"report-{scenario}-{tool}.json"
    with anyio.fail_after(DEADLINE):
        done = await anyio.run_process([*command, url, str(report), scenario, tool, "{}", json.dumps(answers)], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(report.read_text())


async def test_the_typescript_sdk_calls_a_tool_as_a_task_and_answers_its_question(
    make_extension: Any, typescript_sdk: Path
) -> None:
    extension = make_extension()
    server, _ = served(extension)
    async with serving_http(server) as url:
        seen = await run_client(typescript_sdk, url, "call", "interview", {"name?": "Ada"})
        handle = temporal_client(extension).get_workflow_handle(anonymous_workflow_id(seen["task_id"]))
        history = [event async for event in handle.fetch_history_events()]
        closed = (await handle.describe()).status

    assert seen.get("error") is None, seen
    assert seen["protocol"] == VERSION_2025_11_25
    assert seen["server_tasks"]["requests"] == {"tools": {"call": {}}}
    task_id = seen["task_id"]
    assert task_id.startswith("2025-11-25.")
    kinds = [message[0] for message in seen["seen"] if message[0] != "pushed"]
    assert kinds[0] == "created" and kinds[-1] == "result"
    pushed = [message[1] for message in seen["seen"] if message[0] == "pushed"]  # told on the open tasks/result
    assert pushed[-1] == "completed" and "input_required" in pushed, seen["seen"]
    assert all(message[2] is None for message in seen["seen"] if message[0] == "pushed")  # no related-task _meta
    (elicited,) = [message for message in seen["seen"] if message[0] == "elicit"]
    assert elicited[1] == "name?"
    assert elicited[2]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    result = [message for message in seen["seen"] if message[0] == "result"][-1][1]
    assert result["content"] == [{"type": "text", "text": "hello Ada"}]
    assert seen["read_after"]["status"] == "completed"
    assert seen["result_again"]["content"] == result["content"]
    assert seen["result_again"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}

    assert closed == WorkflowExecutionStatus.COMPLETED
    signals = [e for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == ["submit_input"]
    legs = [e for e in history if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    assert len(legs) == 2  # the asking leg, then the answered one: each ran once


async def test_the_typescript_sdk_cancels_a_task(make_extension: Any, typescript_sdk: Path) -> None:
    extension = make_extension()
    server, _ = served(extension)
    async with serving_http(server) as url:
        seen = await run_client(typescript_sdk, url, "cancel", "gated", {})
        handle = temporal_client(extension).get_workflow_handle(anonymous_workflow_id(seen["task_id"]))
        with anyio.fail_after(DEADLINE):
            while (await handle.describe()).status != WorkflowExecutionStatus.CANCELED:
                await anyio.sleep(0.1)

    assert seen.get("error") is None, seen
    assert seen["cancelled"]["status"] == "cancelled"
    assert seen["read_after_cancel"]["status"] == "cancelled"
    assert seen["cancel_again"]["code"] == -32602
    assert "already in terminal status 'cancelled'" in seen["cancel_again"]["message"]


# --- the raw wire -----------------------------------------------------------------------------


def tasks_session(
    url: str, *, tasks: bool = True, token: str | None = None, version: str = VERSION_2025_11_25, elicitation: bool = False
) -> AbstractAsyncContextManager[Session2025_11_25]:
    """A raw session that declares the tasks capability (or not), and elicitation (or not)."""
    capabilities = ({"tasks": CLIENT_TASKS} if tasks else {}) | ({"elicitation": {}} if elicitation else {})
    return session_2025_11_25(url, capabilities=capabilities, token=token, version=version)


async def create(session: Session2025_11_25, tool: str, arguments: dict[str, Any] | None = None) -> str:
    created = await session.request("tools/call", {"name": tool, "arguments": arguments or {}, "task": {"ttl": 60_000}})
    assert created["task"]["status"] == "working", created
    return created["task"]["taskId"]


async def until_ended(session: Session2025_11_25, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(DEADLINE):
        while (task := await session.request("tasks/get", {"taskId": task_id}))["status"] == "working":
            pass
    return task


@pytest.fixture
async def wire(make_extension: Any) -> AsyncIterator[tuple[str, FastMCP]]:
    server, release = served(make_extension())
    async with serving_http(server) as url:
        yield url, server
        release.set()


async def test_every_2025_11_25_client_is_declared_tasks_and_an_older_one_none(wire: tuple[str, FastMCP]) -> None:
    url, _ = wire
    async with tasks_session(url, tasks=False) as session:  # a requestor need not declare tasks (ext-tasks does not)
        assert session.initialized["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
        assert (await create(session, "refuses")).startswith("2025-11-25.")
    async with tasks_session(url, version="2025-06-18") as before_tasks:
        assert "tasks" not in before_tasks.initialized["capabilities"]
        answered = await before_tasks.request("tools/call", {"name": "refuses", "arguments": {}, "task": {}})
        with pytest.raises(WireError) as no_such_method:
            await before_tasks.request("tasks/get", {"taskId": "2025-11-25.nothing"})
    assert answered["isError"] is True and "task" not in answered  # run inline: that era has no tasks
    assert no_such_method.value.code == -32601


async def test_the_error_codes_of_the_2025_11_25_tasks(wire: tuple[str, FastMCP]) -> None:
    url, _ = wire
    async with tasks_session(url) as session:
        assert "list" not in session.initialized["capabilities"]["tasks"]  # anonymous callers cannot be told apart
        with pytest.raises(WireError) as forbidden:
            await create(session, "plain")
        with pytest.raises(WireError) as untasked:
            await session.request("tools/call", {"name": "only_as_task", "arguments": {}})
        with pytest.raises(WireError) as unknown:
            await session.request("tasks/get", {"taskId": "2025-11-25.nothing"})
        with pytest.raises(WireError) as unlisted:
            await session.request("tasks/list", {})
    assert forbidden.value.code == untasked.value.code == -32601
    assert "call it without `task`" in str(forbidden.value) and "call it with `task`" in str(untasked.value)
    assert unknown.value.code == -32602
    assert unlisted.value.code == -32601 and "identified callers" in str(unlisted.value)


async def test_a_failed_tool_reads_failed_and_its_result_is_its_error(wire: tuple[str, FastMCP]) -> None:
    url, _ = wire
    async with tasks_session(url) as session:
        task_id = await create(session, "refuses")
        task = await until_ended(session, task_id)
        with pytest.raises(WireError) as result:
            await session.request("tasks/result", {"taskId": task_id})
    assert task["status"] == "failed" and task["statusMessage"] == "no such thing"
    assert set(task) >= {"taskId", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    assert result.value.error == {"code": -32042, "message": "no such thing", "data": {"why": "test"}}


async def test_a_task_of_one_era_is_not_found_by_the_other(wire: tuple[str, FastMCP]) -> None:
    url, server = wire
    async with tasks_session(url) as session:
        old_era = await create(session, "refuses")
        async with Client(server) as modern:
            new_era = (await call_tool_task(modern, "refuses", {})).task_id
            with pytest.raises(MCPError) as unseen_old:
                await tasks_get(modern, old_era)
        with pytest.raises(WireError) as unseen_new:
            await session.request("tasks/get", {"taskId": new_era})
    assert unseen_old.value.error.code == unseen_new.value.code == -32602


async def test_a_caller_lists_and_reads_only_its_own_tasks_page_by_page(make_extension: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tasks_2025_11_25, "LIST_PAGE_SIZE", 2)
    server, _ = served(make_extension(), auth=verifier())
    async with serving_http(server) as url:
        async with tasks_session(url, token="token-a") as mine, tasks_session(url, token="token-b") as theirs:
            assert mine.initialized["capabilities"]["tasks"]["list"] == {}
            created = {await create(mine, "refuses") for _ in range(3)}
            await create(theirs, "refuses")
            listed, cursor, pages, issued = set(), None, 0, None
            with anyio.fail_after(DEADLINE):
                while listed != created:  # visibility lists a task shortly after its start
                    page = await mine.request("tasks/list", {} if cursor is None else {"cursor": cursor})
                    listed |= {task["taskId"] for task in page["tasks"]}
                    assert len(page["tasks"]) <= 2
                    cursor, pages = page.get("nextCursor"), pages + 1
                    issued = issued or cursor
                    if cursor is None and listed != created:
                        listed, pages = set(), 0
            forged = [
                "not a cursor",
                base64.urlsafe_b64encode(os.urandom(96)).decode(),
                base64.urlsafe_b64encode(os.urandom(750_000)).decode(),  # 1 MB
            ]
            bad_cursors = []
            for cursor in forged:
                with pytest.raises(WireError) as bad_cursor:
                    await mine.request("tasks/list", {"cursor": cursor})
                bad_cursors.append(bad_cursor.value)
            with pytest.raises(WireError) as not_their_cursor:
                await theirs.request("tasks/list", {"cursor": issued})
            with pytest.raises(WireError) as not_theirs:
                await theirs.request("tasks/get", {"taskId": next(iter(created))})
    assert pages >= 2  # three tasks, two a page
    assert {error.code for error in bad_cursors} == {not_their_cursor.value.code, not_theirs.value.code} == {-32602}
    assert all("pass a nextCursor it answered" in str(error) for error in [*bad_cursors, not_their_cursor.value])


class TemporalCalls:
    """The calls of the operations named one Temporal client makes, in order (each still goes to Temporal)."""

    def __init__(self, client: TemporalClient, *operations: str) -> None:
        self.made: list[str] = []
        service = client.workflow_service
        for operation in operations:
            setattr(service, operation, self._recorded(operation, getattr(service, operation)))

    def _recorded(self, operation: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def recorded(*args: Any, **kwargs: Any) -> Any:
            self.made.append(operation)
            return await call(*args, **kwargs)

        return recorded


async def test_a_list_answers_from_its_visibility_rows_and_a_cancel_reads_the_task_once(
    make_extension: Any, temporal_server: DevServer, task_queue: str
) -> None:
    """Tasks created through one server, listed and cancelled through another that has read none of them:
    the list asks Temporal for its page of rows and nothing of each task; the cancel describes the task
    once before it asks Temporal to cancel it, and answers it without reading it again."""
    client = await TemporalClient.connect(temporal_server.address)
    calls = TemporalCalls(client, LIST_ROWS, DESCRIBE, HISTORY, CANCEL)
    caller = verifier({"token-rows": {"client_id": f"client-{task_queue}"}})  # a caller with no other tasks
    creating, _ = served(make_extension(), auth=caller)
    api_only = TemporalTasksExtension(client=client, task_queue=task_queue, worker=False)
    reading, _ = served(api_only, auth=caller)
    async with serving_http(creating) as creating_url, serving_http(reading) as reading_url:
        async with tasks_session(creating_url, token="token-rows") as creator:
            failed = {await create(creator, "refuses") for _ in range(2)}
            asking = await create(creator, "interview")
            await until_ended(creator, next(iter(failed)))
            unread = await create(creator, "interview")
        async with tasks_session(reading_url, token="token-rows") as reader:
            shown = {**dict.fromkeys(failed, "failed"), **dict.fromkeys((asking, unread), "input_required")}
            with anyio.fail_after(DEADLINE):
                while True:  # visibility lists a task, and its close, shortly after
                    calls.made.clear()
                    page = await reader.request("tasks/list", {})
                    if {task["taskId"]: task["status"] for task in page["tasks"]} == shown:
                        break
            listing = list(calls.made)
            calls.made.clear()
            cancelled = await reader.request("tasks/cancel", {"taskId": unread})
    assert listing == [LIST_ROWS]
    assert cancelled["status"] == "cancelled"
    assert calls.made[: calls.made.index(CANCEL) + 1] == [DESCRIBE, CANCEL]


async def test_a_list_shows_an_error_result_failed_and_a_result_completed_as_tasks_get_does(
    make_extension: Any, temporal_server: DevServer, task_queue: str
) -> None:
    """A completed workflow's row cannot say whether its result is an error: a server that has read none of
    the tasks lists an error result `failed` and a result `completed`, as `tasks/get` answers them."""
    caller = verifier({"token-results": {"client_id": f"results-{task_queue}"}})  # a caller with no other tasks
    creating, _ = served(make_extension(), auth=caller)
    client = await TemporalClient.connect(temporal_server.address)
    reading, _ = served(TemporalTasksExtension(client=client, task_queue=task_queue, worker=False), auth=caller)
    async with serving_http(creating) as creating_url, serving_http(reading) as reading_url:
        async with tasks_session(creating_url, token="token-results") as creator:
            ended = {await create(creator, tool): tool for tool in ("answers_an_error", "plain_task")}
            got = {(await until_ended(creator, task_id))["status"]: ended[task_id] for task_id in ended}
        async with tasks_session(reading_url, token="token-results") as reader:
            with anyio.fail_after(DEADLINE):
                while True:  # visibility lists a task, and its close, shortly after
                    page = await reader.request("tasks/list", {})
                    listed = {ended[task["taskId"]]: task["status"] for task in page["tasks"]}
                    if set(listed.values()) <= {"failed", "completed"} and len(listed) == len(ended):
                        break
    assert got == {"failed": "answers_an_error", "completed": "plain_task"}
    assert listed == {"answers_an_error": "failed", "plain_task": "completed"}


async def test_a_question_the_client_cannot_answer_is_refused_and_the_task_keeps_waiting(
    wire: tuple[str, FastMCP],
) -> None:
    url, _ = wire
    async with tasks_session(url) as session:  # declares no elicitation
        task_id = await create(session, "interview")
        with anyio.fail_after(DEADLINE):
            while (await session.request("tasks/get", {"taskId": task_id}))["status"] != "input_required":
                pass
        with pytest.raises(WireError) as refused:
            await session.request("tasks/result", {"taskId": task_id})
        still = await session.request("tasks/get", {"taskId": task_id})
        cancelled = await session.request("tasks/cancel", {"taskId": task_id})
    assert refused.value.code == -32603 and "did not declare it can answer" in str(refused.value)
    assert still["status"] == "input_required"
    assert cancelled["status"] == "cancelled"


async def test_a_question_nobody_answers_is_given_up_when_its_task_is_cancelled(make_extension: Any) -> None:
    server, _ = served(make_extension())
    async with serving_http(server) as url, tasks_session(url, elicitation=True) as session:
        task_id = await create(session, "interview")
        async with session.held("tasks/result", {"taskId": task_id}) as waiting:
            question = await waiting.asked()  # never answered
            await session.request("tasks/cancel", {"taskId": task_id})
            withdrawn = await waiting.next_message(lambda message: message.get("method") == "notifications/cancelled")
            answer = await waiting.answer()
    assert withdrawn["params"]["requestId"] == question["id"]
    assert answer["error"]["code"] == -32603 and "was cancelled" in answer["error"]["message"]


class _ById(RequestParams):
    task_id: str = Field(serialization_alias="taskId")


class _ResultRequest(Request[_ById, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: _ById


class _Answered(Result):
    model_config = ConfigDict(extra="allow")


async def test_a_withdrawn_tasks_result_leaves_its_question_to_the_next_one(make_extension: Any) -> None:
    """The question went out on the withdrawn request's stream: the next `tasks/result` asks it again."""
    server, _ = served(make_extension())
    asked: list[str] = []
    first_asked = anyio.Event()

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        asked.append(message)
        if len(asked) == 1:
            first_asked.set()
            await anyio.sleep_forever()  # the caller gives up before answering
        return {"value": "Grace"}

    async with serving_http(server) as url, tasks_session(url) as session:
        task_id = await create(session, "interview")
        transport = StreamableHttpTransport(url)
        async with Client(transport, mode="legacy", elicitation_handler=answer) as client:
            result = _ResultRequest(params=_ById(task_id=task_id))
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as group:
                    group.start_soon(client.session.send_request, result, _Answered)
                    await first_asked.wait()
                    group.cancel_scope.cancel()  # withdraws the request (notifications/cancelled)
                answered = await client.session.send_request(result, _Answered)
    assert asked == ["name?", "name?"]
    assert answered.model_extra is not None
    assert answered.model_extra["content"] == [{"type": "text", "text": "hello Grace"}]


# --- a question is asked until it is answered, whatever the client does with its requests ---------

ACCEPT_ADA = {"action": "accept", "content": {"value": "Ada"}}
HELLO_ADA = [{"type": "text", "text": "hello Ada"}]


async def answered(session: Session2025_11_25, held: HeldRequest) -> dict[str, Any]:
    """Answer the question asked on `held`; what `held` then answers."""
    question = await held.asked()
    assert question["params"]["message"] == "name?"
    assert question["params"]["_meta"][_asks_2025_11_25.RELATED_TASK_META]["taskId"]
    await session.respond(question["id"], ACCEPT_ADA)
    return await held.answer()


async def submit_inputs(extension: TemporalTasksExtension, task_id: str) -> int:
    handle = temporal_client(extension).get_workflow_handle(anonymous_workflow_id(task_id))
    history = [event async for event in handle.fetch_history_events()]
    signals = [e for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    return len(signals)


@pytest.fixture
async def asking(make_extension: Any) -> AsyncIterator[tuple[str, TemporalTasksExtension]]:
    extension = make_extension()
    server, release = served(extension)
    async with serving_http(server) as url:
        yield url, extension
        release.set()


@pytest.mark.parametrize("how", ["withdrawn", "its connection dropped"])
async def test_a_question_left_by_one_tasks_result_is_asked_on_the_other(
    asking: tuple[str, TemporalTasksExtension], how: str
) -> None:
    url, extension = asking
    async with tasks_session(url, elicitation=True) as session:
        task_id = await create(session, "interview")
        async with session.held("tasks/result", {"taskId": task_id}) as first:
            await first.asked()
            async with session.held("tasks/result", {"taskId": task_id}) as second:
                await second.told("input_required")  # it waits on the question
                if how == "withdrawn":
                    await session.withdraw(first.id)
                else:
                    first.drop()
                result = await answered(session, second)
        assert await session.request("tasks/get", {"taskId": task_id})
    assert result["result"]["content"] == HELLO_ADA, result
    assert await submit_inputs(extension, task_id) == 1


async def test_a_session_withdrawing_its_question_leaves_it_to_another_session_of_the_caller(
    asking: tuple[str, TemporalTasksExtension],
) -> None:
    url, extension = asking
    async with tasks_session(url, elicitation=True) as first, tasks_session(url, elicitation=True) as second:
        task_id = await create(first, "interview")
        async with first.held("tasks/result", {"taskId": task_id}) as withdrawn:
            await withdrawn.asked()
            async with second.held("tasks/result", {"taskId": task_id}) as waiting:
                await waiting.told("input_required")
                await first.withdraw(withdrawn.id)
                result = await answered(second, waiting)
        still = await second.request("tasks/get", {"taskId": task_id})  # the second session lives on
    assert result["result"]["content"] == HELLO_ADA, result
    assert still["status"] == "completed"
    assert await submit_inputs(extension, task_id) == 1


async def test_a_tasks_result_cancelled_at_its_timeout_and_retried_at_once_is_asked_again(
    asking: tuple[str, TemporalTasksExtension],
) -> None:
    """What the TypeScript SDK does when a request times out: cancel it, then call again."""
    url, extension = asking
    async with tasks_session(url, elicitation=True) as session:
        task_id = await create(session, "interview")
        async with session.held("tasks/result", {"taskId": task_id}) as timed_out:
            await timed_out.asked()
            async with session.held("tasks/result", {"taskId": task_id}) as retry:
                await retry.told("input_required")  # the retry's POST overtook the cancel's
                await session.withdraw(timed_out.id)
                result = await answered(session, retry)
        still = await session.request("tasks/get", {"taskId": task_id})
    assert result["result"]["content"] == HELLO_ADA, result
    assert still["status"] == "completed"
    assert await submit_inputs(extension, task_id) == 1


async def test_a_polling_client_without_a_get_stream_is_asked_on_its_tasks_result(
    asking: tuple[str, TemporalTasksExtension],
) -> None:
    url, extension = asking
    async with tasks_session(url, elicitation=True) as session:  # opens no GET stream
        task_id = await create(session, "interview")
        with anyio.fail_after(DEADLINE):
            while (await session.request("tasks/get", {"taskId": task_id}))["status"] != "input_required":
                pass
        async with session.held("tasks/result", {"taskId": task_id}) as result_request:
            result = await answered(session, result_request)
    assert result["result"]["content"] == HELLO_ADA, result
    assert await submit_inputs(extension, task_id) == 1


async def test_a_caller_whose_asked_session_crashed_is_asked_on_its_new_session(
    asking: tuple[str, TemporalTasksExtension],
) -> None:
    url, extension = asking
    async with tasks_session(url, elicitation=True) as crashed:
        task_id = await create(crashed, "interview")
        async with crashed.held("tasks/result", {"taskId": task_id}) as lost:
            await lost.asked()
    # the session's connections closed, and it never sent DELETE
    async with tasks_session(url, elicitation=True) as reconnected:
        async with reconnected.held("tasks/result", {"taskId": task_id}) as result_request:
            result = await answered(reconnected, result_request)
    assert result["result"]["content"] == HELLO_ADA, result
    assert await submit_inputs(extension, task_id) == 1


async def test_a_stateless_server_says_why_it_cannot_ask(make_extension: Any) -> None:
    server, _ = served(make_extension())
    async with serving_http(server, stateless_http=True) as url, tasks_session(url, elicitation=True) as session:
        task_id = await create(session, "interview")
        with pytest.raises(WireError) as refused:
            await session.request("tasks/result", {"taskId": task_id})
        cancelled = await session.request("tasks/cancel", {"taskId": task_id})
    assert refused.value.code == -32603
    assert "stateless" in str(refused.value) and "stateless_http=False" in str(refused.value)
    assert "did not declare" not in str(refused.value)
    assert cancelled["status"] == "cancelled"


async def test_an_open_tasks_result_tells_a_change_not_the_time_of_a_read(
    make_extension: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_asks_2025_11_25, "_RECHECK", 0.05)  # the open tasks/result re-reads the task often
    server, release = served(make_extension())
    async with serving_http(server) as url, tasks_session(url) as session:
        task_id = await create(session, "gated")
        async with session.held("tasks/result", {"taskId": task_id}) as waiting:
            told = datetime.fromisoformat((await waiting.told("working"))["params"]["lastUpdatedAt"])
            with anyio.fail_after(DEADLINE):  # until a read is half a second later: ten re-reads of the held one
                while datetime.fromisoformat(
                    (await session.request("tasks/get", {"taskId": task_id}))["lastUpdatedAt"]
                ) < told + timedelta(seconds=0.5):
                    await anyio.sleep(0.05)
            release.set()
            answer = await waiting.answer()
    assert answer["result"]["content"] == [{"type": "text", "text": "done"}]
    statuses = [message["params"]["status"] for message in waiting.notifications]
    assert statuses == ["working", "completed"], waiting.notifications
