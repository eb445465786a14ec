"""With FASTMCP_TEMPORAL_ENCRYPTION_KEY, nothing a task stores is readable in Temporal without it.

Tasks still work end to end (input rounds read their requests back from the
encrypted memo); a Temporal client without the key sees only ciphertext in the raw
protobuf of history and description — inputs, results, memo, signals, heartbeat
details and failure messages/stack traces; the codec server decrypts for an operator
holding the key.

Keys rotate (`FASTMCP_TEMPORAL_ENCRYPTION_KEY=B,A`: B encrypts, both decrypt): tasks parked
under A are answered and finish under [B, A], with every payload written after the rotation
under B's key id in the raw history, while a server still on [A, B] (mid-rollout) reads the
tasks [B, A] creates; under [B] alone those stay readable and A's payloads fail naming A's key
id. Payloads written by 0.2.0 (no key id, FastMCP's key stretch) still decode, and the key
stretch no longer follows FastMCP's test mode.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Iterator
from typing import Any, TypeVar

import anyio
import fastmcp
import httpx
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from google.protobuf import json_format
from google.protobuf.message import Message
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, InputRequiredResult
from temporalio.api.common.v1 import Payload, Payloads, SearchAttributes
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter

from fastmcp_temporal import EncryptionCodec, TemporalTasksExtension, encrypted_data_converter
from fastmcp_temporal.cli._codec_server import codec_app
from fastmcp_temporal.connection import _codec
from fastmcp_temporal.connection._codec import (
    DERIVATION_METADATA,
    ENCODING,
    KEY_ID_METADATA,
    UnknownEncryptionKeyError,
    key_id,
)
from fastmcp_temporal.devserver import DevServer
from helpers.servers import http_client, server_with, serving_http, verifier
from helpers.temporal import start_broken_task, task_handle
from helpers.waits import DEADLINE, finished, polled_until, status_becomes
from helpers.wire import accept, ask, question, tasks_get, tasks_update, text_of

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
    handle = task_handle(keyless, task_id)
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


# --- key rotation ----------------------------------------------------------------------

A = "key-a-that-encrypted-the-tasks-before-rotation"
B = "key-b-that-encrypts-every-payload-after-rotation"
TOKEN = "token-a"  # an authenticated caller, whose scope tag is keyed
PLAIN = DataConverter.default.payload_converter.to_payloads(["written by 0.2.0"])
# 0.2.0's EncryptionCodec("the-0.2.0-deployment-key-written-before-rotation").encode(PLAIN), run with
# the v0.2.0 tag's fastmcp_temporal/_codec.py (FastMCP's derive_jwt_key), outside and inside
# FastMCP's test mode (fastmcp.settings.test_mode, which stretched with 10 PBKDF2 iterations).
KEY_0_2_0 = "the-0.2.0-deployment-key-written-before-rotation"
WRITTEN_BY_0_2_0 = {
    "production": (
        "Ci0KCGVuY29kaW5nEiFiaW5hcnkvZmFzdG1jcC10ZW1wb3JhbC1lbmNyeXB0ZWQSjAFnQUFBQUFCckR5OVlKRHZtcUFt"
        "YUhsd0J0TzU5MWJwVWhPeWt6OXZ1NlBvTVBDUXN1YkxWSnExZ2VERThnOHk2OWZ2SEt6OWZybTZVWTBUcEJxU1htdWRZS1JB"
        "SlUxbEd0QjdIVjBBb0VNOWtBSVduZ3c2cVhyQXd5SHctRTJfU042ekFRbVpLYTR0Tg=="
    ),
    "fastmcp-test-mode": (
        "Ci0KCGVuY29kaW5nEiFiaW5hcnkvZmFzdG1jcC10ZW1wb3JhbC1lbmNyeXB0ZWQSjAFnQUFBQUFCckR5OVlVNGVC"
        "ME93THQ1cDROczRtdUZOUGNEVUFUeW5XOF9uaTN1bXg3ZG1FWUVNSTV0Q0d1MzE5TXFhU3FCaVA5RzhxMDROTks2QW10bFdN"
        "QlBWMVpyd3ZsNlpPWFJFVTVyZ0JFN2NWNml3REdCSmVDNTktLTc4d3YtRnp3dUEybzVGUA=="
    ),
}


@pytest.mark.parametrize("written", list(WRITTEN_BY_0_2_0))
@pytest.mark.parametrize("keys", [KEY_0_2_0, f"{B},{KEY_0_2_0}"], ids=["same-key", "rotated-to-b"])
async def test_payloads_written_by_0_2_0_still_decode(written: str, keys: str) -> None:
    payload = Payload.FromString(base64.b64decode(WRITTEN_BY_0_2_0[written]))
    assert set(payload.metadata) == {"encoding"}  # 0.2.0 named no key
    assert await EncryptionCodec(keys).decode([payload]) == PLAIN


async def test_payloads_name_the_encrypting_key_and_decode_under_any_list_holding_it() -> None:
    (sealed,) = await EncryptionCodec(f"{B}, {A}").encode(PLAIN)
    assert sealed.metadata[KEY_ID_METADATA] == key_id(B).encode()
    assert sealed.metadata[DERIVATION_METADATA] == b"v2"
    assert EncryptionCodec(f"{B},{A}").key_ids == (key_id(B), key_id(A))
    for keys in (B, f"{A},{B}", f"{B},{A}"):
        assert await EncryptionCodec(keys).decode([sealed]) == PLAIN

    with pytest.raises(UnknownEncryptionKeyError) as refused:
        await EncryptionCodec(A).decode([sealed])
    message = str(refused.value)
    assert f"key id {key_id(B)}" in message and f"(ids {key_id(A)})" in message
    assert "FASTMCP_TEMPORAL_ENCRYPTION_KEY" in message and A not in message and B not in message

    sealed.metadata[DERIVATION_METADATA] = b"v9"
    with pytest.raises(UnknownEncryptionKeyError, match="key derivation v9"):
        await EncryptionCodec(B).decode([sealed])


def test_the_key_stretch_is_fixed_whatever_fastmcps_test_mode_says(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = base64.urlsafe_b64encode(
        hashlib.pbkdf2_hmac("sha256", A.encode(), b"fastmcp-temporal-payload-key", 1_000_000, 32)
    )
    monkeypatch.setattr(fastmcp.settings, "test_mode", True)
    _codec._stretched.cache_clear()
    assert _codec.stretched_key(A) == expected


def test_every_key_of_the_list_must_be_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    for keys in (f"{B},short", f"{B},", f"{B},,{A}"):
        monkeypatch.setenv("FASTMCP_TEMPORAL_ENCRYPTION_KEY", keys)
        with pytest.raises(ValueError, match="keys of at least 32 characters each, separated by commas"):
            TemporalTasksExtension(address="127.0.0.1:7233")
        with pytest.raises(ValueError, match="keys of at least 32 characters each"):
            EncryptionCodec(keys)


async def sign(item: str, ctx: Context) -> str | InputRequiredResult:
    """Parks until an approver answers; the result names both."""
    if ctx.input_responses is None:
        return ask("approver")
    return f"{item} signed by {ctx.input_responses['approver'].content['value']}"


async def _workflows_on(client: TemporalClient, task_queue: str, count: int) -> dict[str, WorkflowHandle[Any, Any]]:
    """The queue's task workflows by task id, once visibility lists `count` of them."""
    query = f"TaskQueue = '{task_queue}'"
    with anyio.fail_after(DEADLINE):
        while len(ids := [execution.id async for execution in client.list_workflows(query)]) < count:
            await anyio.sleep(0.1)
    return {workflow.rsplit("/", 1)[1]: client.get_workflow_handle(workflow) for workflow in ids}


