"""A store knows it is the store it wrote to, so an absent store is never taken for a lost payload.

A folder store's mount point that is there but empty (a volume not mounted yet after a
reboot, a Kubernetes volume late to attach), or a store of another cluster mounted in
its place, answers "no such file" for every payload. Judged lost, each would end its
task for good. So every store carries a marker per namespace
(`<folder>/<namespace>/.fastmcp-temporal-store.json`; on S3
`<prefix>/v0/ns/<namespace>/.fastmcp-temporal-store.json`) naming a random store id,
Temporal's cluster id and the namespace, and every claim written with it names that
store id. A missing payload is judged lost only when the marker there is the one the
claim names; no marker, or another one, means the store answering is not the one the
payload went to: the read raises `StoreAwayError`, a `ConnectionError`, so the workflow
or activity task is retried, and the reason (with the path and the fix) is logged once.

The marker is read at every stored payload and written when it is missing (at a
process's first stored payload in a namespace, or after it was deleted), never
overwritten. A claim written before markers existed names no store: it is judged lost
only when the marker names this cluster and namespace and was written into a store
that already held payloads then (so it is the store earlier releases wrote to, not an
empty mount point). `payloads gc` refuses a store whose marker names another cluster or
namespace, and one with tasks but no marker.

A read that fails because the store is away or does not answer is told to the store's
listeners with the task it was for (`when_unreadable`): a worker uses it to close a task
whose cancel its workflow cannot run without the store (`worker/_store_away_cancels`).
"""

from __future__ import annotations

import json
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, GetClusterInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal.connection._wrapped_driver import innermost

logger = logging.getLogger("fastmcp_temporal")

MARKER_NAME = ".fastmcp-temporal-store.json"
STORE_CLAIM_KEY = "store"
"""The claim key naming the store id a payload was written to."""


UnreadableListener = Callable[[str, str, BaseException], None]
"""Told the namespace and workflow id of a task whose payload the store could not give, and why."""


class StoreAwayError(ConnectionError):
    """The store answering is not the one a payload was written to (not mounted, another cluster's): retry."""


@dataclass(frozen=True)
class StoreIdentity:
    """Who writes to a store: the Temporal cluster and namespace of the connected client."""

    cluster_id: str
    namespace: str


@dataclass(frozen=True)
class StoreMarker:
    """What a store's marker for one namespace says."""

    store_id: str
    cluster_id: str
    namespace: str
    held_earlier_payloads: bool
    """The store already held this namespace's payloads when the marker was written."""
    created: str

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode() + b"\n"

    @classmethod
    def parse(cls, data: bytes, where: str) -> StoreMarker:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError) as exc:
            raise StoreAwayError(
                f"The payload store marker {where} is not one this package wrote ({exc}); restore it from "
                "a backup of the store, or point FASTMCP_TEMPORAL_PAYLOAD_STORE at this cluster's store."
            ) from None

    def names(self, identity: StoreIdentity) -> bool:
        return (self.cluster_id, self.namespace) == (identity.cluster_id, identity.namespace)

    def owner(self) -> str:
        return f"Temporal cluster {self.cluster_id!r}, namespace {self.namespace!r}"


