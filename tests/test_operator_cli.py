"""`fastmcp-temporal tasks` run as a subprocess against the session's dev server.

An operator lists tasks by tool, status and scope; shows a task of any scope by its id
alone (legs, input requests, result, UI link); cancels one with `tasks/cancel`'s
semantics and terminates another, which the MCP wire then reports; an unknown id is a
clear error with exit code 1; an encrypted task's result is readable only with
the key (alone or in a rotated key list); `list --stuck` shows a task no worker can decrypt, with the reason, and not
a healthy one; `list` tells durable synchronous calls from tasks (`kind`, `--kind`); a
negative limit is refused by name; and `show` prints caller and tool text as written (no
markup, no terminal escapes).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task
from mcp_types import ElicitRequest, InputRequiredResult

from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG
from helpers.cli import cli, listed
from helpers.servers import NoTasksClient, http_client, server_with, serving_http, square, verifier
from helpers.temporal import task_handle
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import accept, question, tasks_update

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
OTHER_KEY = "another-test-key-that-is-long-enough-for-fernet"
QUESTION = "Which region, operator?"


def two_servers(extension_for: Callable[..., Any], suffix: str) -> tuple[FastMCP, FastMCP]:
    """One server behind bearer auth (running the worker) and one anonymous, on one queue."""
    made = []
    for extension, auth in ((extension_for(), verifier()), (extension_for(worker=False), None)):
        mcp = server_with(extension, auth=auth)
        mcp.tool(square, name=f"square_{suffix}", task=True)
        mcp.tool(ask, name=f"ask_{suffix}", task=True)
        mcp.tool(hold, name=f"hold_{suffix}", task=True)
        made.append(mcp)
    return made[0], made[1]


async def ask(ctx: Context) -> str | InputRequiredResult:
    return InputRequiredResult(result_type="input_required", input_requests={"region": question(QUESTION)})


async def hold() -> str:
    await anyio.sleep(3600)
    return "never"


async def test_operators_list_show_cancel_and_terminate_tasks_of_any_scope(
    make_extension, temporal_server: DevServer
) -> None:
    suffix = uuid.uuid4().hex[:8]
    square_tool, ask_tool, hold_tool = f"square_{suffix}", f"ask_{suffix}", f"hold_{suffix}"
    authed, anonymous = two_servers(make_extension, suffix)
    async with serving_http(authed) as url, http_client(url, "token-a") as alice, Client(anonymous) as anon:
        scoped = await call_tool_task(alice, square_tool, {"n": 7})
        await status_becomes(scoped, "completed")
        mine = await call_tool_task(anon, square_tool, {"n": 3})
        await status_becomes(mine, "completed")
        parked = await call_tool_task(anon, ask_tool)
        await status_becomes(parked, "input_required")
        to_cancel = await call_tool_task(anon, hold_tool)
        to_terminate = await call_tool_task(anon, hold_tool)

        # list: by tool, then narrowed by scope, status and limit
        rows = await listed(temporal_server, "--tool", square_tool, until=lambda rows: len(rows) == 2)
        assert {row["taskId"] for row in rows} == {scoped.task_id, mine.task_id}
        assert {row["status"] for row in rows} == {"completed"}
        alice_scope = next(row["scope"] for row in rows if row["taskId"] == scoped.task_id)
        assert alice_scope != ANONYMOUS_SCOPE_TAG and "client-a" not in alice_scope
        by_scope = await listed(
            temporal_server, "--tool", square_tool, "--scope", alice_scope, until=lambda rows: len(rows) == 1
        )
        assert [row["taskId"] for row in by_scope] == [scoped.task_id]
        waiting = await listed(
            temporal_server, "--status", "input_required", "--tool", ask_tool, until=lambda rows: bool(rows)
        )
        assert [(row["taskId"], row["tool"]) for row in waiting] == [(parked.task_id, ask_tool)]
        limited = await listed(
            temporal_server, "--tool", square_tool, "--limit", "1", until=lambda rows: True
        )
        assert len(limited) == 1

        code, table, _ = await cli(temporal_server, "list", "--tool", square_tool)
        assert code == 0 and scoped.task_id in table and mine.task_id in table and "completed" in table

        # show: a task of another scope, found by its id alone
        code, out, err = await cli(temporal_server, "show", "--json", "--", scoped.task_id)
        assert code == 0, err
        shown = json.loads(out)
        assert (shown["status"], shown["tool"], shown["scope"], shown["legs"]) == (
            "completed",
            square_tool,
            alice_scope,
            1,
        )
        assert shown["result"]["structuredContent"] == {"result": 49}
        assert shown["uiUrl"].endswith(f"{scoped.task_id}/{shown['runId']}/history")
        code, out, _ = await cli(temporal_server, "show", "--json", "--", parked.task_id)
        shown = json.loads(out)
        assert shown["status"] == "input_required"
        assert [(r["key"], r["request"]["params"]["message"]) for r in shown["inputRequests"]] == [
            ("region", QUESTION)
        ]
        code, table, err = await cli(temporal_server, "show", "--", parked.task_id)
        assert code == 0 and QUESTION in table, err

        # cancel and terminate: the MCP wire reports what the operator did
        code, out, err = await cli(temporal_server, "cancel", "--", to_cancel.task_id)
        assert code == 0, err
        await status_becomes(to_cancel, "cancelled")
        code, out, err = await cli(
            temporal_server, "terminate", "--reason", "stuck on a lock", "--", to_terminate.task_id
        )
        assert code == 0, err
        failed = await status_becomes(to_terminate, "failed")
        assert "stuck on a lock" in str(failed.status_message)
        await listed(
            temporal_server,
            "--tool",
            hold_tool,
            "--status",
            "cancelled",
            until=lambda rows: [row["taskId"] for row in rows] == [to_cancel.task_id],
        )
        await listed(
            temporal_server,
            "--tool",
            hold_tool,
            "--status",
            "failed",
            until=lambda rows: [row["taskId"] for row in rows] == [to_terminate.task_id],
        )
        code, out, _ = await cli(temporal_server, "show", "--json", "--", to_terminate.task_id)
        assert "stuck on a lock" in json.loads(out)["error"]["message"]

    code, out, err = await cli(temporal_server, "show", "no-such-task")
    assert code == 1 and out == ""
    assert "No task 'no-such-task'" in err and "--scope" in err


async def test_show_decodes_an_encrypted_task_only_with_the_key(
    make_extension, temporal_server: DevServer
) -> None:
    mcp = FastMCP("ops-encrypted")
    mcp.add_extension(make_extension(encryption_key=KEY))
    mcp.tool(square, task=True)
    async with Client(mcp) as client:
        task = await call_tool_task(client, "square", {"n": 12})
        await status_becomes(task, "completed")

    code, out, err = await cli(temporal_server, "show", "--json", "--", task.task_id)
    assert code == 0, err
    locked = json.loads(out)
    assert (locked["readable"], locked["result"]) == (False, None)
    for keys in (KEY, f"{OTHER_KEY},{KEY}"):  # the key alone, or after a rotation to OTHER_KEY
        code, out, err = await cli(temporal_server, "show", "--json", "--encryption-key", keys, "--", task.task_id)
        assert code == 0, err
        unlocked = json.loads(out)
        assert (unlocked["readable"], unlocked["result"]["structuredContent"]) == (True, {"result": 144})


async def test_show_counts_the_legs_of_every_run_of_a_continued_task(
    make_extension, temporal_server: DevServer
) -> None:
    rounds = 4
    mcp = FastMCP("ops-rounds")
    extension = make_extension(history_events_limit=20)
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def survey(ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0) + (ctx.input_responses is not None)
        if done == rounds:
            return f"answered {done}"
        request = ElicitRequest(
            method="elicitation/create",
            params={
                "mode": "form",
                "message": f"q{done}",
                "requestedSchema": {"type": "object", "properties": {}},
            },
        )
        return InputRequiredResult(
            result_type="input_required", input_requests={f"q{done}": request}, request_state=str(done)
        )

    async with Client(mcp) as client:
        task = await call_tool_task(client, "survey")
        for _ in range(rounds):
            (key,) = (await status_becomes(task, "input_required")).input_requests
            await tasks_update(client, task.task_id, {key: {"action": "accept", "content": {}}})
            with anyio.fail_after(DEADLINE):
                while key in ((await task.status()).input_requests or {}):
                    await anyio.sleep(0.05)
        await status_becomes(task, "completed")
        handle = task_handle(extension, task.task_id)
        description = await handle.describe()
        execution = description.raw_description.workflow_execution_info
    assert execution.first_run_id != execution.execution.run_id  # it did continue as new
    # the last run still skips the success upsert: the task's input carried the choice across
    assert description.search_attributes["McpTaskStatus"] == ["working"]

    code, out, err = await cli(temporal_server, "show", "--json", "--", task.task_id)
    assert code == 0, err
    assert (json.loads(out)["legs"], json.loads(out)["status"]) == (rounds + 1, "completed")


async def test_show_lists_the_open_asks_a_run_took_over_inside_a_round(
    make_extension, temporal_server: DevServer
) -> None:
    """Those asks are in the run's memo, not in its events."""
    mcp = FastMCP("ops-open-round")
    extension = make_extension(history_events_limit=20)
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def trio(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            requests = {key: question(key) for key in ("a", "b", "c", "d", "e")}
            return InputRequiredResult(result_type="input_required", input_requests=requests)
        return "done"

    async with Client(mcp) as client:
        task = await call_tool_task(client, "trio")
        requests = (await status_becomes(task, "input_required")).input_requests or {}
        by_question = {request["params"]["message"]: key for key, request in requests.items()}
        for asked in ("a", "b", "c"):  # its history passes 20 events: it continues as new inside the round
            answer = {by_question[asked]: {"action": "accept", "content": {}}}
            await tasks_update(client, task.task_id, answer)
        handle = task_handle(extension, task.task_id)
        execution = (await handle.describe()).raw_description.workflow_execution_info
        code, out, err = await cli(temporal_server, "show", "--json", "--", task.task_id)
        await task.cancel()
    assert execution.first_run_id != execution.execution.run_id
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["status"], shown["legs"], shown["readable"]) == ("input_required", 1, True)
    assert by_question["e"] in [request["key"] for request in shown["inputRequests"]]
    assert by_question["a"] not in [request["key"] for request in shown["inputRequests"]]


