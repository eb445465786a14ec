"""Where task payloads live: the payload store and its drivers.

Temporal refuses any payload over its blob limit (2 MiB by default), and a refused
payload either re-runs a tool or leaves a workflow unable to make progress. So every
payload at or over `STORE_THRESHOLD` bytes, measured as encoded (after the payload
converter and the encryption codec), goes to an external store through temporalio's
`ExternalStorage`, and only a small reference enters history. Because the SDK stores
what the codec produced, an encrypted payload is ciphertext in the store too.

The store is chosen by `payload_store`: a folder on this host (the default with the
embedded dev server), S3 through `temporalio.contrib.aws.s3driver`, or none. Either
store names every payload under its task's workflow id and shares none between
tasks, so removing one task's payloads (`fastmcp-temporal payloads gc`, or an age
rule) can never take another task's; and either carries a marker (`_store_marker`), so
a store that is not mounted, or another cluster's, delays a task instead of losing
its payloads. What a store cannot take is refused before it is sent (`_sizes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from fastmcp_temporal.connection._leg_inputs import LegInputsByReference, TasksExternalStorage
from fastmcp_temporal.connection._s3_client import PrefixedS3Client
from fastmcp_temporal.connection._store_marker import MARKER_NAME, MarkedStore, StoreAwayError
from fastmcp_temporal.connection._unreadable import LostPayloadsAsUnreadable, lost_for_good, missing_object
from fastmcp_temporal.workflows.models import WORKFLOW_NAME

STORED_PAYLOAD_LIMIT = 50 * 1024 * 1024
"""The largest payload a store takes by default (the SDK's S3 driver default)."""
STORE_THRESHOLD = 256 * 1024
"""Encoded payloads this large or larger go to the store (the SDK's default)."""

FOLDER_DRIVER_NAME = "fastmcp-temporal.folder"


class PayloadStoreError(ValueError):
    """`payload_store` names no store this package can use."""


TaskName = tuple[str, str]
"""The namespace and workflow id of the task a payload belongs to."""


def _task_of(context: StorageDriverStoreContext) -> TaskName | None:
    """The task a payload is stored for: the target workflow, else the activity's own workflow.

    An activity's payloads (its heartbeats, a leg outcome stored through the client's
    converter) carry no workflow id in their context, so it comes from the activity.
    A client outside any task (none of this package's paths) stores under no task.
    """
    target = context.target
    if isinstance(target, StorageDriverWorkflowInfo) and target.id:
        return target.namespace, target.id
    if activity.in_activity() and (info := activity.info()).workflow_id:
        return info.workflow_namespace or info.namespace, info.workflow_id
    return None


@dataclass(frozen=True)
class StoredTask:
    """One task's payloads as a store holds them, for `fastmcp-temporal payloads gc`."""

    workflow_id: str
    names: tuple[str, ...]
    size: int
    newest: datetime


@dataclass(frozen=True)
class StoreContents:
    """What a store holds for one namespace: per task, and shared payloads no task owns."""

    tasks: list[StoredTask]
    shared_count: int
    shared_size: int


def _segment(value: str) -> str:
    """`value` as one path segment: percent-encoded, dots too, so no id climbs out of its folder."""
    return quote(value, safe="").replace(".", "%2E")


class _MissingPayload(FileNotFoundError):
    """A claimed file the store folder does not have, with the claim it was read for."""

    def __init__(self, message: str, claim: StorageDriverClaim) -> None:
        super().__init__(message)
        self.claim = claim


class FolderStorageDriver(StorageDriver, MarkedStore):
    """Payloads as files in one folder (0700, files 0600), a sub-folder per task, for one host.

    A task's payloads are `<folder>/<namespace>/<workflow id>/<sha256>` (both names
    percent-encoded), so nothing one task stored is shared with another: an age-based
    rule or `payloads gc` removes a task's payloads with no effect on any other task.
    Within a task identical payloads (its arguments, sent to each leg) are written once,
    and every reuse refreshes the file's modification time. Claims of earlier versions
    (`<folder>/<sha256>`, shared across tasks) stay readable. Every process of a task
    queue must see the same folder; a folder other users can open is refused, as ssh
    refuses such keys. A marker per namespace (`<folder>/<namespace>/.fastmcp-temporal-store.json`)
    tells an empty mount point from a store that lost a payload.
    """

    def __init__(self, folder: Path) -> None:
        _refuse_open_folder(folder)
        MarkedStore.__init__(self)
        self._folder = folder

    def name(self) -> str:
        return FOLDER_DRIVER_NAME

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        task = _task_of(context)
        marks = {} if task is None else await self.claim_marks(task[0])
        return await asyncio.to_thread(
            lambda: [self._write(payload.SerializeToString(), task, marks) for payload in payloads]
        )

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await asyncio.to_thread(lambda: [self._read(claim) for claim in claims])
        except _MissingPayload as missing:
            try:
                await self.judge_missing(missing.claim.claim_data.get("namespace"), missing.claim.claim_data)
            except StoreAwayError as away:
                self.tell_unreadable(_claimed_tasks(claims), away)
                raise
            raise
        except ConnectionError as away:
            self.tell_unreadable(_claimed_tasks(claims), away)
            raise

    def marker_location(self, namespace: str) -> str:
        return str(self._marker_path(namespace))

    def _marker_path(self, namespace: str) -> Path:
        return self._folder / _segment(namespace) / MARKER_NAME

    async def _read_marker(self, namespace: str) -> bytes | None:
        try:
            return await asyncio.to_thread(self._marker_path(namespace).read_bytes)
        except FileNotFoundError:
            return None

    async def _create_marker(self, namespace: str, data: bytes) -> None:
        await asyncio.to_thread(self._link_marker, self._marker_path(namespace), data)

    def _link_marker(self, marker: Path, data: bytes) -> None:
        """Write `marker` whole or not at all, and never over another process's."""
        self._make_folders(marker.parent)
        descriptor, temporary = tempfile.mkstemp(dir=marker.parent, prefix=".incoming-")  # 0600
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
            with contextlib.suppress(FileExistsError):
                os.link(temporary, marker)
        finally:
            os.unlink(temporary)

    async def _holds_payloads(self, namespace: str) -> bool:
        return await asyncio.to_thread(self._has_payloads, namespace)

    def _has_payloads(self, namespace: str) -> bool:
        tasks_folder = self._folder / _segment(namespace)
        has_tasks = tasks_folder.is_dir() and any(entry.is_dir() for entry in os.scandir(tasks_folder))
        return has_tasks or bool(_files(self._folder))

    def _task_folder(self, task: TaskName | None) -> Path:
        if task is None:
            return self._folder
        namespace, workflow_id = task
        return self._folder / _segment(namespace) / _segment(workflow_id)

    def _write(self, data: bytes, task: TaskName | None, marks: dict[str, str]) -> StorageDriverClaim:
        digest = hashlib.sha256(data).hexdigest()
        folder = self._task_folder(task)
        try:
            os.utime(folder / digest)  # reused: an age-based rule must see this task's latest write
        except FileNotFoundError:
            self._make_folders(folder)
            descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".incoming-")  # 0600
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
            os.replace(temporary, folder / digest)
        claim = {"sha256": digest, **marks}
        if task is not None:
            claim.update(namespace=task[0], workflow_id=task[1])
        return StorageDriverClaim(claim_data=claim)

    def _make_folders(self, folder: Path) -> None:
        """Create the store folder and `folder` in it, each level 0700 (mkdir's parents ignore the mode)."""
        self._folder.parent.mkdir(parents=True, exist_ok=True)
        level = self._folder
        level.mkdir(mode=0o700, exist_ok=True)
        for part in folder.relative_to(self._folder).parts:
            level = level / part
            level.mkdir(mode=0o700, exist_ok=True)

    def _read(self, claim: StorageDriverClaim) -> Payload:
        data = claim.claim_data
        digest = data["sha256"]
        task = (data["namespace"], data["workflow_id"]) if "workflow_id" in data else None
        path = self._task_folder(task) / digest
        try:
            stored = path.read_bytes()
        except FileNotFoundError:
            if not self._folder.is_dir():  # the store is away (unmounted), not the payload: retry
                raise ConnectionError(f"The payload store folder {self._folder} is not there") from None
            raise _MissingPayload(
                f"Stored payload {path} is missing; every server and worker of the task queue must "
                "share FASTMCP_TEMPORAL_PAYLOAD_STORE's folder, and it must outlive the tasks.",
                claim,
            ) from None
        if hashlib.sha256(stored).hexdigest() != digest:
            raise ValueError(f"Stored payload {path} does not match its SHA-256; it was altered.")
        payload = Payload()
        payload.ParseFromString(stored)
        return payload

    async def contents(self, namespace: str) -> StoreContents:
        """Each task's payloads in `namespace`, and the shared files earlier versions wrote."""
        return await asyncio.to_thread(self._contents, namespace)

    def _contents(self, namespace: str) -> StoreContents:
        shared = _files(self._folder)
        tasks_folder = self._folder / _segment(namespace)
        tasks = [
            _stored_task(unquote(folder.name), files)
            for folder in (sorted(tasks_folder.iterdir()) if tasks_folder.is_dir() else [])
            if folder.is_dir() and (files := _files(folder))
        ]
        return StoreContents(tasks, len(shared), sum(size for _, size, _ in shared))

    async def remove(self, task: StoredTask) -> None:
        """Delete the files `task` lists (not one written since), then its folder if now empty."""
        await asyncio.to_thread(self._remove, task)

    def _remove(self, task: StoredTask) -> None:
        for name in task.names:
            Path(name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            Path(task.names[0]).parent.rmdir()


def _files(folder: Path) -> list[tuple[str, int, datetime]]:
    """The payload files directly in `folder`: path, size, modification time."""
    if not folder.is_dir():
        return []
    found = []
    for entry in os.scandir(folder):
        if entry.is_file() and not entry.name.startswith("."):
            status = entry.stat()
            found.append((entry.path, status.st_size, datetime.fromtimestamp(status.st_mtime, timezone.utc)))
    return found


def _stored_task(workflow_id: str, objects: list[tuple[str, int, datetime]]) -> StoredTask:
    return StoredTask(
        workflow_id=workflow_id,
        names=tuple(name for name, _, _ in objects),
        size=sum(size for _, size, _ in objects),
        newest=max(modified for _, _, modified in objects),
    )


def _refuse_open_folder(folder: Path) -> None:
    """Refuse a store folder that users other than its owner may read, write or enter."""
    try:
        mode = stat.S_IMODE(folder.stat().st_mode)
    except FileNotFoundError:
        return  # created 0700 on the first write
    if mode & 0o077:
        raise PayloadStoreError(
            f"Payload store folder {folder} is open to other users (mode {mode:04o}), who could read or "
            f"alter task payloads. Run `chmod 700 {shlex.quote(str(folder))}` as the user every server "
            "and worker of the queue runs as, or point FASTMCP_TEMPORAL_PAYLOAD_STORE at a private folder."
        )


class TaskS3StorageDriver(S3StorageDriver, MarkedStore):
    """temporalio's S3 driver, with every payload keyed under the workflow id of its task.

    The SDK keys a workflow's payloads under its run and an activity's under the
    activity alone (`at/<type>/ai/<id>/...`), so one task's objects are scattered and
    tasks share objects. Here every payload of a task, whichever run or activity wrote
    it, goes to `v0/ns/<namespace>/wt/McpTaskWorkflow/wi/<workflow id>/ri/null/`, so a
    lifecycle rule or `payloads gc` acts on one task at a time; and every store is a
    fresh PUT, so an object's age is its task's latest write. A marker object per
    namespace (`v0/ns/<namespace>/.fastmcp-temporal-store.json`) tells an emptied or
    replaced bucket from one that lost a payload.
    """

    def __init__(self, bucket: str, prefix: str, max_payload_size: int) -> None:
        self._objects = PrefixedS3Client(prefix)
        self._bucket_name = bucket
        S3StorageDriver.__init__(self, client=self._objects, bucket=bucket, max_payload_size=max_payload_size)
        MarkedStore.__init__(self)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        marks: dict[str, str] = {}
        if (task := _task_of(context)) is not None:
            namespace, workflow_id = task
            target = StorageDriverWorkflowInfo(namespace=namespace, id=workflow_id, type=WORKFLOW_NAME)
            context = StorageDriverStoreContext(target=target)
            marks = await self.claim_marks(namespace)
        claims = await super().store(context, payloads)
        return [StorageDriverClaim(claim_data={**claim.claim_data, **marks}) for claim in claims]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await self._retrieved(context, claims)
        except Exception as exc:
            if not lost_for_good(exc):
                self.tell_unreadable(filter(None, map(_task_of_key, claims)), exc)
            raise

    async def _retrieved(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await super().retrieve(context, claims)
        except RuntimeError as exc:
            if not missing_object(exc):
                raise
            for claim in claims:  # the SDK does not say which one is missing
                await self.judge_missing(_namespace_of(claim.claim_data["key"]), claim.claim_data)
            raise

    def marker_location(self, namespace: str) -> str:
        return self._objects.location(self._bucket_name, self._marker_key(namespace))

    def _marker_key(self, namespace: str) -> str:
        return f"v0/ns/{_s3_segment(namespace)}/{MARKER_NAME}"

    async def _read_marker(self, namespace: str) -> bytes | None:
        with self._failing_as_unreachable(namespace):
            return await self._objects.read(self._bucket_name, self._marker_key(namespace))

    async def _create_marker(self, namespace: str, data: bytes) -> None:
        with self._failing_as_unreachable(namespace):
            await self._objects.create(self._bucket_name, self._marker_key(namespace), data)

    async def _holds_payloads(self, namespace: str) -> bool:
        marker, bucket = self._marker_key(namespace), self._bucket_name
        with self._failing_as_unreachable(namespace):
            ours = await self._objects.any_under(bucket, f"v0/ns/{_s3_segment(namespace)}/", marker)
            return ours or await self._objects.any_under(bucket, "v0/d/", marker)

    @contextlib.contextmanager
    def _failing_as_unreachable(self, namespace: str) -> Iterator[None]:
        """An S3 error about the marker (no bucket, access denied) is the store failing: retried, reported."""
        try:
            yield
        except Exception as exc:
            location = self.marker_location(namespace)
            raise ConnectionError(f"The S3 payload store failed at {location}: {exc}") from exc

    async def contents(self, namespace: str) -> StoreContents:
        """Each task's objects in `namespace`, and the shared objects earlier versions wrote."""
        ours = f"v0/ns/{_s3_segment(namespace)}/"
        per_task = f"{ours}wt/{WORKFLOW_NAME}/wi/"
        grouped: dict[str, list[tuple[str, int, datetime]]] = {}
        shared = []
        for key, size, modified in await self._objects.listed(self._bucket_name, "v0/"):
            if key.endswith(f"/{MARKER_NAME}"):
                continue
            if key.startswith(per_task):
                grouped.setdefault(key[len(per_task) :].split("/", 1)[0], []).append((key, size, modified))
            elif key.startswith(ours) or key.startswith("v0/d/"):
                shared.append(size)
        tasks = [_stored_task(unquote(segment), objects) for segment, objects in sorted(grouped.items())]
        return StoreContents(tasks, len(shared), sum(shared))

    async def remove(self, task: StoredTask) -> None:
        await self._objects.delete(self._bucket_name, task.names)


def _s3_segment(value: str) -> str:
    """`value` percent-encoded as the SDK's S3 driver encodes a key segment."""
    return quote(value, safe="!*'()").replace("~", "%7E")


def _task_of_key(claim: StorageDriverClaim) -> TaskName | None:
    """The task an S3 claim's key is stored under (`v0/ns/<namespace>/wt/<type>/wi/<workflow id>/...`)."""
    parts = claim.claim_data.get("key", "").split("/")
    if len(parts) > 6 and parts[:2] == ["v0", "ns"] and parts[3] == "wt" and parts[5] == "wi":
        return unquote(parts[2]), unquote(parts[6])
    return None


def _claimed_tasks(claims: Sequence[StorageDriverClaim]) -> list[TaskName]:
    """The tasks folder claims name (claims of the flat layout name none)."""
    return [
        (claim.claim_data["namespace"], claim.claim_data["workflow_id"])
        for claim in claims
        if "workflow_id" in claim.claim_data
    ]


def _namespace_of(key: str) -> str | None:
    """The namespace an S3 driver key is stored under (`v0/ns/<namespace>/...`), if it names one."""
    parts = key.split("/")
    return unquote(parts[2]) if len(parts) > 3 and parts[:2] == ["v0", "ns"] else None


def _s3_driver(bucket: str, prefix: str, limit: int) -> TaskS3StorageDriver:
    try:
        import aioboto3  # noqa: F401
    except ImportError as exc:
        raise PayloadStoreError(
            "An s3:// payload store needs aioboto3: pip install 'fastmcp-temporal[s3]'."
        ) from exc
    # The driver checks the stored payload, a little larger than the value we measured.
    return TaskS3StorageDriver(bucket, prefix, max_payload_size=limit + 64 * 1024)


def payload_storage(
    store: str | None, default_folder: Path | None, stored_limit: int
) -> ExternalStorage | None:
    """The external storage `store` names; `auto` is `default_folder` when there is one."""
    driver = store_driver(store, default_folder, stored_limit)
    return None if driver is None else _storage(driver)


def store_driver(
    store: str | None, default_folder: Path | None, stored_limit: int
) -> FolderStorageDriver | TaskS3StorageDriver | None:
    """The driver `store` names (see `payload_storage`), or None for no store."""
    store = (store or "auto").strip()
    if store == "auto":
        return None if default_folder is None else FolderStorageDriver(default_folder)
    if store == "none":
        return None
    url = urlsplit(store)
    if url.scheme == "s3":
        if not url.netloc:
            raise PayloadStoreError(f"Payload store {store!r} names no bucket; use s3://bucket/prefix.")
        return _s3_driver(url.netloc, url.path.strip("/"), stored_limit)
    if url.scheme == "file":
        return FolderStorageDriver(Path(unquote(url.path)))
    if url.scheme == "" and Path(store).is_absolute():
        return FolderStorageDriver(Path(store))
    raise PayloadStoreError(
        f"Unknown payload store {store!r}: use 'auto', 'none', an absolute folder path or file:///path, "
        "or s3://bucket/prefix (FASTMCP_TEMPORAL_PAYLOAD_STORE)."
    )


def _storage(driver: StorageDriver) -> ExternalStorage:
    return TasksExternalStorage(
        drivers=[LegInputsByReference(LostPayloadsAsUnreadable(driver))], payload_size_threshold=STORE_THRESHOLD
    )
