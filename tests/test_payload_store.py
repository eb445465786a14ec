"""The payload store keeps each task's payloads separate, and only `payloads gc` removes them.

Two tasks with byte-identical results run against a folder store and a moto S3 store;
the first task's stored payloads are aged the way the README's old expiry advice (or
an S3 lifecycle rule) sees them, and the second task's result must still read intact,
with every payload of its history. The store itself is read to prove each task's
payloads sit under that task's own name. `payloads gc`, run as an operator runs it,
removes a task's payloads only once Temporal has deleted its workflow, and keeps those of
a task an operator reset, whose new run reads its arguments from them; a store folder
other users can open is refused at startup.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._store_marker import MARKER_NAME, StoreAwayError, StoreIdentity
from fastmcp_temporal.connection._stores import FolderStorageDriver
from fastmcp_temporal.connection._unreadable import LostPayloadsAsUnreadable, UnreadablePayloadConverter
from fastmcp_temporal.devserver import DevServer
from helpers.cli import fastmcp_temporal_cli
from helpers.servers import server_with
from helpers.temporal import anonymous_workflow_id, reset_workflow
from helpers.waits import DEADLINE, status_becomes
from helpers.wire import accept, question, tasks_get, tasks_update, text_of

pytestmark = pytest.mark.anyio

RESULT_SIZE = 540 * 1024
DAY = 24 * 3600
_LEG_HEARTBEAT = timedelta(seconds=30)  # a leg fetches its input from moto before it heartbeats


async def produce(size: int) -> str:
    """The same `size` characters for every task: results that are byte-identical in the store."""
    return "r" * size


def _encoded(workflow: str) -> str:
    """A workflow id as one path segment (what S3 keys and the folder store both use here)."""
    return quote(workflow, safe="")


class _Store(ABC):
    """One payload store as a test sees it: its objects, and an expiry rule acting on their age."""

    url: str
    kind: str

    @abstractmethod
    def names(self) -> set[str]:
        """Every stored object, by its name relative to the store."""

    @abstractmethod
    def age(self, names: set[str]) -> None:
        """Make `names` as old as a task's payloads are two days later."""

    @abstractmethod
    def expire(self) -> None:
        """Apply the documented age-based rule: remove what is older than a day."""

    @abstractmethod
    def task_prefix(self, workflow: str) -> str:
        """Where a task's payloads are named in this store."""

    @abstractmethod
    def add_shared(self, data: bytes) -> None:
        """Store `data` where versions before per-task names put every payload."""


class _FolderStore(_Store):
    kind = "folder"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = f"file://{folder}"

    def names(self) -> set[str]:
        """Every payload file: not the store's marker, which an age rule must spare (as the docs say)."""
        return {
            str(path.relative_to(self.folder))
            for path in self.folder.rglob("*")
            if path.is_file() and path.name != MARKER_NAME
        }

    def age(self, names: set[str]) -> None:
        two_days_ago = time.time() - 2 * DAY
        for name in names:
            os.utime(self.folder / name, (two_days_ago, two_days_ago))

    def expire(self) -> None:
        """`find FOLDER -type f -mtime +0 ! -name .fastmcp-temporal-store.json -delete`."""
        for name in self.names():
            if (self.folder / name).stat().st_mtime < time.time() - DAY:
                (self.folder / name).unlink()

    def task_prefix(self, workflow: str) -> str:
        return f"default/{_encoded(workflow).replace('.', '%2E')}/"

    def add_shared(self, data: bytes) -> None:
        (self.folder / hashlib.sha256(data).hexdigest()).write_bytes(data)


class _S3Store(_Store):
    """S3 cannot backdate an object: aging remembers its LastModified, and expiry removes it
    if it was not written since, which is what a lifecycle rule does once two days pass."""

    kind = "s3"

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.s3 = boto3.client("s3", endpoint_url=endpoint)
        self.s3.create_bucket(Bucket="tasks")
        self.url = "s3://tasks/mcp/payloads"
        self.aged: dict[str, object] = {}

    def _listed(self) -> dict[str, object]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket="tasks")
        return {
            item["Key"]: item["LastModified"]
            for page in pages
            for item in page.get("Contents", [])
            if not item["Key"].endswith(MARKER_NAME)  # a lifecycle rule on the `wt/` prefix spares it
        }

    def names(self) -> set[str]:
        return set(self._listed())

    def age(self, names: set[str]) -> None:
        listed = self._listed()
        self.aged = {name: listed[name] for name in names}

    def expire(self) -> None:
        for name, written in self._listed().items():
            if self.aged.get(name) == written:
                self.s3.delete_object(Bucket="tasks", Key=name)

    def task_prefix(self, workflow: str) -> str:
        return f"mcp/payloads/v0/ns/default/wt/McpTaskWorkflow/wi/{_encoded(workflow)}/"

    def add_shared(self, data: bytes) -> None:
        key = f"mcp/payloads/v0/d/sha256/{hashlib.sha256(data).hexdigest()}"
        self.s3.put_object(Bucket="tasks", Key=key, Body=data)


