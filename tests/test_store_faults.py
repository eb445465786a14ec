"""Faults outside the tool never wedge a task: a lost payload, a malformed signal, a race, a big history.

Most tests runs a task whose arguments, answer or result go to a real store (a folder,
or a standalone moto S3 server), damages what the store holds for it (deletes,
truncates or alters it, or takes the whole store away), and drives the task on over
the MCP wire. The worker keeps no workflow in its cache, so every step replays the
history and reads the store again, as after a worker restart. Each test ends by
finding no RUNNING workflow on its queue, and counts the tool's real runs.
"""

from __future__ import annotations

import logging
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension
from fastmcp_temporal.connection._store_marker import MARKER_NAME, StoreMarker
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._stalled import CANCELLED_REASON
from fastmcp_temporal.workflows.models import (
    LEG_OUTCOME_SIGNAL,
    SUBMIT_INPUT_SIGNAL,
    LateLegOutcome,
    LegOutcome,
)
from helpers.cli import fastmcp_temporal_cli, listed
from helpers.stores import FolderStore, S3Store, Store
from helpers.temporal import anonymous_workflow_id, no_workflow_running, task_handle, workflow_closed
from helpers.waits import DEADLINE, eventually, polled_until, status_becomes
from helpers.wire import accept, ask, tasks_cancel, tasks_get, tasks_update

pytestmark = pytest.mark.anyio

BIG = 300 * 1024  # over the 256 KiB at which payloads go to the store
LOST = "no longer in the payload store"


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "folder":
        folder = tmp_path / "payloads"
        folder.mkdir(mode=0o700)
        yield FolderStore(folder)
    else:
        yield S3Store(request.getfixturevalue("s3_endpoint"))


def _server(extension: TemporalTasksExtension, runs: list[str]) -> FastMCP:
    mcp = FastMCP("store-faults")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def two_rounds(blob: str, ctx: Context, rounds: int = 2) -> str | InputRequiredResult:
        """Asks `rounds` times (twice by default); its arguments are `blob`."""
        runs.append("two_rounds")
        round_ = int(ctx.request_state or 0)
        if round_ < rounds:
            return ask(f"answer{round_}", state=str(round_ + 1))
        return "both answered" if rounds == 2 else f"{len(blob)} after {rounds} rounds"

    @mcp.tool(task=True)
    async def produce(size: int) -> str:
        runs.append("produce")
        return "r" * size

    return mcp


def _extension(make_extension: Callable[..., TemporalTasksExtension], store: Store, **options: Any):
    return make_extension(payload_store=store.setting, max_cached_workflows=0, **options)


def _damage_new(store: Store, before: set[str], how: str) -> None:
    new = store.keys() - before
    assert new, "the step stored nothing, so there is nothing to damage"
    for key in new:
        store.damage(key, how)


async def _answer(client: Client, task: Any, value: str) -> None:
    parked = await task.wait(state="input_required", timeout=30)
    (key,) = parked.input_requests
    await tasks_update(client, task.task_id, {key: accept(value)})


HOW = ["delete", "truncate", "tamper"]


@pytest.mark.parametrize("how", HOW)
async def test_lost_arguments_end_the_task_on_its_next_step(make_extension, store: Store, how: str) -> None:
    extension, runs = _extension(make_extension, store), []
    before = store.keys()
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * BIG})
        await task.wait(state="input_required", timeout=30)
        _damage_new(store, before, how)
        await _answer(client, task, "small")
        failed = await status_becomes(task, "failed")
        assert LOST in (failed.status_message or "")
        await no_workflow_running(extension)
    assert runs == ["two_rounds"]


@pytest.mark.parametrize("how", HOW)
async def test_a_lost_answer_ends_the_task_on_its_next_step(make_extension, store: Store, how: str) -> None:
    extension, runs = _extension(make_extension, store), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "small"})
        await task.wait(state="input_required", timeout=30)
        before = store.keys()
        await _answer(client, task, "b" * BIG)
        await status_becomes(task, "input_required", until=lambda r: any(":2." in k for k in r.input_requests or {}))
        _damage_new(store, before, how)
        await _answer(client, task, "small")
        failed = await status_becomes(task, "failed")
        assert LOST in (failed.status_message or "")
        await no_workflow_running(extension)
    assert runs == ["two_rounds", "two_rounds"]


