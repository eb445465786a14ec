"""Large payloads: stored outside history when a store is set, refused up front when they cannot be kept.

Each test reads Temporal itself (raw history bytes, the store's files or objects,
visibility) to prove what the feature claims: a big argument, answer or result never
enters history, an encrypted one is ciphertext in the store, a payload that cannot be
kept is refused before anything runs and no workflow is left running.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import stat
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus
from temporalio.converter import (
    CompositePayloadConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.worker import Replayer

from fastmcp_temporal import TemporalTasksExtension, encrypted_data_converter
from fastmcp_temporal._task_json import encode_answer
from fastmcp_temporal.connection._ordered_json import OrderedJSONPayloadConverter, TasksPayloadConverter
from fastmcp_temporal.connection._stores import STORE_THRESHOLD, FolderStorageDriver
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.worker import _attempts
from fastmcp_temporal.worker._body import MAX_INPUT_REQUESTS
from fastmcp_temporal.workflows.models import SUBMIT_INPUT_SIGNAL, InputAnswers
from fastmcp_temporal.workflows.task import McpTaskWorkflow
from helpers.servers import serving_http
from helpers.temporal import anonymous_workflow_id, no_workflow_running, task_handle, workflows_listed
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import question, tasks_get, tasks_update, text_of

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
MB = 1024 * 1024


def _marked(size: int) -> str:
    """`size` characters no other test and no compression could produce by chance."""
    token = secrets.token_hex(16)
    return (token * (size // len(token) + 1))[:size]


def _server(extension: TemporalTasksExtension, runs: list[str]) -> FastMCP:
    mcp = FastMCP("payloads")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def echo(blob: str, ctx: Context) -> str | InputRequiredResult:
        """Asks for `more`, then returns the arguments and the answer together."""
        runs.append("echo")
        if ctx.input_responses is None:
            return InputRequiredResult(
                result_type="input_required", input_requests={"more": question("more")}
            )
        return blob + ctx.input_responses["more"].content["value"]

    @mcp.tool(task=True)
    async def ask_twice(blob: str, ctx: Context) -> str | InputRequiredResult:
        runs.append("ask_twice")
        if ctx.input_responses is None:
            questions = {name: question(name) for name in ("first", "second")}
            return InputRequiredResult(result_type="input_required", input_requests=questions)
        return "answered"

    @mcp.tool(task=True)
    async def produce(size: int) -> str:
        runs.append("produce")
        return "r" * size

    return mcp


def _answering(value: str) -> Any:
    async def answer(message, response_type, params, context):  # noqa: ANN001, ANN202
        return {"value": value}

    return answer


async def _history_bytes(address: str, task_id: str) -> bytes:
    """Every event of the task's workflow as Temporal stores it, read without codec or store."""
    bare = await TemporalClient.connect(address)
    history = await task_handle(bare, task_id).fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


async def _round_trip(
    extension: TemporalTasksExtension, size: int, *, answer_size: int | None = None, over_http: bool = False
) -> tuple[str, str, str]:
    """Run `echo` with `size` characters of arguments and `answer_size` (default `size`) of answer,
    in memory or over streamable HTTP; return them and the task id."""
    blob, answer, runs = _marked(size), _marked(answer_size or size), []
    async with AsyncExitStack() as stack:
        server = _server(extension, runs)
        target = await stack.enter_async_context(serving_http(server)) if over_http else server
        client = await stack.enter_async_context(Client(target, elicitation_handler=_answering(answer)))
        task = await call_tool_task(client, "echo", {"blob": blob})
        result = await task.result()
        await no_workflow_running(extension)
    assert result.data == blob + answer
    assert runs == ["echo", "echo"]
    return blob, answer, task.task_id


@pytest.mark.parametrize("key", [None, KEY], ids=["clear", "encrypted"])
async def test_big_arguments_answers_and_results_go_to_the_folder_store(
    make_extension, temporal_server: DevServer, tmp_path: Path, key: str | None
) -> None:
    folder = tmp_path / "payloads"
    extension = make_extension(payload_store=f"file://{folder}", encryption_key=key)

    blob, answer, task_id = await _round_trip(extension, 3 * MB)

    history = await _history_bytes(temporal_server.address, task_id)
    assert len(history) < 256 * 1024
    assert blob[:64].encode() not in history and answer[:64].encode() not in history
    stored = [path for path in folder.rglob("*") if path.is_file()]
    folders = [folder, *(path for path in folder.rglob("*") if path.is_dir())]
    assert stored and {stat.S_IMODE(path.stat().st_mode) for path in folders} == {0o700}
    assert {stat.S_IMODE(path.stat().st_mode) for path in stored} == {0o600}
    in_store = b"".join(path.read_bytes() for path in stored)
    assert (blob[:64].encode() in in_store) is (key is None)


