"""A cancel closes any task, and every age a server or worker computes is on Temporal's clock.

A server whose clock runs ahead of or behind Temporal's behaves as an in-sync one: its cancel
waits for a restarting worker instead of terminating, a closed task reads until its TTL ends
and not after. The local clock is shifted where the package reads it (every `datetime` of
ours), so a rule that still read it would act on the shifted time. A cancel closes a task
whose workflow task fails on every attempt (ended in Temporal with a reason an operator
reads), and a cancel of an expired task answers as a read does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, InputRequiredResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._stall import STALL_GRACE
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.devserver._server import DevServer
from fastmcp_temporal.server._stalled import CANCELLED_REASON
from helpers.cli import listed
from helpers.servers import server_with, square
from helpers.temporal import task_handle, workflow_closed
from helpers.waits import DEADLINE, finished, status_becomes
from helpers.wire import ask, tasks_cancel, tasks_get

pytestmark = pytest.mark.anyio

KEY = "a-test-key-that-is-long-enough-for-fernet"
OTHER_KEY = "another-test-key-that-is-long-enough-for-fernet"


def shift_local_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Make every `datetime.now()` of the package read `seconds` off (a server clock ahead or behind)."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(seconds=seconds)

    for name, module in list(sys.modules.items()):
        if name.startswith("fastmcp_temporal") and getattr(module, "datetime", None) is datetime:
            monkeypatch.setattr(module, "datetime", Shifted)


async def test_a_process_reads_temporals_clock_within_milliseconds(temporal_server: DevServer) -> None:
    clock = TemporalClock()
    before = datetime.now(timezone.utc)  # the dev server runs on this machine's clock
    await clock.read_once(await TemporalClient.connect(temporal_server.address))
    measured, after = clock.now(), datetime.now(timezone.utc)
    assert before - timedelta(milliseconds=5) <= measured <= after + timedelta(milliseconds=5)


async def asks(ctx: Context) -> str | InputRequiredResult:
    return ask("q")


async def cancel_requested(temporal: TemporalClient, task_id: str) -> None:
    """Wait until Temporal has recorded the task's cancel request."""
    handle = task_handle(temporal, task_id)
    with anyio.fail_after(DEADLINE):
        while not (await handle.describe()).raw_description.workflow_extended_info.cancel_requested:
            await anyio.sleep(0.02)


async def read_not_found(client: Client, task_id: str) -> MCPError:
    """Read the task until a read answers an error (its TTL has ended); that error."""
    with anyio.fail_after(DEADLINE):
        while True:
            try:
                await tasks_get(client, task_id)
            except MCPError as exc:
                return exc
            await anyio.sleep(0.1)


@pytest.mark.parametrize("skew", [10, 60])
async def test_a_cancel_during_a_worker_restart_waits_for_the_worker_on_a_clock_ahead(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer,
    monkeypatch: pytest.MonkeyPatch, skew: int
) -> None:
    temporal = await TemporalClient.connect(temporal_server.address)
    api = server_with(make_extension(worker=False))
    api.tool(asks, task=True)

    def worker() -> Client:
        server = server_with(make_extension())
        server.tool(asks, task=True)
        return Client(server)

    async with Client(api) as client:
        async with worker():
            task = await call_tool_task(client, "asks")
            await status_becomes(task, "input_required")
        shift_local_clock(monkeypatch, skew)
        cancelled = asyncio.ensure_future(tasks_cancel(client, task.task_id))
        await cancel_requested(temporal, task.task_id)
        async with worker():  # back within the grace: the worker, not the server, closes the task
            with anyio.fail_after(DEADLINE):
                await cancelled
            await workflow_closed(temporal, task.task_id)
        assert (await task_handle(temporal, task.task_id).describe()).status == WorkflowExecutionStatus.CANCELED
        assert (await tasks_get(client, task.task_id)).status == "cancelled"


@pytest.mark.parametrize("skew", [60, -60])
async def test_a_closed_task_reads_until_its_ttl_ends_and_not_after_on_a_skewed_clock(
    make_extension: Callable[..., TemporalTasksExtension], monkeypatch: pytest.MonkeyPatch, skew: int
) -> None:
    ttl = timedelta(seconds=3)
    mcp = server_with(make_extension(task_ttl=ttl))
    mcp.tool(square, task=True)
    shift_local_clock(monkeypatch, skew)
    async with Client(mcp) as client:
        task = await call_tool_task(client, "square", {"n": 3})
        assert (await finished(task)).status == "completed"
        assert (await tasks_get(client, task.task_id)).status == "completed"  # its TTL has 3 s to run
        expired = await read_not_found(client, task.task_id)  # after Temporal's 3 s, not the shifted clock's
        assert expired.error.code == INVALID_PARAMS and "not found" in expired.error.message