async def test_list_stuck_shows_a_task_no_worker_can_decrypt_with_the_reason(
    make_extension, temporal_server: DevServer, task_queue: str
) -> None:
    tool = f"hold_{uuid.uuid4().hex[:8]}"
    api = server_with(make_extension(encryption_key=KEY, worker=False))
    wrong_key_worker = server_with(make_extension(encryption_key=OTHER_KEY))
    healthy = server_with(make_extension(task_queue=f"{task_queue}-healthy"))
    for server in (api, wrong_key_worker, healthy):
        server.tool(hold, name=tool, task=True)
    async with Client(api) as client, Client(wrong_key_worker), Client(healthy) as healthy_client:
        stuck = await call_tool_task(client, tool)
        moving = await call_tool_task(healthy_client, tool)
        await listed(temporal_server, "--tool", tool, "--status", "working", until=lambda rows: len(rows) > 1)

        (row,) = await listed(temporal_server, "--stuck", "--tool", tool, until=lambda rows: bool(rows))
        assert (row["taskId"], row["status"]) == (stuck.task_id, "working")
        assert row["workflowTaskAttempt"] >= 2
        assert "could not decrypt" in row["reason"] and "FASTMCP_TEMPORAL_ENCRYPTION_KEY" in row["reason"]
        code, table, err = await cli(temporal_server, "list", "--stuck", "--tool", tool)
        assert code == 0, err
        assert stuck.task_id in table and moving.task_id not in table and "ATTEMPT" in table

        for task_id in (stuck.task_id, moving.task_id):
            code, _, err = await cli(temporal_server, "terminate", "--reason", "test over", "--", task_id)
            assert code == 0, err
    await listed(temporal_server, "--tool", tool, "--status", "failed", until=lambda rows: len(rows) == 2)
    await listed(temporal_server, "--tool", tool, "--status", "working", until=lambda rows: rows == [])