async def test_the_embedded_dev_server_stores_big_payloads_in_its_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_queue: str
) -> None:
    monkeypatch.delenv("FASTMCP_TEMPORAL_ADDRESS", raising=False)
    extension = TemporalTasksExtension(state_dir=tmp_path / "state", task_queue=task_queue, ui=False)
    await _round_trip(extension, 3 * MB)
    assert list((tmp_path / "state" / "payloads").rglob("*"))


async def test_a_26_mb_argument_passes_over_http_and_its_result_comes_back_whole(
    make_extension, tmp_path: Path
) -> None:
    folder = tmp_path / "payloads"
    extension = make_extension(payload_store=str(folder))

    blob, _, _ = await _round_trip(extension, 26_000_000, answer_size=1, over_http=True)

    stored = [path for path in folder.rglob("*") if path.is_file()]
    stored_arguments = [path for path in stored if blob[:64].encode() in path.read_bytes()[:256]]
    assert stored_arguments and stored_arguments[0].stat().st_size > len(blob)


async def test_a_request_over_http_request_limit_is_refused_with_its_size_and_the_setting(
    make_extension, tmp_path: Path
) -> None:
    extension = make_extension(payload_store=str(tmp_path / "payloads"), http_request_limit=MB)
    runs: list[str] = []
    async with serving_http(_server(extension, runs)) as url, Client(url) as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool("echo", {"blob": "a" * (2 * MB)}, allow_claimed=True)
        assert refused.value.error.code == mcp_types.INVALID_REQUEST
        message = refused.value.error.message
        assert "2,097," in message and "limit of 1,048,576 bytes" in message
        assert "FASTMCP_TEMPORAL_HTTP_REQUEST_LIMIT" in message

        streamed = await _post_without_length(url)
        assert streamed.status_code == 413
        assert "more than 1,048,577 bytes" in streamed.json()["error"]["message"]
        await no_workflow_running(extension)
    assert runs == []


_MCP_POST_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def _post_without_length(url: str, size: int = MB + 1) -> httpx.Response:
    """POST `size` bytes (1 MiB and one byte more) as a stream of two chunks, with no Content-Length."""

    async def undeclared_length() -> AsyncIterator[bytes]:
        yield b" " * (size - 1)
        yield b" "

    async with httpx.AsyncClient() as raw:
        return await raw.post(url, content=undeclared_length(), headers=_MCP_POST_HEADERS)


async def test_requests_past_the_request_memory_budget_are_refused_retryably_and_start_nothing(
    make_extension, tmp_path: Path
) -> None:
    extension = make_extension(
        payload_store=str(tmp_path / "payloads"),
        request_memory_budget=3 * MB,
        request_memory_caller_share=1,  # both clients are one caller: the budget alone refuses
        heartbeat_timeout=timedelta(seconds=30),  # a leg fetches its 8 MB input before it heartbeats
    )
    runs: list[str] = []
    server = _server(extension, runs)
    holding, release = anyio.Event(), anyio.Event()

    @server.tool
    async def hold_open(blob: str) -> int:
        """Keeps its 2 MB request in flight until the test releases it."""
        holding.set()
        await release.wait()
        return len(blob)

    blob, big, held = _marked(2 * MB), _marked(8 * MB), []
    async with (
        serving_http(server) as url,
        Client(url) as holder,
        Client(url, elicitation_handler=_answering("!")) as client,
    ):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _collect(held, holder.call_tool("hold_open", {"blob": blob})))
            with anyio.fail_after(DEADLINE):
                await holding.wait()
            with pytest.raises(MCPError) as refused:  # read to its end, so the client reads the 503
                await call_tool_task(client, "echo", {"blob": big})
            assert refused.value.error.code == mcp_types.INTERNAL_ERROR
            message = refused.value.error.message
            assert "budget of 3,145,728 bytes" in message and "retry" in message
            assert "FASTMCP_TEMPORAL_REQUEST_MEMORY_BUDGET" in message

            streamed = await _post_without_length(url, 2 * MB)
            assert streamed.status_code == 503 and streamed.headers["retry-after"].isdigit()
            assert "REQUEST_MEMORY_BUDGET" in streamed.json()["error"]["message"]

            within = await call_tool_task(client, "produce", {"size": 1})
            await status_becomes(within, "completed")
            release.set()
        assert [result.data for result in held] == [len(blob)]

        retried = await call_tool_task(client, "echo", {"blob": big})
        assert (await retried.result()).data == big + "!"
        listed = await workflows_listed(extension, at_least=2)
        await no_workflow_running(extension)
    assert sorted(listed) == sorted(anonymous_workflow_id(task.task_id) for task in (within, retried))
    assert sorted(runs) == ["echo", "echo", "produce"]


