"""Long tools for hosts without tasks: a "call again" answer before the host's timeout, and keep-alives.

Proves, on a real Temporal dev server, over streamable HTTP, with the clients such hosts are built
on (each with a 10 s request timeout and no retry when it passes):

- A rejoinable durable call still running at its deadline (`sync_call_answer_after`) answers with
  an `isError` result that says the tool still runs, what it reported last, and to call it again
  with the same arguments. A client that does what the answer says (as a model would) gets a
  typed tool's structured result through the repeats, which join the call: the body runs once,
  one workflow run completes. The Python `mcp` client (`ClientSession`) and the TypeScript SDK's
  `callTool` (`call_again_client.mjs`) both.
- While a durable call runs, a request with a progress token gets a `notifications/progress` at
  least every `sync_call_keepalive`, its values growing, from a tool that reports nothing; so the
  TypeScript SDK's `callTool` with `resetTimeoutOnProgress` gets a tool longer than its timeout in
  one call.
- A caller whose repeat could not join (a stateless server without auth) is not told to call again:
  its call waits for the end.
- `sync_call_answer_after` on a tool that is not rejoinable is refused when the tool is declared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Context
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from pydantic import BaseModel

from fastmcp_temporal import TemporalTasksExtension, execution_policy
from helpers.npm import node_script
from helpers.servers import server_with, serving_http
from helpers.temporal import workflows_listed
from helpers.waits import DEADLINE

pytestmark = pytest.mark.anyio

TOOL_SECONDS = 12
ANSWER_AFTER = 3
CLIENT_TIMEOUT = 10
KEEPALIVE = 1
SILENT_SECONDS = 8
# How late a keep-alive may come on a busy shared machine, past its period.
KEEPALIVE_SLACK = 3


class Build(BaseModel):
    target: str
    artifacts: int


def _build(runs: list[str]) -> Callable[..., Any]:
    @execution_policy(rejoin=True)
    async def build(ctx: Context, target: str) -> Build:
        runs.append(target)
        await ctx.report_progress(1, 2, f"compiling {target}")
        await anyio.sleep(TOOL_SECONDS)
        return Build(target=target, artifacts=3)

    return build


async def silent(seconds: int) -> str:
    await anyio.sleep(seconds)
    return "done quietly"


def _answering(make_extension: Callable[..., TemporalTasksExtension]) -> TemporalTasksExtension:
    return make_extension(sync_calls="workflow", sync_call_answer_after=timedelta(seconds=ANSWER_AFTER))


async def _one_completed_run(extension: TemporalTasksExtension) -> None:
    """Temporal shows one run of the call that completed (a delivered call's marker run is terminated)."""
    completed = await workflows_listed(extension, 1, "ExecutionStatus = 'Completed'")
    assert len(completed) == 1, completed


def _told_to_call_again(result: CallToolResult, tool: str) -> bool:
    return bool(result.is_error) and f"call {tool} again" in result.content[0].text  # type: ignore[union-attr]


async def test_the_python_mcp_client_gets_a_long_typed_tools_result_by_calling_again_as_told(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    runs: list[str] = []
    extension = _answering(make_extension)
    still_running: list[CallToolResult] = []
    async with serving_http(server_with(extension, _build(runs))) as url:
        async with streamable_http_client(url) as (read, write), ClientSession(
            read, write, read_timeout_seconds=CLIENT_TIMEOUT
        ) as session:
            await session.initialize()
            with anyio.fail_after(DEADLINE):
                while _told_to_call_again(result := await session.call_tool("build", {"target": "app"}), "build"):
                    still_running.append(result)
        await _one_completed_run(extension)
    assert result.structured_content == {"target": "app", "artifacts": 3} and not result.is_error
    assert runs == ["app"]
    assert still_running and all(answer.structured_content is None for answer in still_running)
    assert 'Its last progress message: "compiling app"' in still_running[-1].content[0].text  # type: ignore[union-attr]


async def test_a_stateless_server_without_auth_waits_for_the_end_instead_of_answering_call_again(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    """Each request of a stateless server is its own session, so a repeat could not join: told to
    call again, a model would start the tool anew every time."""
    runs: list[str] = []
    extension = _answering(make_extension)
    async with serving_http(server_with(extension, _build(runs)), stateless_http=True) as url:
        async with streamable_http_client(url) as (read, write), ClientSession(
            read, write, read_timeout_seconds=DEADLINE
        ) as session:
            await session.initialize()
            result = await session.call_tool("build", {"target": "lib"})
        await _one_completed_run(extension)
    assert result.structured_content == {"target": "lib", "artifacts": 3} and not result.is_error
    assert runs == ["lib"]


async def test_the_typescript_sdks_call_tool_gets_a_long_typed_tools_result_by_calling_again_as_told(
    make_extension: Callable[..., TemporalTasksExtension], typescript_sdk: Path, tmp_path: Path
) -> None:
    runs: list[str] = []
    extension = _answering(make_extension)
    async with serving_http(server_with(extension, _build(runs))) as url:
        seen = await _typescript_call(typescript_sdk, tmp_path, url, "build", {"target": "site"}, CLIENT_TIMEOUT)
        await _one_completed_run(extension)
    assert "error" not in seen, seen
    assert seen["structured"] == {"target": "site", "artifacts": 3} and not seen["is_error"]
    assert runs == ["site"]
    assert len(seen["texts"]) >= 2 and "The tool build is still running" in seen["texts"][0]


async def test_a_silent_durable_call_keeps_a_request_with_a_progress_token_alive(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    extension = make_extension(sync_calls="workflow", sync_call_keepalive=timedelta(seconds=KEEPALIVE))
    server = server_with(extension)
    server.tool(silent, task=True)
    received: list[tuple[float, float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((time.monotonic(), progress, message))

    async with serving_http(server) as url:
        async with streamable_http_client(url) as (read, write), ClientSession(
            read, write, read_timeout_seconds=DEADLINE
        ) as session:
            await session.initialize()
            started = time.monotonic()
            result = await session.call_tool("silent", {"seconds": SILENT_SECONDS}, progress_callback=on_progress)
            ended = time.monotonic()
    assert result.content[0].text == "done quietly"  # type: ignore[union-attr]
    moments = [started, *(at for at, _, _ in received), ended]
    gaps = [later - earlier for earlier, later in zip(moments, moments[1:], strict=False)]
    assert len(received) >= SILENT_SECONDS // (KEEPALIVE + KEEPALIVE_SLACK), received
    assert max(gaps) <= KEEPALIVE + KEEPALIVE_SLACK, gaps
    values = [progress for _, progress, _ in received]
    assert values == sorted(set(values)), values  # each above the last
    assert {message for _, _, message in received} == {"still running"}


async def test_the_typescript_sdk_resetting_its_timeout_on_progress_waits_out_a_silent_tool(
    make_extension: Callable[..., TemporalTasksExtension], typescript_sdk: Path, tmp_path: Path
) -> None:
    extension = make_extension(sync_calls="workflow", sync_call_keepalive=timedelta(seconds=KEEPALIVE))
    server = server_with(extension)
    server.tool(silent, task=True)
    async with serving_http(server) as url:
        seen = await _typescript_call(
            typescript_sdk, tmp_path, url, "silent", {"seconds": SILENT_SECONDS}, KEEPALIVE + KEEPALIVE_SLACK, "reset"
        )
    assert "error" not in seen, seen
    assert seen["texts"] == ["done quietly"]
    assert len(seen["progress"]) >= SILENT_SECONDS // (KEEPALIVE + KEEPALIVE_SLACK)


def test_a_deadline_on_a_tool_that_is_not_rejoinable_is_refused() -> None:
    with pytest.raises(ValueError, match="add rejoin=True"):
        execution_policy(sync_call_answer_after=timedelta(seconds=30))
    with pytest.raises(ValueError, match="zero or more"):
        execution_policy(rejoin=True, sync_call_answer_after=timedelta(seconds=-1))


async def _typescript_call(
    typescript_sdk: Path, folder: Path, url: str, tool: str, arguments: dict[str, Any], timeout: float, *mode: str
) -> dict[str, Any]:
    """Run `call_again_client.mjs` once against `url` with a request timeout of `timeout` seconds; its report."""
    report = folder / "report.json"
    command = [*node_script(typescript_sdk, Path(__file__).with_name("call_again_client.mjs"))]
    command += [url, str(report), tool, json.dumps(arguments), str(int(timeout * 1000)), *mode]
    with anyio.fail_after(DEADLINE):
        finished = await anyio.run_process(command, check=False)
    assert finished.returncode == 0, finished.stderr.decode()
    return json.loads(report.read_text())