@pytest.mark.parametrize("how", HOW)
async def test_a_lost_result_is_named_by_tasks_get(make_extension, store: Store, how: str) -> None:
    extension, runs = _extension(make_extension, store), []
    before = store.keys()
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "produce", {"size": BIG})
        await _closed(extension, task.task_id)
        _damage_new(store, before, how)
        with pytest.raises(MCPError) as lost:
            await tasks_get(client, task.task_id)
        await no_workflow_running(extension)
    assert lost.value.error.code == mcp_types.INTERNAL_ERROR
    assert LOST in lost.value.error.message and "FASTMCP_TEMPORAL_PAYLOAD_STORE" in lost.value.error.message
    assert runs == ["produce"]


@pytest.mark.parametrize("end", ["cancel", "ttl"])
async def test_a_task_whose_arguments_are_lost_still_closes_on_cancel_and_ttl(
    make_extension, tmp_path: Path, end: str
) -> None:
    store = FolderStore(tmp_path)
    extension, runs = _extension(make_extension, store, task_ttl=timedelta(seconds=3)), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * BIG})
        await task.wait(state="input_required", timeout=30)
        _damage_new(store, set(), "delete")
        if end == "cancel":
            await task.cancel()
            assert (await tasks_get(client, task.task_id)).status == "cancelled"
        status = await _closed(extension, task.task_id)
        assert status != WorkflowExecutionStatus.RUNNING
        expected = "cancelled" if end == "cancel" else "failed"
        assert (await tasks_get(client, task.task_id)).status == expected
        await no_workflow_running(extension)
    assert runs == ["two_rounds"]


async def _closed(extension: TemporalTasksExtension, task_id: str) -> WorkflowExecutionStatus | None:
    await workflow_closed(extension, task_id)
    handle = task_handle(extension, task_id)
    return (await handle.describe()).status


async def test_a_cancel_arriving_with_a_late_leg_outcome_wins(make_extension, temporal_server, task_queue) -> None:
    """A late leg outcome and the task's cancel in one workflow task: the task ends cancelled."""
    started: list[str] = []

    def definition(extension: TemporalTasksExtension) -> FastMCP:
        mcp = FastMCP("late-and-cancelled")
        mcp.add_extension(extension)

        @mcp.tool(task=True)
        async def slow() -> str:
            started.append("slow")
            await anyio.sleep(3600)
            return "never"

        return mcp

    api_extension = make_extension(worker=False)
    api = definition(api_extension)
    hosted = definition(make_extension())

    async def worker_client() -> TemporalClient:
        return await TemporalClient.connect(temporal_server.address, plugins=[McpTasksPlugin(hosted)])

    async with Client(api) as client:
        async with Worker(await worker_client(), task_queue=task_queue):
            task = await call_tool_task(client, "slow")
            await eventually(lambda: started == ["slow"])
        # No worker now: the signal and the cancel reach the workflow in one workflow task.
        handle = task_handle(api_extension, task.task_id)
        late = LegOutcome(result={"content": [{"type": "text", "text": "late"}], "isError": False})
        await handle.signal(LEG_OUTCOME_SIGNAL, LateLegOutcome(1, late))
        # Temporal's own cancel: `tasks/cancel` would end a task no worker runs from the server side.
        await handle.cancel()
        async with Worker(await worker_client(), task_queue=task_queue):
            with anyio.fail_after(30):
                while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await anyio.sleep(0.05)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        assert (await tasks_get(client, task.task_id)).status == "cancelled"