async def _collect(into: list[Any], call: Awaitable[Any]) -> None:
    into.append(await call)


async def test_oversize_arguments_are_refused_like_a_bad_call_and_start_nothing(make_extension) -> None:
    extension = make_extension()
    runs: list[str] = []
    async with Client(_server(extension, runs)) as client:
        refused = await client.session.call_tool("echo", {"blob": "a" * (3 * MB)}, allow_claimed=True)
        assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
        (text,) = [block.text for block in refused.content]
        assert "3,14" in text and "2,080,768 bytes" in text and "PAYLOAD_STORE" in text
        assert "retry" not in text
        # A workflow started by the refused call would be listed no later than this task's.
        sentinel = await call_tool_task(client, "produce", {"size": 1})
        await status_becomes(sentinel, "completed")
        listed = await workflows_listed(extension, at_least=1)
    assert listed == [anonymous_workflow_id(sentinel.task_id)]
    assert runs == ["produce"]


async def test_an_oversize_answer_is_refused_and_nothing_is_signalled(
    make_extension, temporal_server: DevServer
) -> None:
    extension = make_extension()
    runs: list[str] = []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "echo", {"blob": "a" * (1100 * 1024)})
        parked = await status_becomes(task, "input_required")
        (key,) = parked.input_requests
        with pytest.raises(MCPError) as refused:
            await tasks_update(
                client, task.task_id, {key: {"action": "accept", "content": {"value": "b" * MB}}}
            )
        assert refused.value.error.code == mcp_types.INVALID_PARAMS
        assert "2,080,768 bytes" in refused.value.error.message
        assert (await tasks_get(client, task.task_id)).status == "input_required"
        history = await _history_bytes(temporal_server.address, task.task_id)
        await task.cancel()
        await no_workflow_running(extension)
    assert b"submit_input" not in history
    assert runs == ["echo"]


async def test_a_result_that_cannot_be_kept_ends_the_task_once_with_its_size(make_extension) -> None:
    extension = make_extension(maximum_attempts=3)
    runs: list[str] = []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "produce", {"size": int(1.2 * MB)})
        done = await status_becomes(task, "completed")
        assert done.result is not None and done.result["isError"] is True
        (block,) = done.result["content"]
        assert "The tool's result: 2,5" in block["text"] and "2,080,768 bytes" in block["text"]
        await no_workflow_running(extension)
    assert runs == ["produce"]


async def test_answers_that_add_up_past_the_limit_are_refused_and_a_signal_past_it_fails_the_task(
    make_extension,
) -> None:
    """Each answer fits with the arguments; the one that makes the next leg's input too big is
    refused at `tasks/update`, and one that bypasses the check (another server's signal) ends
    the task with the reason instead of wedging its workflow."""
    extension = make_extension()
    runs: list[str] = []
    big = {"action": "accept", "content": {"value": "b" * 700 * 1024}}
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "ask_twice", {"blob": "a" * (700 * 1024)})
        parked = await status_becomes(
            task, "input_required", until=lambda r: len(r.input_requests or {}) == 2
        )
        first, second = parked.input_requests or {}
        await tasks_update(client, task.task_id, {first: big})
        with pytest.raises(MCPError) as refused:
            await tasks_update(client, task.task_id, {second: big})
        assert refused.value.error.code == mcp_types.INVALID_PARAMS
        assert "The next leg's input" in refused.value.error.message
        assert "2,080,768 bytes" in refused.value.error.message
        assert set((await tasks_get(client, task.task_id)).input_requests or {}) == {second}

        handle = task_handle(extension, task.task_id)
        await handle.signal(SUBMIT_INPUT_SIGNAL, InputAnswers({second: encode_answer({"method": "elicitation/create"}, big)}))
        failed = await status_becomes(task, "failed")
        assert "FASTMCP_TEMPORAL_PAYLOAD_STORE" in (failed.status_message or "")
        await no_workflow_running(extension)
    assert runs == ["ask_twice"]


