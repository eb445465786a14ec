"""With FASTMCP_TEMPORAL_ENCRYPTION_KEY, nothing a task stores is readable in Temporal without it.

Tasks still work end to end (input rounds read their requests back from the
encrypted memo); a Temporal client without the key sees only ciphertext in the raw
protobuf of history and description — inputs, results, memo, signals, heartbeat
details and failure messages/stack traces; the codec server decrypts for an operator
holding the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TypeVar

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from google.protobuf.message import Message
from mcp_types import InputRequiredResult
from temporalio.api.common.v1 import Payload, SearchAttributes
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import History
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowFailureError
from temporalio.converter import DataConverter

from fastmcp_temporal import EncryptionCodec, TemporalTasksExtension, encrypted_data_converter
from fastmcp_temporal.connection._codec import ENCODING
from fastmcp_temporal.devserver._server import DevServer
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from task_wire import finished, question, start_broken_task, status_becomes, tasks_get

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
SECRET = "correct horse battery staple"
DECLINED = "card 4111-1111 declined"
M = TypeVar("M", bound=Message)


def _server(extension: TemporalTasksExtension) -> FastMCP:
    mcp = FastMCP("encrypted")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def confide(secret: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            again = question(f"Repeat {secret}?")
            return InputRequiredResult(result_type="input_required", input_requests={"again": again})
        return f"kept {secret} / {ctx.input_responses['again'].content['value']}"

    return mcp


class StoredTask:
    """Everything Temporal holds for one task, as raw protobuf, read by a client without the key."""

    def __init__(self, history: History, description: DescribeWorkflowExecutionResponse) -> None:
        self.messages: list[Message] = [history, description]

    @property
    def raw(self) -> bytes:
        return b"".join(message.SerializeToString() for message in self.messages)

    def payloads(self) -> list[Payload]:
        """Every payload in history and description (inputs, results, memo, signals, heartbeat
        details, failure details and encoded attributes), except the search attributes, which
        Temporal indexes in clear by design."""
        return [found for message in self.messages for found in _walk(message, Payload)]

    def failures(self) -> list[Failure]:
        return [found for message in self.messages for found in _walk(message, Failure)]


def _walk(message: Message, kind: type[M]) -> Iterator[M]:
    """Every ``kind`` message nested anywhere in ``message`` (repeated and map fields too)."""
    if isinstance(message, kind):
        yield message
    if isinstance(message, SearchAttributes):
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            children = [value]
        elif field.message_type.GetOptions().map_entry:
            children = list(value.values())
        else:
            children = list(value)
        for child in children:
            if isinstance(child, Message):
                yield from _walk(child, kind)


async def _stored_task(address: str, task_id: str) -> StoredTask:
    keyless = await TemporalClient.connect(address)
    handle = keyless.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task_id))
    history = await handle.fetch_history()
    description = await handle.describe()
    return StoredTask(History(events=history.events), description.raw_description)


def assert_sealed(stored: StoredTask, *secrets: str) -> None:
    """Nothing readable without the key: no secret in the raw bytes, every payload encrypted,
    every failure's message and stack trace moved into its (encrypted) encoded attributes."""
    for secret in secrets:
        assert secret.encode() not in stored.raw
    payloads = stored.payloads()
    assert payloads
    assert [p.metadata.get("encoding") for p in payloads] == [ENCODING] * len(payloads)
    for failure in stored.failures():
        if failure.HasField("application_failure_info"):
            assert failure.message == "Encoded failure" and not failure.stack_trace
            assert failure.encoded_attributes.metadata["encoding"] == ENCODING


async def test_task_payloads_are_encrypted_at_rest_and_tasks_still_work(
    make_extension, temporal_server: DevServer
) -> None:
    extension = make_extension(encryption_key=KEY)
    answers = []

    async def answer(message, response_type, params, context):  # noqa: ANN001, ANN202
        answers.append(message)
        return {"value": SECRET}

    async with Client(_server(extension), elicitation_handler=answer) as client:
        task = await call_tool_task(client, "confide", {"secret": SECRET})
        parked = await status_becomes(task, "input_required")
        assert SECRET in str(parked.input_requests)  # read back through the codec
        assert_sealed(await _stored_task(temporal_server.address, task.task_id), SECRET)

        result = await task.result()
        assert result.data == f"kept {SECRET} / {SECRET}"
        stored = await _stored_task(temporal_server.address, task.task_id)
    assert answers == [f"Repeat {SECRET}?"]
    assert_sealed(stored, SECRET)
    history = stored.messages[0]
    assert any(event.HasField("workflow_execution_signaled_event_attributes") for event in history.events)