async def test_a_malformed_answer_signal_is_ignored_and_the_task_goes_on(make_extension, tmp_path: Path) -> None:
    """An operator's (or a future client's) signal that is not `{answers: {key: answer}}`."""
    extension, runs = make_extension(), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "small"})
        parked = await task.wait(state="input_required", timeout=30)
        handle = task_handle(extension, task.task_id)
        for malformed in ({"answers": "nonsense"}, {"answers": {next(iter(parked.input_requests)): "no"}}):
            await handle.signal(SUBMIT_INPUT_SIGNAL, malformed)
        await _answer(client, task, "first")
        await _answer(client, task, "second")
        assert (await task.result()).data == "both answered"
        await no_workflow_running(extension)
    assert runs == ["two_rounds"] * 3


async def test_many_rounds_with_big_arguments_continue_as_new_before_history_fills(make_extension) -> None:
    """Without a store every leg's input repeats the arguments: history grows by megabytes a round."""
    extension, runs = make_extension(payload_store="none"), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * (1400 * 1024), "rounds": 7})
        for _ in range(7):
            await _answer(client, task, "next")
        assert (await task.result()).data == f"{1400 * 1024} after 7 rounds"
        await no_workflow_running(extension)
        assert extension.client is not None
        wf_id = anonymous_workflow_id(task.task_id)
        runs_in_temporal = [w async for w in extension.client.list_workflows(f"WorkflowId = '{wf_id}'")]
    assert len(runs_in_temporal) >= 2
    assert runs == ["two_rounds"] * 8


async def test_an_answer_that_makes_the_next_leg_too_big_for_the_store_is_refused(
    make_extension, store: Store
) -> None:
    """700 KB of arguments and a 700 KB answer, each under a 1 MiB store limit, not together."""
    extension, runs = _extension(make_extension, store, stored_payload_limit=1024 * 1024), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * 700 * 1024})
        parked = await task.wait(state="input_required", timeout=30)
        (key,) = parked.input_requests
        with pytest.raises(MCPError) as refused:
            await tasks_update(client, task.task_id, {key: accept("b" * 700 * 1024)})
        assert refused.value.error.code == mcp_types.INVALID_PARAMS
        assert "1,048,576 bytes" in refused.value.error.message
        assert "STORED_PAYLOAD_LIMIT" in refused.value.error.message
        await _answer(client, task, "small")
        await _answer(client, task, "small")
        assert (await task.result()).data == "both answered"
        await no_workflow_running(extension)
    assert runs == ["two_rounds"] * 3


async def test_an_unreachable_store_at_tools_call_says_so(make_extension, s3_endpoint: str) -> None:
    extension, runs = make_extension(payload_store="s3://nowhere/tasks"), []
    S3Store(s3_endpoint)  # the moto server runs, but the bucket does not exist
    async with Client(_server(extension, runs)) as client:
        with pytest.raises(MCPError) as refused:
            await call_tool_task(client, "two_rounds", {"blob": "a" * BIG})
        await no_workflow_running(extension)
    assert refused.value.error.code == mcp_types.INTERNAL_ERROR
    assert "payload store (FASTMCP_TEMPORAL_PAYLOAD_STORE) failed" in refused.value.error.message
    assert runs == []


async def test_a_server_with_another_key_says_the_keys_differ(make_extension) -> None:
    writer = make_extension(encryption_key="the-key-the-task-was-written-with-0123")
    reader = make_extension(encryption_key="another-key-that-cannot-read-the-task-99", worker=False)
    async with Client(_server(writer, [])) as client:
        task = await call_tool_task(client, "produce", {"size": 10})
        await task.result()
        async with Client(_server(reader, [])) as other:
            for method in (tasks_get, lambda c, t: tasks_update(c, t, {}), tasks_cancel):
                with pytest.raises(MCPError) as refused:
                    await method(other, task.task_id)
                assert refused.value.error.code == mcp_types.INTERNAL_ERROR
                assert "another key" in refused.value.error.message
                assert "FASTMCP_TEMPORAL_ENCRYPTION_KEY" in refused.value.error.message


