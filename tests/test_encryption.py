"""With FASTMCP_TEMPORAL_ENCRYPTION_KEY, nothing a task stores is readable in Temporal without it.

Tasks still work end to end (input rounds read their requests back from the
encrypted memo); a Temporal client without the key sees only ciphertext in history,
memo and heartbeats; the codec server decrypts for an operator holding the key.
"""

from __future__ import annotations

import base64

import anyio
import httpx
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from google.protobuf import json_format
from mcp_types import ElicitRequest, InputRequiredResult
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import EncryptionCodec, TemporalTasksExtension, encrypted_data_converter
from fastmcp_temporal._codec import ENCODING, codec_app
from fastmcp_temporal._devserver import DevServer
from fastmcp_temporal._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from task_wire import status_becomes

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
SECRET = "correct horse battery staple"


def _server(extension: TemporalTasksExtension) -> FastMCP:
    mcp = FastMCP("encrypted")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def confide(secret: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            question = ElicitRequest(
                method="elicitation/create",
                params={
                    "mode": "form",
                    "message": f"Repeat {secret}?",
                    "requestedSchema": {"type": "object", "properties": {"value": {"type": "string"}}},
                },
            )
            return InputRequiredResult(result_type="input_required", input_requests={"again": question})
        return f"kept {secret} / {ctx.input_responses['again'].content['value']}"

    return mcp


async def _raw_history_text(address: str, task_id: str) -> str:
    """Everything Temporal holds for the task, read by a client that lacks the key."""
    keyless = await TemporalClient.connect(address)
    handle = keyless.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task_id))
    history = await handle.fetch_history()
    description = await handle.describe()
    return str(history.to_json()) + str(description.raw_description)


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
        assert SECRET not in await _raw_history_text(temporal_server.address, task.task_id)

        result = await task.result()
        assert result.data == f"kept {SECRET} / {SECRET}"
        stored = await _raw_history_text(temporal_server.address, task.task_id)
    assert answers == [f"Repeat {SECRET}?"]
    assert SECRET not in stored
    assert base64.b64encode(ENCODING).decode() in stored  # history JSON carries metadata in base64


async def test_a_given_client_without_the_codec_is_refused(make_extension, temporal_server: DevServer) -> None:
    plain = await TemporalClient.connect(temporal_server.address)
    with pytest.raises(Exception, match="has no payload codec.*encrypted_data_converter"):
        async with Client(_server(make_extension(client=plain, encryption_key=KEY))):
            pass

    encrypting = await TemporalClient.connect(
        temporal_server.address, data_converter=encrypted_data_converter(KEY)
    )
    async with Client(_server(make_extension(client=encrypting, encryption_key=KEY))) as client:
        with anyio.fail_after(30):
            task = await call_tool_task(client, "confide", {"secret": "s"})
            await status_becomes(task, "input_required")


async def test_the_codec_server_decrypts_for_an_operator_with_the_key() -> None:
    codec = EncryptionCodec(KEY)
    plain = encrypted_data_converter(KEY).payload_converter.to_payloads([{"secret": SECRET}])
    encrypted = await codec.encode(plain)
    body = json_format.MessageToJson(Payloads(payloads=encrypted))
    assert SECRET not in body

    app = codec_app(codec, ["http://127.0.0.1:8233"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://codec") as http:
        decoded = await http.post("/decode", content=body, headers={"x-namespace": "default"})
        preflight = await http.options(
            "/decode",
            headers={
                "origin": "http://127.0.0.1:8233",
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type,x-namespace",
            },
        )
    assert decoded.status_code == 200
    payloads = json_format.Parse(decoded.text, Payloads()).payloads
    assert encrypted_data_converter(KEY).payload_converter.from_payloads(payloads) == [{"secret": SECRET}]
    assert preflight.headers["access-control-allow-origin"] == "http://127.0.0.1:8233"