def _key_ids(event: HistoryEvent) -> set[str]:
    return {payload.metadata[KEY_ID_METADATA].decode() for payload in _walk(event, Payload)}


async def test_tasks_parked_under_one_key_finish_after_rotation_and_the_old_key_can_be_dropped(
    make_extension, temporal_server: DevServer, task_queue: str
) -> None:
    # 1. Two tasks park on input under [A].
    before = make_extension(encryption_key=A)
    async with (
        serving_http(server_with(before, sign, auth=verifier())) as url,
        http_client(url, TOKEN) as client,
    ):
        parked = {item: await call_tool_task(client, "sign", {"item": item}) for item in ("lease", "loan")}
        for task in parked.values():
            await status_becomes(task, "input_required")
    task_ids = {item: task.task_id for item, task in parked.items()}

    # 2. Servers and workers restart with [B, A]; one server still on [A, B] serves beside them.
    rotated = make_extension(encryption_key=f"{B},{A}")
    lagging = make_extension(encryption_key=f"{A},{B}", worker=False)
    async with (
        serving_http(server_with(rotated, sign, auth=verifier())) as url,
        serving_http(server_with(lagging, sign, auth=verifier())) as lagging_url,
        http_client(url, TOKEN) as client,
        http_client(lagging_url, TOKEN) as lagging_client,
    ):
        for task_id in task_ids.values():
            parked_read = await tasks_get(client, task_id)
            assert parked_read.status == "input_required"
            (key,) = parked_read.input_requests
            await tasks_update(client, task_id, {key: accept("ops")})
        for item, task_id in task_ids.items():
            done = await polled_until(lambda task_id=task_id: tasks_get(client, task_id), "completed")
            assert text_of(done) == f"{item} signed by ops"

        deed = await call_tool_task(client, "sign", {"item": "deed"})
        asked = await polled_until(lambda: tasks_get(lagging_client, deed.task_id), "input_required")
        (key,) = asked.input_requests
        await tasks_update(lagging_client, deed.task_id, {key: accept("legal")})
        assert text_of(await finished(deed)) == "deed signed by legal"

    keyless = await TemporalClient.connect(temporal_server.address)
    handles = await _workflows_on(keyless, task_queue, count=3)
    statuses = {(await handle.describe()).status for handle in handles.values()}
    assert statuses == {WorkflowExecutionStatus.COMPLETED}  # none is left running
    lease = handles[task_ids["lease"]]
    tag_a, tag_b = lease.id.split("/")[1], handles[deed.task_id].id.split("/")[1]
    assert tag_a != tag_b  # new tasks are tagged under the encrypting key

    # Everything the lease wrote before it was answered is under A, everything since under B.
    events = list((await lease.fetch_history()).events)
    signalled = [event.HasField("workflow_execution_signaled_event_attributes") for event in events]
    answered = signalled.index(True)
    assert set().union(*map(_key_ids, events[:answered])) == {key_id(A)}
    assert set().union(*map(_key_ids, events[answered:])) == {key_id(B)}
    assert events[-1].HasField("workflow_execution_completed_event_attributes")

    # 3. A is dropped: [B] alone reads what was written under B, and names A's key id for the rest.
    after = make_extension(encryption_key=B)
    async with (
        serving_http(server_with(after, sign, auth=verifier())) as url,
        http_client(url, TOKEN) as client,
    ):
        assert text_of(await tasks_get(client, deed.task_id)) == "deed signed by legal"
        with pytest.raises(MCPError) as gone:  # its tag is A's: not found, like an expired task
            await tasks_get(client, task_ids["lease"])
        assert gone.value.error.code == INVALID_PARAMS
    arguments = events[0].workflow_execution_started_event_attributes.input
    codec_server = httpx.ASGITransport(codec_app(EncryptionCodec(B), token=None))
    async with httpx.AsyncClient(transport=codec_server, base_url="http://127.0.0.1") as http:
        body = json_format.MessageToJson(Payloads(payloads=arguments.payloads))
        refused = await http.post("/decode", content=body, headers={"content-type": "application/json"})
    assert refused.status_code == 400
    reason = refused.json()["error"]
    assert f"key id {key_id(A)}" in reason and f"ids {key_id(B)}" in reason and A not in reason
    b_only = await TemporalClient.connect(temporal_server.address, data_converter=encrypted_data_converter(B))
    assert await b_only.get_workflow_handle(lease.id).result() is not None  # its result was written under B
    with pytest.raises(UnknownEncryptionKeyError, match=f"key id {key_id(A)}"):
        await b_only.data_converter.decode(arguments.payloads)