@pytest.fixture(params=[_FolderStore.kind, _S3Store.kind])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> _Store:
    if request.param == _FolderStore.kind:
        return _FolderStore(tmp_path / "payloads")
    return _S3Store(request.getfixturevalue("s3_endpoint"))


async def _history_payloads_readable(extension: TemporalTasksExtension, workflow: str) -> int:
    """Decode every payload of the workflow's history through the store; how many were stored."""
    assert extension.client is not None
    converter = extension.client.data_converter
    history = await extension.client.get_workflow_handle(workflow).fetch_history()
    stored = 0
    for event in history.events:
        for payloads in _payload_lists(event):
            stored += sum(bool(payload.external_payloads) for payload in payloads)
            await converter.decode(payloads)
    return stored


_PAYLOAD_FIELDS = (
    ("workflow_execution_started_event_attributes", "input"),
    ("activity_task_scheduled_event_attributes", "input"),
    ("activity_task_completed_event_attributes", "result"),
    ("workflow_execution_signaled_event_attributes", "input"),
    ("workflow_execution_completed_event_attributes", "result"),
)


def _payload_lists(event: HistoryEvent) -> Iterator[Sequence[Payload]]:
    """The payloads an event carries: inputs, leg outcomes, answers, the workflow's result."""
    for attributes, field in _PAYLOAD_FIELDS:
        if event.HasField(attributes):
            yield getattr(getattr(event, attributes), field).payloads


async def test_expiring_one_task_never_loses_another_tasks_identical_payloads(
    make_extension, store: _Store
) -> None:
    extension = make_extension(payload_store=store.url, heartbeat_timeout=_LEG_HEARTBEAT)
    async with Client(server_with(extension, produce)) as client:
        first = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        await status_becomes(first, "completed")
        first_names = store.names()
        store.age(first_names)

        second = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        await status_becomes(second, "completed")
        store.expire()

        read = await tasks_get(client, second.task_id)
        assert read.status == "completed" and text_of(read) == "r" * RESULT_SIZE
        second_workflow = anonymous_workflow_id(second.task_id)
        assert await _history_payloads_readable(extension, second_workflow) >= 2

    first_prefix = store.task_prefix(anonymous_workflow_id(first.task_id))
    second_prefix = store.task_prefix(second_workflow)
    second_names = store.names() - first_names
    assert first_names and all(name.startswith(first_prefix) for name in first_names)
    assert second_names and all(name.startswith(second_prefix) for name in second_names)


async def hold_with(blob: str, ctx: Context) -> str | InputRequiredResult:
    """Waits for an answer, so its stored arguments belong to a live task."""
    if ctx.input_responses is None:
        return InputRequiredResult(result_type="input_required", input_requests={"go": question("go")})
    return f"{len(blob)} characters kept"


async def _delete_workflow(extension: TemporalTasksExtension, workflow: str) -> None:
    """Delete a closed task's workflow from Temporal, as retention does; wait until it is gone.

    The dev server removes it only once its visibility records are acknowledged (up to a minute).
    """
    assert extension.client is not None
    await extension.client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=extension.client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow)
        )
    )
    handle = extension.client.get_workflow_handle(workflow)
    with anyio.fail_after(3 * DEADLINE):
        while True:
            try:
                await handle.describe()
            except RPCError as gone:
                assert gone.status == RPCStatusCode.NOT_FOUND
                return
            await anyio.sleep(0.2)


async def test_gc_removes_only_the_payloads_of_tasks_temporal_no_longer_has(
    make_extension, temporal_server: DevServer, task_queue: str, tmp_path: Path, s3_endpoint: str
) -> None:
    """Both stores at once, each on its own queue: the wait for Temporal's deletion overlaps."""
    async with anyio.create_task_group() as cases:
        for store in (_FolderStore(tmp_path / "payloads"), _S3Store(s3_endpoint)):
            extension = make_extension(
                payload_store=store.url,
                heartbeat_timeout=_LEG_HEARTBEAT,
                task_queue=f"{task_queue}-{store.kind}",
            )
            cases.start_soon(_gc_case, temporal_server, extension, store)