async def test_a_store_that_is_away_delays_the_task_and_loses_nothing(make_extension, tmp_path: Path) -> None:
    """The store's folder vanishes (an unmounted share) while a task is parked, then comes back."""
    folder = tmp_path / "payloads"
    folder.mkdir(mode=0o700)
    extension, runs = _extension(make_extension, FolderStore(folder)), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * BIG})
        await task.wait(state="input_required", timeout=30)
        away = folder.rename(tmp_path / "unmounted")
        await _answer(client, task, "first")  # the worker must replay, and cannot read the arguments
        handle = task_handle(extension, task.task_id)
        with anyio.fail_after(30):
            while (await handle.describe()).raw_description.pending_workflow_task.attempt < 2:
                await anyio.sleep(0.1)
        away.rename(folder)
        await _answer(client, task, "second")
        assert (await task.result()).data == "both answered"
        await no_workflow_running(extension)
    assert runs == ["two_rounds"] * 3


def _marker_of(store: Store) -> str:
    return f"default/{MARKER_NAME}" if isinstance(store, FolderStore) else f"v0/ns/default/{MARKER_NAME}"


def _another_clusters_task(store: Store) -> str:
    """Where another cluster's store keeps a payload of a task of its own, in namespace `default`."""
    task = "mcp-task%2Fanon%2Fanother-clusters-task"
    if isinstance(store, FolderStore):
        return f"default/{task}/{'0' * 64}"
    return f"v0/ns/default/wt/McpTaskWorkflow/wi/{task}/ri/null/d/sha256/{'0' * 64}"


def _another_clusters_store(store: Store) -> None:
    """What a store of another Temporal cluster holds, with the same namespace name: its marker, a task."""
    marker = StoreMarker(str(uuid.uuid4()), "another-cluster", "default", False, "2026-01-01T00:00:00+00:00")
    store.put(_marker_of(store), marker.to_bytes())
    store.put(_another_clusters_task(store), b"another cluster's payload")


@pytest.mark.slow
@pytest.mark.parametrize("away", ["empty mount point", "another cluster's store"])
async def test_a_store_that_is_not_the_one_the_task_wrote_to_delays_it_and_loses_nothing(
    make_extension, temporal_server: DevServer, store: Store, away: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A parked task is answered while its store is away; the worker replays it, and must wait, not end it.

    The store's place holds nothing (a volume not mounted yet: the folder is there, empty;
    an emptied bucket), or another cluster's store; once the store is back the task completes.
    """
    caplog.set_level(logging.ERROR, logger="fastmcp_temporal")
    # a leg reads its 300 KB of arguments before it heartbeats: from moto that can take seconds
    extension, runs = _extension(make_extension, store, heartbeat_timeout=timedelta(seconds=30)), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * BIG, "rounds": 1})
        await task.wait(state="input_required", timeout=30)
        before = store.keys()
        back = store.take_away()
        if away == "another cluster's store":
            _another_clusters_store(store)
            code, _, refused = await fastmcp_temporal_cli(
                temporal_server, "payloads", "gc", "--payload-store", store.setting, "--grace", "0", "--delete"
            )
            assert code == 1
            assert "belongs to Temporal cluster 'another-cluster', namespace 'default'" in refused
            assert "nothing was removed" in refused
            assert store.keys() == {_key_of(store, _another_clusters_task(store))}
        await _answer(client, task, "first")  # the worker must replay, and cannot read the arguments
        handle = task_handle(extension, task.task_id)
        with anyio.fail_after(DEADLINE):
            while (described := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                if described.raw_description.pending_workflow_task.attempt >= 3:
                    break
                await anyio.sleep(0.1)
        assert described.status == WorkflowExecutionStatus.RUNNING
        assert (await tasks_get(client, task.task_id)).status == "working"
        said = [r.getMessage() for r in caplog.records if "The payload store" in r.getMessage()]
        assert len(said) == 1, said  # logged once, however often the workflow task is retried
        assert ("has no marker" if away == "empty mount point" else "another-cluster") in said[0]
        assert "FASTMCP_TEMPORAL_PAYLOAD_STORE" in said[0]
        back()
        assert store.keys() == before
        assert (await task.result()).data == f"{BIG} after 1 rounds"
        await no_workflow_running(extension)
    assert runs == ["two_rounds"] * 2


def _key_of(store: Store, name: str) -> str:
    """A name relative to the store as `Store.keys()` lists it."""
    return str(store.folder / name) if isinstance(store, FolderStore) else f"tasks/{name}"


@pytest.mark.slow
async def test_a_task_cancelled_while_its_store_is_wiped_closes(
    make_extension, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole store, its marker too, is gone under a parked task (an empty mount point): the
    workflow cannot replay, yet a cancel closes it, with a reason that names the store."""
    caplog.set_level(logging.ERROR, logger="fastmcp_temporal")
    extension, runs = _extension(make_extension, store, heartbeat_timeout=timedelta(seconds=30)), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "two_rounds", {"blob": "a" * BIG, "rounds": 1})
        await task.wait(state="input_required", timeout=30)
        store.take_away()
        await tasks_cancel(client, task.task_id)
        handle = task_handle(extension, task.task_id)
        await workflow_closed(extension, task.task_id)
        described = await handle.describe()
        assert described.status == WorkflowExecutionStatus.TERMINATED
        history = await handle.fetch_history()
        (ended,) = [e for e in history.events if e.HasField("workflow_execution_terminated_event_attributes")]
        reason = ended.workflow_execution_terminated_event_attributes.reason
        # the worker's reason, naming the store; a server that sees the workflow task failing may end it first
        assert ("payload store" in reason and "has no marker" in reason) or reason == CANCELLED_REASON, reason
        assert (await tasks_get(client, task.task_id)).status == "cancelled"
        await no_workflow_running(extension)
    assert runs == ["two_rounds"]