async def test_progress_heartbeats_are_encrypted_at_rest(make_extension, temporal_server: DevServer) -> None:
    release = anyio.Event()
    mcp = FastMCP("progress")
    mcp.add_extension(make_extension(encryption_key=KEY))

    @mcp.tool(task=True)
    async def handle(secret: str, ctx: Context) -> str:
        await ctx.report_progress(1, 2, f"handling {secret}")
        await release.wait()
        return "done"

    async with Client(mcp) as client:
        task = await call_tool_task(client, "handle", {"secret": SECRET})
        await status_becomes(task, "working", until=lambda r: r.status_message == f"handling {SECRET}")
        stored = await _stored_task(temporal_server.address, task.task_id)
        release.set()
        await task.result()
    (pending,) = stored.messages[1].pending_activities
    assert pending.heartbeat_details.payloads  # the progress is there, and sealed
    assert_sealed(stored, SECRET)


def _failing_server(extension: TemporalTasksExtension) -> FastMCP:
    mcp = FastMCP("failing")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def charge() -> str:
        raise ValueError(DECLINED)

    @mcp.tool(task=True)
    async def square(n: int) -> int:
        return n * n

    return mcp


async def test_failure_messages_and_stack_traces_are_encrypted_at_rest(
    make_extension, temporal_server: DevServer
) -> None:
    extension = make_extension(encryption_key=KEY, maximum_attempts=1)
    async with Client(_failing_server(extension)) as client:
        errored = await call_tool_task(client, "charge", {})
        error_result = (await finished(errored)).model_dump()
        # Tool errors are results; a Temporal failure is stored when workflow code itself fails.
        broken = await start_broken_task(extension, "broken")
        with pytest.raises(WorkflowFailureError), anyio.fail_after(60):
            await broken.result()
        broken_result = await tasks_get(client, "broken")
    assert DECLINED in str(error_result)  # the client with the key reads the message back
    assert broken_result.status == "failed" and "infinity" in str(broken_result.status_message)
    assert_sealed(await _stored_task(temporal_server.address, errored.task_id), DECLINED)
    stored = await _stored_task(temporal_server.address, "broken")
    assert any(f.HasField("encoded_attributes") for f in stored.failures())  # the workflow's failure
    assert_sealed(stored, "infinity", "workflows/task.py")  # message and stack trace; the type stays


async def test_a_given_client_without_the_codec_is_refused(make_extension, temporal_server: DevServer) -> None:
    plain = await TemporalClient.connect(temporal_server.address)
    with pytest.raises(Exception, match="has no payload codec.*encrypted_data_converter"):
        async with Client(_server(make_extension(client=plain, encryption_key=KEY))):
            pass
    codec_only = await TemporalClient.connect(
        temporal_server.address,
        data_converter=dataclasses.replace(DataConverter.default, payload_codec=EncryptionCodec(KEY)),
    )
    with pytest.raises(Exception, match="failure messages in clear.*encrypted_data_converter"):
        async with Client(_server(make_extension(client=codec_only, encryption_key=KEY))):
            pass

    encrypting = await TemporalClient.connect(
        temporal_server.address, data_converter=encrypted_data_converter(KEY)
    )
    async with Client(_server(make_extension(client=encrypting, encryption_key=KEY))) as client:
        with anyio.fail_after(30):
            task = await call_tool_task(client, "confide", {"secret": "s"})
            await status_becomes(task, "input_required")


@pytest.mark.parametrize("short", ["", "x" * 31])
def test_keys_shorter_than_32_characters_are_refused_naming_the_setting(
    short: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTMCP_TEMPORAL_ENCRYPTION_KEY", short)
    with pytest.raises(ValueError, match="FASTMCP_TEMPORAL_ENCRYPTION_KEY.*at least 32 characters"):
        TemporalTasksExtension(address="127.0.0.1:7233")
    with pytest.raises(ValueError, match="FASTMCP_TEMPORAL_ENCRYPTION_KEY.*at least 32 characters"):
        EncryptionCodec(short)
    monkeypatch.setenv("FASTMCP_TEMPORAL_ENCRYPTION_KEY", "x" * 32)
    assert TemporalTasksExtension(address="127.0.0.1:7233").temporal_settings.encryption_key is not None