async def test_list_tells_durable_synchronous_calls_from_tasks(make_extension, temporal_server: DevServer) -> None:
    tool = f"square_{uuid.uuid4().hex[:8]}"
    server = server_with(make_extension(sync_calls="workflow"))
    server.tool(square, name=tool, task=True)
    async with Client(server) as opted_in, NoTasksClient(server) as plain:
        task = await call_tool_task(opted_in, tool, {"n": 2})
        await status_becomes(task, "completed")
        assert (await plain.call_tool(tool, {"n": 3})).data == 9

    rows = await listed(temporal_server, "--tool", tool, until=lambda rows: len(rows) == 2)
    kinds = {row["kind"]: row for row in rows}
    assert kinds["task"]["taskId"] == task.task_id and kinds["call"]["workflowId"].startswith("mcp-call/")
    for kind in ("task", "call"):
        only = await listed(temporal_server, "--tool", tool, "--kind", kind, until=lambda rows: True)
        assert [row["workflowId"] for row in only] == [kinds[kind]["workflowId"]]
    code, table, _ = await cli(temporal_server, "list", "--tool", tool)
    assert code == 0 and "KIND" in table and "call" in table
    code, out, err = await cli(temporal_server, "show", "--json", "--", kinds["call"]["workflowId"])
    assert code == 0, err
    assert (json.loads(out)["kind"], json.loads(out)["status"]) == ("call", "completed")


@pytest.mark.parametrize("option", ["--limit", "--scan-limit"])
async def test_negative_limits_are_refused_by_name(temporal_server: DevServer, option: str) -> None:
    code, out, err = await cli(temporal_server, "list", option, "-1")
    assert code == 2 and out == ""
    assert f"argument {option}: must be 1 or more, got -1" in err


async def test_show_prints_caller_and_tool_text_as_written(make_extension, temporal_server: DevServer) -> None:
    tool = f"markup_{uuid.uuid4().hex[:8]}"
    asked, answer, failure = "[red]Which[/red] :warning: region?", "[/bold] east", "expected list[/int]"
    server = server_with(make_extension())

    @server.tool(name=tool, task=True)
    async def markup(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            requests = {"region": question(f"{asked}\x1b[2J")}
            return InputRequiredResult(result_type="input_required", input_requests=requests)
        raise ToolError(failure)

    async with Client(server) as client:
        task = await call_tool_task(client, tool)
        (key,) = (await status_becomes(task, "input_required")).input_requests
        await tasks_update(client, task.task_id, {key: accept(answer)})
        assert (await status_becomes(task, "completed")).result["isError"]

    code, table, err = await cli(temporal_server, "show", "--", task.task_id)
    assert code == 0, err
    assert f"{asked}\\x1b[2J" in table and answer in table and failure in table  # no escape reaches a terminal