@pytest.mark.slow
async def test_a_leg_that_cannot_store_its_result_in_another_clusters_store_is_listed_stuck_with_the_cause(
    make_extension, temporal_server: DevServer, store: Store
) -> None:
    """Once the foreign marker goes, the leg marks the store as this cluster's and completes."""
    _another_clusters_store(store)
    await _blocked_leg_is_listed_stuck(
        make_extension, temporal_server, store, "belongs to Temporal cluster 'another-cluster'",
        unblock=lambda: store.remove(_marker_of(store)),
    )


@pytest.mark.slow
async def test_a_leg_that_cannot_store_its_result_in_a_read_only_folder_is_listed_stuck_with_the_cause(
    make_extension, temporal_server: DevServer, tmp_path: Path
) -> None:
    """The store folder is immutable (`chattr +i`: read-only even for root, as tests run here)."""
    folder = tmp_path / "payloads"
    folder.mkdir(mode=0o700)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False).returncode:
        pytest.skip("chattr +i is not available on this file system")
    try:
        await _blocked_leg_is_listed_stuck(
            make_extension, temporal_server, FolderStore(folder), "Operation not permitted",
            unblock=lambda: subprocess.run(["chattr", "-i", str(folder)], check=True),
        )
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


async def _blocked_leg_is_listed_stuck(
    make_extension, temporal_server: DevServer, store: Store, cause: str, unblock: Callable[[], object]
) -> None:
    """The leg waits for the store (its body ran once); `tasks/get` and `tasks list --stuck` say why,
    while Temporal shows its first attempt still running; once `unblock` runs, it completes."""
    extension, runs = _extension(make_extension, store), []
    async with Client(_server(extension, runs)) as client:
        task = await call_tool_task(client, "produce", {"size": BIG})
        said = await polled_until(
            lambda: tasks_get(client, task.task_id), "working", lambda got: cause in str(got.status_message)
        )
        assert "Waiting for the payload store while storing the tool's result" in str(said.status_message)
        workflow = anonymous_workflow_id(task.task_id)
        (row,) = await listed(
            temporal_server, "--stuck", "--tool", "produce", until=lambda rows: workflow in str(rows)
        )
        assert row["workflowId"] == workflow
        assert cause in row["reason"] and "FASTMCP_TEMPORAL_PAYLOAD_STORE" in row["fix"]
        described = await task_handle(extension, task.task_id).describe()
        assert described.status == WorkflowExecutionStatus.RUNNING
        (leg,) = described.raw_description.pending_activities
        assert leg.attempt == 1
        unblock()
        assert (await task.result()).data == "r" * BIG
        await no_workflow_running(extension)
    assert runs == ["produce"]