async def _gc_case(temporal_server: DevServer, extension: TemporalTasksExtension, store: _Store) -> None:
    """A closed task whose workflow Temporal deleted, and a live one: gc removes the first's payloads only."""
    async with Client(server_with(extension, produce, hold_with)) as client:
        closed = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        await status_becomes(closed, "completed")
        closed_workflow = anonymous_workflow_id(closed.task_id)
        live = await call_tool_task(client, "hold_with", {"blob": "b" * RESULT_SIZE})
        (asked,) = (await status_becomes(live, "input_required")).input_requests or {}
        live_workflow = anonymous_workflow_id(live.task_id)
        await _delete_workflow(extension, closed_workflow)
        store.add_shared(b"a payload an earlier version stored")
        before = store.names()
        closed_names = {name for name in before if name.startswith(store.task_prefix(closed_workflow))}
        live_names = {name for name in before if name.startswith(store.task_prefix(live_workflow))}
        assert closed_names and live_names

        async def gc(*options: str) -> str:
            code, out, err = await fastmcp_temporal_cli(
                temporal_server, "payloads", "gc", "--payload-store", store.url, *options
            )
            assert code == 0, err
            return out

        dry_run = await gc("--grace", "0")
        assert f"would remove  {closed_workflow}  {len(closed_names)} payloads" in dry_run
        assert live_workflow not in dry_run and "Dry run: nothing removed" in dry_run
        within_grace = await gc("--delete")
        assert within_grace.startswith("Removed the payloads of 0 task(s)")
        assert "Kept 1 task(s) Temporal still has" in within_grace
        assert "Kept 1 task(s) not in Temporal but written within the grace of 1 day" in within_grace
        assert store.names() == before

        removed = await gc("--grace", "0", "--delete")
        assert f"removed  {closed_workflow}" in removed and live_workflow not in removed
        assert "Never removed by gc: 1 payload(s), 35 bytes, not under a task's name" in removed
        assert store.names() == before - closed_names

        await tasks_update(client, live.task_id, {asked: accept("yes")})
        assert text_of(await status_becomes(live, "completed")) == f"{RESULT_SIZE} characters kept"


async def test_a_reset_task_runs_again_on_its_stored_arguments_which_gc_keeps(
    make_extension, temporal_server: DevServer, tmp_path: Path
) -> None:
    """An operator's reset re-runs the body from the arguments the store kept for the first run;
    `payloads gc` run while the new run is in its leg removes none of them."""
    store = _FolderStore(tmp_path / "payloads")
    runs = 0
    rerun, finish = anyio.Event(), anyio.Event()

    async def measure(blob: str) -> str:
        nonlocal runs
        runs += 1
        if runs == 2:
            rerun.set()
            await finish.wait()
        return f"run {runs}: {len(blob)} characters"

    extension = make_extension(payload_store=store.url, heartbeat_timeout=_LEG_HEARTBEAT)
    async with Client(server_with(extension, measure)) as client:
        task = await call_tool_task(client, "measure", {"blob": "b" * RESULT_SIZE})
        assert text_of(await status_becomes(task, "completed")) == f"run 1: {RESULT_SIZE} characters"
        workflow = anonymous_workflow_id(task.task_id)
        stored = {name for name in store.names() if name.startswith(store.task_prefix(workflow))}
        assert stored

        await reset_workflow(temporal_server, workflow)
        with anyio.fail_after(DEADLINE):
            await rerun.wait()
        code, out, err = await fastmcp_temporal_cli(
            temporal_server, "payloads", "gc", "--payload-store", store.url, "--grace", "0", "--delete"
        )
        assert code == 0, err
        assert "Kept 1 task(s) Temporal still has" in out and stored <= store.names()

        finish.set()
        second = f"run 2: {RESULT_SIZE} characters"
        await status_becomes(task, "completed", until=lambda read: text_of(read) == second)
        assert runs == 2


async def test_a_store_folder_other_users_can_open_is_refused_with_the_fix(
    make_extension, tmp_path: Path
) -> None:
    folder = tmp_path / "shared payloads"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(RuntimeError) as refused:
        async with Client(server_with(make_extension(payload_store=str(folder)), produce)):
            pass
    assert f"Payload store folder {folder} is open to other users (mode 0777)" in str(refused.value)
    assert f"chmod 700 '{folder}'" in str(refused.value)

    folder.chmod(0o700)
    async with Client(server_with(make_extension(payload_store=str(folder)), produce)) as client:
        task = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        assert text_of(await status_becomes(task, "completed")) == "r" * RESULT_SIZE
    assert [path for path in folder.rglob("*") if path.is_file()]