class MarkedStore(ABC):
    """A store driver whose store carries a marker per namespace (see the module docstring)."""

    def __init__(self) -> None:
        self._identity: StoreIdentity | None = None
        self._logged: set[str] = set()
        self._unreadable_listeners: list[UnreadableListener] = []

    @property
    def identified(self) -> bool:
        return self._identity is not None

    def identify(self, identity: StoreIdentity) -> None:
        """Write markers and judge missing payloads as the cluster and namespace of `identity`."""
        self._identity = identity

    def when_unreadable(self, listener: UnreadableListener) -> Callable[[], None]:
        """Tell `listener` of every read that fails because the store is away or does not answer,
        until the returned function is called."""
        self._unreadable_listeners.append(listener)
        return lambda: self._unreadable_listeners.remove(listener)

    def tell_unreadable(self, tasks: Iterable[tuple[str, str]], reason: BaseException) -> None:
        """A read for `tasks` (namespace, workflow id) failed with `reason`, and no payload is lost."""
        for namespace, workflow_id in set(tasks):
            for listener in self._unreadable_listeners:
                listener(namespace, workflow_id, reason)

    @abstractmethod
    def marker_location(self, namespace: str) -> str:
        """Where the marker of `namespace` is, for messages."""

    @abstractmethod
    async def _read_marker(self, namespace: str) -> bytes | None:
        """The marker's bytes, or None when there is none."""

    @abstractmethod
    async def _create_marker(self, namespace: str, data: bytes) -> None:
        """Write the marker unless one is there already (then leave it as it is)."""

    @abstractmethod
    async def _holds_payloads(self, namespace: str) -> bool:
        """Whether the store holds any payload stored for `namespace` (earlier releases' too)."""

    async def marker(self, namespace: str) -> StoreMarker | None:
        """The store's marker for `namespace`, read now."""
        data = await self._read_marker(namespace)
        return None if data is None else StoreMarker.parse(data, self.marker_location(namespace))

    async def claim_marks(self, namespace: str) -> dict[str, str]:
        """What a claim written now in `namespace` adds: the store id (the marker is written when missing).

        The marker is read at every store, so one deleted under a running process is written
        again at its next stored payload; nothing when the process has no identity.
        """
        identity = self._identity
        if identity is None or namespace != identity.namespace:
            return {}
        return {STORE_CLAIM_KEY: (await self._own_marker(identity)).store_id}

    async def _own_marker(self, identity: StoreIdentity) -> StoreMarker:
        namespace = identity.namespace
        if (found := await self.marker(namespace)) is None:
            created = StoreMarker(
                store_id=str(uuid.uuid4()),
                cluster_id=identity.cluster_id,
                namespace=namespace,
                held_earlier_payloads=await self._holds_payloads(namespace),
                created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            )
            await self._create_marker(namespace, created.to_bytes())
            found = await self.marker(namespace)  # another process's, if it was first
        if found is None or not found.names(identity):
            raise self._away(namespace, found, reading=False)
        return found

    async def judge_missing(self, namespace: str | None, claim: Mapping[str, str]) -> None:
        """Return when the store that answered "missing" is the one `claim` was written to; else raise."""
        namespace = namespace or (self._identity.namespace if self._identity else None)
        if namespace is None:  # a claim of the flat layout, read by a process with no Temporal identity
            raise StoreAwayError(
                "A payload stored by an earlier release is missing, and this process cannot tell whether "
                "the store is the one it was written to; read it through a server, worker or CLI of the "
                "task queue."
            )
        marker = await self.marker(namespace)
        claimed = claim.get(STORE_CLAIM_KEY)
        if marker is not None and claimed is not None and marker.store_id == claimed:
            return
        identity = self._identity
        if (
            marker is not None
            and claimed is None
            and marker.held_earlier_payloads
            and identity is not None
            and marker.names(identity)
        ):
            return
        raise self._away(namespace, marker, reading=True)

    def _away(self, namespace: str, marker: StoreMarker | None, *, reading: bool) -> StoreAwayError:
        """The error (logged once per process) for a store that is not the one it should be."""
        where = self.marker_location(namespace)
        if marker is None:
            state = f"has no marker ({where})"
        elif self._identity is not None and not marker.names(self._identity):
            state = f"belongs to {marker.owner()} ({where}), not to this process's {self._describe()}"
        else:
            state = f"is store {marker.store_id} ({where}), not the one this task's payloads were written to"
        what = "a payload stored there is missing" if reading else "it takes no payload of this cluster's"
        outcome = "The task waits, loses nothing, and goes on by itself" if reading else "Nothing was stored"
        message = (
            f"The payload store {state}, and {what}: it is not mounted, or not this cluster's store. "
            f"{outcome}. Mount the store the task queue's servers and workers use, or point "
            "FASTMCP_TEMPORAL_PAYLOAD_STORE at it."
        )
        if message not in self._logged:
            self._logged.add(message)
            logger.error(message)
        return StoreAwayError(message)

    def _describe(self) -> str:
        identity = self._identity
        return (
            "unknown cluster"
            if identity is None
            else (f"Temporal cluster {identity.cluster_id!r}, namespace {identity.namespace!r}")
        )


async def store_identity(client: Client) -> StoreIdentity:
    """The cluster id and namespace `client` writes as.

    The cluster id is Temporal's `GetClusterInfo`; a server that refuses it (a cloud
    service may) is named by the namespace's own id instead.
    """
    try:
        cluster_id = (await client.workflow_service.get_cluster_info(GetClusterInfoRequest())).cluster_id
    except RPCError:
        cluster_id = ""
    if not cluster_id:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
        cluster_id = f"namespace-id:{described.namespace_info.id}"
    return StoreIdentity(cluster_id=cluster_id, namespace=client.namespace)


async def identify_store(client: Client) -> None:
    """Give the store of `client`'s converter the client's identity (once; a no-op without a store)."""
    storage = client.data_converter.external_storage
    stores = [
        driver
        for wrapper in (storage.drivers if storage is not None else [])
        if isinstance(driver := innermost(wrapper), MarkedStore) and not driver.identified
    ]
    if stores:
        identity = await store_identity(client)
        for store in stores:
            store.identify(identity)