class _DownForFirstWrites(StorageDriver):
    """A folder store that refuses its first `failures` writes (down for a moment), then works."""

    def __init__(self, folder: Path, failures: int) -> None:
        self._folder = FolderStorageDriver(folder)
        self.failures = failures

    def name(self) -> str:
        return self._folder.name()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the payload store is unreachable")
        return await self._folder.store(context, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await self._folder.retrieve(context, claims)


@pytest.mark.parametrize("down_for", [2, 5], ids=["back-for-a-retry", "down-past-every-attempt"])
async def test_a_result_the_store_failed_to_take_is_stored_once_it_answers_without_running_the_tool_again(
    make_extension, temporal_server: DevServer, tmp_path: Path, down_for: int
) -> None:
    """The leg retries the write until the store takes it, even past the leg's 3 attempts; the
    tool runs once, and its worker forgets the leg when the task ends."""
    folder, size = tmp_path / "payloads", 300 * 1024
    store = _DownForFirstWrites(folder, failures=down_for)
    storage = ExternalStorage(drivers=[store], payload_size_threshold=STORE_THRESHOLD)
    converter = dataclasses.replace(encrypted_data_converter(None), external_storage=storage)
    temporal = await TemporalClient.connect(temporal_server.address, data_converter=converter)
    extension = make_extension(client=temporal, payload_store=f"file://{folder}", maximum_attempts=3)
    runs: list[str] = []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "produce", {"size": size}, raise_on_error=False)
        done = await task.wait(timeout=DEADLINE)
        await no_workflow_running(extension)

    assert done.status == "completed", done.status_message
    assert done.result is not None and done.result["structuredContent"] == {"result": "r" * size}
    assert runs == ["produce"]
    assert store.failures == 0
    assert [leg for leg in _attempts._runs if leg[0] == anonymous_workflow_id(task.task_id)] == []


# --- S3, through the SDK's driver, against a local moto server ---------------------------


async def test_big_payloads_go_to_s3_encrypted(
    make_extension, temporal_server: DevServer, s3_endpoint: str
) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="tasks")
    # Converting megabytes of arguments and results holds the loop for seconds on a busy test machine.
    extension = make_extension(
        payload_store="s3://tasks/mcp/payloads", encryption_key=KEY, heartbeat_timeout=timedelta(seconds=30)
    )

    blob, answer, task_id = await _round_trip(extension, int(1.5 * MB))

    history = await _history_bytes(temporal_server.address, task_id)
    assert len(history) < 256 * 1024 and blob[:64].encode() not in history
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket="tasks")["Contents"]]
    assert keys and all(key.startswith("mcp/payloads/") for key in keys)
    stored = b"".join(s3.get_object(Bucket="tasks", Key=key)["Body"].read() for key in keys)
    assert len(stored) > 6 * MB  # arguments, answer, result (twice: text and structured), encrypted
    assert blob[:64].encode() not in stored and answer[:64].encode() not in stored


def test_an_unknown_payload_store_names_the_setting() -> None:
    from fastmcp_temporal.connection._stores import PayloadStoreError, payload_storage

    with pytest.raises(PayloadStoreError, match="FASTMCP_TEMPORAL_PAYLOAD_STORE"):
        payload_storage("relative/folder", None, MB)


async def test_a_workflow_task_never_decodes_the_arguments(
    make_extension, temporal_server: DevServer, tmp_path: Path
) -> None:
    """Big arguments pass through the workflow as the caller's payload: its workflow tasks,
    replayed from the task's own history, neither decode nor re-encode them, and each of its
    two legs still gets them whole (decoding big arguments in a workflow task can pass the
    SDK's deadlock detection)."""
    folder = tmp_path / "payloads"
    mcp = FastMCP("weighs")
    mcp.add_extension(make_extension(payload_store=str(folder)))
    blob = _marked(STORE_THRESHOLD + 1024)

    @mcp.tool(task=True)
    async def weigh(blob: str, ctx: Context) -> int | InputRequiredResult:
        """Asks once, then says how long the arguments were: its outcomes never hold them."""
        if ctx.input_responses is None:
            return InputRequiredResult(result_type="input_required", input_requests={"go": question("go?")})
        return len(blob)

    async with Client(mcp, elicitation_handler=_answering("yes")) as client:
        task = await call_tool_task(client, "weigh", {"blob": blob})
        assert (await task.result()).data == len(blob)  # the second leg got them whole too
    touched: list[str] = []  # what converting the arguments' bytes was done

    class Watching(OrderedJSONPayloadConverter):
        def to_payload(self, value: Any) -> Payload | None:
            payload = super().to_payload(value)
            if payload is not None and blob.encode() in payload.data:
                touched.append("encoded")
            return payload

        def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
            if blob.encode() in payload.data:
                touched.append("decoded")
            return super().from_payload(payload, type_hint)

    class WatchingTasks(CompositePayloadConverter):
        def __init__(self) -> None:
            converters = TasksPayloadConverter().converters.values()
            super().__init__(*(Watching() if isinstance(c, OrderedJSONPayloadConverter) else c for c in converters))

    converter = dataclasses.replace(
        encrypted_data_converter(None, str(folder)), payload_converter_class=WatchingTasks
    )
    temporal = await TemporalClient.connect(temporal_server.address, data_converter=converter)
    history = await task_handle(temporal, task.task_id).fetch_history()
    await Replayer(workflows=[McpTaskWorkflow], data_converter=converter).replay_workflow(history)
    assert sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in history.events) == 2
    assert touched == []