async def test_a_cancel_of_an_expired_task_answers_not_found_as_a_read_does(
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    mcp = server_with(make_extension(task_ttl=timedelta(seconds=1)))
    mcp.tool(asks, task=True)
    async with Client(mcp) as client:
        task = await call_tool_task(client, "asks")
        await status_becomes(task, "input_required")
        read = await read_not_found(client, task.task_id)  # parked past its TTL: the workflow ends it
        with pytest.raises(MCPError) as cancel:
            await tasks_cancel(client, task.task_id)
        assert (cancel.value.error.code, cancel.value.error.message) == (read.error.code, read.error.message)
        assert read.error.code == INVALID_PARAMS


SHIFTED_CLI = """
import datetime, sys
from fastmcp_temporal.cli._main import main

class Shifted(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.now(tz) + datetime.timedelta(seconds=float(sys.argv[1]))

for name, module in list(sys.modules.items()):
    if name.startswith("fastmcp_temporal") and getattr(module, "datetime", None) is datetime.datetime:
        module.datetime = Shifted
main(sys.argv[2:])
"""


async def shifted_cli(temporal_server: DevServer, skew: float, *args: str) -> tuple[int, str, str]:
    """`fastmcp-temporal tasks ARGS` in a fresh process whose local clock reads `skew` seconds off."""
    environment = {**os.environ, "FASTMCP_TEMPORAL_ADDRESS": temporal_server.address}
    command = [sys.executable, "-c", SHIFTED_CLI, str(skew), "tasks", *args]
    done = await anyio.run_process(command, env=environment, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_the_cli_ages_a_task_waiting_for_a_restarting_worker_on_temporals_clock(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer
) -> None:
    tool = f"asks_{uuid.uuid4().hex[:8]}"
    api = server_with(make_extension(worker=False))  # no worker yet: its workflow task waits for one
    api.tool(asks, name=tool, task=True)
    async with Client(api) as client:
        created = time.monotonic()
        task = await call_tool_task(client, tool)
        await listed(temporal_server, "--tool", tool, until=bool)
        code, out, err = await shifted_cli(temporal_server, 60, "list", "--json", "--tool", tool)
        assert code == 0, err
        (row,) = json.loads(out)
        assert row["taskId"] == task.task_id and row["durationSeconds"] <= time.monotonic() - created

        await listed(temporal_server, "--stuck", "--tool", tool, until=bool)  # waited the grace
        code, out, err = await shifted_cli(temporal_server, 60, "list", "--stuck", "--json", "--tool", tool)
        assert code == 0, err
        (row,) = json.loads(out)
        waited = re.search(r"waited (\d+) s", row["reason"])
        rounded = 0.5  # the reason says whole seconds
        assert waited is not None and int(waited[1]) <= time.monotonic() - created + rounded, row["reason"]
        await tasks_cancel(client, task.task_id)


async def test_a_cancel_closes_a_task_whose_workflow_task_fails_on_every_attempt(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer
) -> None:
    temporal = await TemporalClient.connect(temporal_server.address)
    api = server_with(make_extension(encryption_key=KEY, worker=False))
    wrong_key_worker = server_with(make_extension(encryption_key=OTHER_KEY))  # fails every workflow task
    for server in (api, wrong_key_worker):
        server.tool(asks, task=True)
    async with Client(api) as client, Client(wrong_key_worker):
        task = await call_tool_task(client, "asks")
        handle = task_handle(temporal, task.task_id)
        with anyio.fail_after(DEADLINE):
            while (await handle.describe()).raw_description.pending_workflow_task.attempt < 2:
                await anyio.sleep(0.05)
        with anyio.fail_after(STALL_GRACE.total_seconds() + 5):  # the stated time, and some slack
            await tasks_cancel(client, task.task_id)
            await workflow_closed(temporal, task.task_id)
        described = await handle.describe()
        assert described.status == WorkflowExecutionStatus.TERMINATED
        terminated = [event async for event in handle.fetch_history_events()][-1]
        assert terminated.workflow_execution_terminated_event_attributes.reason == CANCELLED_REASON
        assert (await tasks_get(client, task.task_id)).status == "cancelled"


async def test_a_worker_whose_clock_runs_ahead_runs_its_legs_as_an_in_sync_one(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A leg ages its attempt on Temporal's clock: a worker 60 s ahead does not take a just-started
    attempt for one Temporal gave up on (which would deliver its outcome twice, by signal too)."""
    async def short() -> str:
        await asyncio.sleep(1.5)
        return "done"

    shift_local_clock(monkeypatch, 60)
    server = server_with(make_extension())
    server.tool(short, task=True)
    temporal = await TemporalClient.connect(temporal_server.address)
    caplog.set_level(logging.WARNING, logger="fastmcp_temporal")
    async with Client(server) as client:
        task = await call_tool_task(client, "short")
        assert (await finished(task)).status == "completed"
    history = await task_handle(temporal, task.task_id).fetch_history()
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    completed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
    assert (signals, len(completed)) == ([], 1), "the leg took its attempt for one Temporal gave up on"
    assert not [r for r in caplog.records if "gave up on the attempt" in r.getMessage()]
