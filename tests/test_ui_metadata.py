"""The Temporal UI speaks MCP: summaries, details and live state read back through Temporal's API.

Every task workflow carries a static summary and details naming the tool, task id and
settings; every leg activity a summary; the workflow's current details (served by the
`__temporal_workflow_metadata` query the UI calls) show the live MCP state, including a
failed leg's reason. With an
encryption key all of it is ciphertext on the wire and readable only through the codec.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.workflowservice.v1 import QueryWorkflowRequest
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowHandle

from fastmcp_temporal import execution_policy
from fastmcp_temporal.connection._codec import ENCODING
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG
from helpers.temporal import task_handle
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import question, tasks_update

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
QUESTION = "What is your name, operator?"


def _server(extension: Any) -> FastMCP:
    mcp = FastMCP("ui")
    mcp.add_extension(extension)

    @mcp.tool(task=True, version="2")
    async def greet(who: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            return InputRequiredResult(result_type="input_required", input_requests={"name": question(QUESTION)})
        return f"hello {who} and {ctx.input_responses['name'].content['value']}"

    @mcp.tool(task=True)
    async def crunch(dataset: str) -> str:
        await anyio.sleep(3600)
        return dataset

    @mcp.tool(task=True)
    @execution_policy(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=1)
    async def stall() -> str:
        await anyio.sleep(30)
        return "late"

    return mcp


async def _current_details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def _details_become(handle: WorkflowHandle[Any, Any], expected: str) -> str:
    with anyio.fail_after(DEADLINE):
        while expected not in (current := await _current_details(handle)):
            await anyio.sleep(0.05)
    return current


async def _leg_summaries(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The summaries of every scheduled leg activity, decoded through the client's codec."""
    converter = handle._client.data_converter
    history = await handle.fetch_history()
    return [
        (await converter.decode([event.user_metadata.summary]))[0]
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def _static(handle: WorkflowHandle[Any, Any]) -> tuple[str | None, str | None]:
    description = await handle.describe()
    return await description.static_summary(), await description.static_details()


@pytest.mark.parametrize("key", [None, KEY], ids=["clear", "encrypted"])
async def test_ui_shows_tool_task_and_live_state_for_every_status(
    make_extension, temporal_server: DevServer, key: str | None
) -> None:
    extension = make_extension(encryption_key=key)
    async with Client(_server(extension)) as client:
        assert extension.client is not None
        temporal = extension.client

        parked = await call_tool_task(client, "greet", {"who": "ada"})
        handle = task_handle(temporal, parked.task_id)
        waiting = await status_becomes(parked, "input_required")
        summary, details = await _static(handle)
        assert summary == f"greet v2 · task {parked.task_id}"
        assert details is not None
        for fact in (
            f"`{parked.task_id}`",
            "version 2",
            "TTL: 900 s",
            f"`{ANONYMOUS_SCOPE_TAG}`",
            "Poll interval",
            "an activity with heartbeat timeout 2 s",
        ):
            assert fact in details
        if key is None:
            assert '`{"who":"ada"}`' in details
        else:
            assert "ada" not in details and "values not previewed" in details
        current = await _details_become(handle, "**input_required**")
        assert f"- `name` (elicitation/create): {QUESTION}" in current

        (surfaced,) = waiting.input_requests
        await tasks_update(
            client, parked.task_id, {surfaced: {"action": "accept", "content": {"value": "bob"}}}
        )
        await status_becomes(parked, "completed")
        assert await _details_become(handle, "**completed**") == "**completed** · after leg 2"
        assert await _leg_summaries(handle) == ["greet · leg 1", "greet · leg 2 · after answers: name"]

        running = await call_tool_task(client, "crunch", {"dataset": "sales"})
        handle = task_handle(temporal, running.task_id)
        assert await _details_become(handle, "**working**") == "**working** · leg 1 running"
        assert (await _static(handle))[0] == f"crunch · task {running.task_id}"
        assert await _leg_summaries(handle) == ["crunch · leg 1"]

        await running.cancel()
        await status_becomes(running, "cancelled")
        assert (await _details_become(handle, "**cancelled**")).startswith("**cancelled**")
        failing = await call_tool_task(client, "stall")
        await status_becomes(failing, "failed")
        handle_failed = task_handle(temporal, failing.task_id)
        failed = await _details_become(handle_failed, "**failed**")
        assert failed.startswith("**failed** · after leg 1\n")
        assert "Last leg failure: The tool did not finish within its start_to_close_timeout of 1s" in failed
        if key is not None:
            await _assert_ciphertext_only(temporal_server.address, handle, "crunch")


async def _assert_ciphertext_only(address: str, handle: WorkflowHandle[Any, Any], tool: str) -> None:
    """A client without the key sees only encrypted summary, details and current details.

    The query needs the worker that holds the key online: it renders the details.
    """
    keyless = await TemporalClient.connect(address)
    raw = (await keyless.get_workflow_handle(handle.id).describe()).raw_description
    metadata = raw.execution_config.user_metadata
    query = await keyless.workflow_service.query_workflow(
        QueryWorkflowRequest(
            namespace=keyless.namespace,
            execution=raw.workflow_execution_info.execution,
            query={"query_type": "__temporal_workflow_metadata"},
        )
    )
    history = await keyless.get_workflow_handle(handle.id).fetch_history()
    leg_summaries = [e.user_metadata.summary for e in history.events if e.HasField("user_metadata")]
    payloads: list[Payload] = [
        metadata.summary,
        metadata.details,
        *query.query_result.payloads,
        *leg_summaries,
    ]
    assert len(payloads) >= 4
    for payload in payloads:
        assert payload.metadata["encoding"] == ENCODING
        assert tool.encode() not in payload.data and b"cancelled" not in payload.data