async def test_continue_as_new_carries_the_arguments_once(make_extension, temporal_server: DevServer) -> None:
    extension = make_extension(history_events_limit=20)
    mcp = FastMCP("rounds")
    mcp.add_extension(extension)
    marker = _marked(4096)

    @mcp.tool(task=True)
    async def rounds(blob: str, ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0) + (ctx.input_responses is not None)
        if done < 6:
            requests = {f"q{done}": question(f"q{done}")}
            return InputRequiredResult(
                result_type="input_required", input_requests=requests, request_state=str(done)
            )
        return "done"

    async with Client(mcp, elicitation_handler=_answering("x")) as client:
        task = await call_tool_task(client, "rounds", {"blob": marker})
        assert (await task.result()).data == "done"
    bare = await TemporalClient.connect(temporal_server.address)
    handle = task_handle(bare, task.task_id)
    description = await handle.describe()
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    started = [
        e
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    ]
    payloads = started[0].workflow_execution_started_event_attributes.input.payloads
    assert sum(payload.data.count(marker.encode()) for payload in payloads) == 1


async def test_big_input_requests_are_stored_too(make_extension, tmp_path: Path) -> None:
    extension = make_extension(payload_store=str(tmp_path / "payloads"))
    mcp = FastMCP("asks")
    mcp.add_extension(extension)
    message = _marked(3 * MB)

    @mcp.tool(task=True)
    async def ask_big(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            return InputRequiredResult(result_type="input_required", input_requests={"q": question(message)})
        return "answered"

    async with Client(mcp, elicitation_handler=_answering("x")) as client:
        task = await call_tool_task(client, "ask_big")
        parked = await status_becomes(task, "input_required")
        (request,) = (parked.input_requests or {}).values()
        assert request["params"]["message"] == message
        assert (await task.result()).data == "answered"
        await no_workflow_running(extension)


async def test_a_round_of_many_questions_can_always_be_finished_within_the_answer_bound(make_extension) -> None:
    """100 questions in one round, no store: an answer that would leave no room to decline the other
    99 is refused, saying so, so the round can still be finished (not the dead end of taking the
    answer that fills the bound, after which every answer, a decline too, is refused until the TTL)."""
    extension = make_extension(payload_limit=256 * 1024)
    mcp = FastMCP("answer-bound")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def survey(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            questions = {f"q{number}": question(f"q{number}") for number in range(MAX_INPUT_REQUESTS)}
            return InputRequiredResult(result_type="input_required", input_requests=questions)
        actions = [answer.action for answer in ctx.input_responses.values()]
        return f"{actions.count('accept')} accepted, {actions.count('decline')} declined"

    async with Client(mcp) as client:
        task = await call_tool_task(client, "survey")
        parked = await status_becomes(task, "input_required", until=lambda r: len(r.input_requests or {}) == 100)
        first, *others = parked.input_requests or {}
        probe = 300 * 1024
        with pytest.raises(MCPError) as refused:
            await tasks_update(client, task.task_id, {first: _accepting(probe)})
        over, limit = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) bytes", refused.value.error.message)[:2])
        filling = probe - (over - limit) - 3000  # leaves 3,000 bytes: too few to decline 99 questions
        with pytest.raises(MCPError) as refused:
            await tasks_update(client, task.task_id, {first: _accepting(filling)})
        assert refused.value.error.code == mcp_types.INVALID_PARAMS
        message = refused.value.error.message
        assert "the round's 99 other open question(s) need" in message and "could never be finished" in message
        await tasks_update(client, task.task_id, {first: _accepting(filling - 20 * 1024)})
        await tasks_update(client, task.task_id, {key: {"action": "decline"} for key in others})
        assert text_of(await status_becomes(task, "completed")) == "1 accepted, 99 declined"
        described = await task_handle(extension, task.task_id).describe()
        assert described.status == WorkflowExecutionStatus.COMPLETED
        await no_workflow_running(extension)


def _accepting(size: int) -> dict[str, Any]:
    return {"action": "accept", "content": {"value": "v" * size}}