async def test_claims_of_the_flat_layout_stay_readable(tmp_path: Path) -> None:
    """A task in flight across the upgrade holds claims to `<folder>/<sha256>` files."""
    folder = tmp_path / "payloads"
    folder.mkdir(mode=0o700)
    payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"stored by 0.2.0")
    digest = hashlib.sha256(payload.SerializeToString()).hexdigest()
    (folder / digest).write_bytes(payload.SerializeToString())
    claim = StorageDriverClaim(claim_data={"sha256": digest})
    assert await FolderStorageDriver(folder).retrieve(StorageDriverRetrieveContext(), [claim]) == [payload]


def _task_context(workflow: str) -> StorageDriverStoreContext:
    return StorageDriverStoreContext(
        target=StorageDriverWorkflowInfo(namespace="default", id=workflow, type="McpTaskWorkflow")
    )


@pytest.mark.parametrize("held", [True, False], ids=["store of the earlier release", "empty mount point"])
async def test_a_claim_written_before_markers_is_lost_only_in_the_store_that_held_earlier_payloads(
    tmp_path: Path, held: bool
) -> None:
    """A task in flight across the upgrade holds claims that name no store.

    Its payload missing from the store earlier releases wrote to (it holds other tasks' folders
    when the new release marks it) is lost: the task ends with the reason. Missing from an
    empty mount point that the new release marked, it is not lost: the read raises and is retried.
    """
    folder = tmp_path / "payloads"
    folder.mkdir(mode=0o700)
    if held:
        (folder / "default" / "mcp-task%2Fanon%2Fearlier").mkdir(parents=True)
        (folder / "default" / "mcp-task%2Fanon%2Fearlier" / ("0" * 64)).write_bytes(b"stored by an earlier release")
    driver = FolderStorageDriver(folder)
    driver.identify(StoreIdentity(cluster_id="this-cluster", namespace="default"))
    written = Payload(metadata={"encoding": b"binary/plain"}, data=b"stored by this release")
    (claim,) = await driver.store(_task_context("mcp-task/anon/new"), [written])
    assert claim.claim_data["store"] == (await driver.marker("default")).store_id  # type: ignore[union-attr]
    earlier_claim = StorageDriverClaim(
        claim_data={"sha256": "1" * 64, "namespace": "default", "workflow_id": "mcp-task/anon/parked"}
    )

    reader = LostPayloadsAsUnreadable(driver)
    if held:
        (stand_in,) = await reader.retrieve(StorageDriverRetrieveContext(), [earlier_claim])
        assert "no longer in the payload store" in UnreadablePayloadConverter().from_payload(stand_in).reason
    else:
        with pytest.raises(StoreAwayError) as away:
            await reader.retrieve(StorageDriverRetrieveContext(), [earlier_claim])
        assert "FASTMCP_TEMPORAL_PAYLOAD_STORE" in str(away.value)
    assert await reader.retrieve(StorageDriverRetrieveContext(), [claim]) == [written]


async def test_gc_refuses_a_store_with_tasks_and_no_marker(temporal_server: DevServer, tmp_path: Path) -> None:
    """Nothing this release wrote is there, so nothing says it is this cluster's store."""
    folder = tmp_path / "payloads"
    task = folder / "default" / "mcp-task%2Fanon%2Fwhose"
    task.mkdir(parents=True, mode=0o700)
    folder.chmod(0o700)
    (task / ("0" * 64)).write_bytes(b"a payload of some task")
    code, _, refused = await fastmcp_temporal_cli(
        temporal_server, "payloads", "gc", "--payload-store", str(folder), "--grace", "0", "--delete"
    )
    assert code == 1
    assert "holds 1 task(s) of namespace 'default' but no marker" in refused
    assert "nothing was removed" in refused
    assert (task / ("0" * 64)).exists()


async def test_a_marker_deleted_under_a_running_server_is_written_at_its_next_stored_payload(
    make_extension, temporal_server: DevServer, tmp_path: Path
) -> None:
    """As the docs promise: no restart needed, and gc takes the store again."""
    folder = tmp_path / "payloads"
    marker = folder / "default" / MARKER_NAME
    extension = make_extension(payload_store=str(folder))
    async with Client(server_with(extension, produce)) as client:
        first = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        await status_becomes(first, "completed")
        first_store = json.loads(marker.read_bytes())["store_id"]
        marker.unlink()
        second = await call_tool_task(client, "produce", {"size": RESULT_SIZE})
        assert text_of(await status_becomes(second, "completed")) == "r" * RESULT_SIZE
        assert marker.exists(), "the running server stored a payload and wrote no marker"
        assert json.loads(marker.read_bytes())["store_id"] != first_store
        code, out, err = await fastmcp_temporal_cli(
            temporal_server, "payloads", "gc", "--payload-store", str(folder), "--grace", "0"
        )
    assert code == 0, err
    assert "Kept 2 task(s) Temporal still has" in out
