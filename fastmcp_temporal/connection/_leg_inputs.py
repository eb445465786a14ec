"""A leg's stored input reaches it as a reference, which the leg fetches itself while it heartbeats.

Temporal decodes an activity's input before the activity runs, and a store that does
not answer there fails the attempt: it spends the tool's `maximum_attempts`, and a slow
store reads as a worker gone silent. So the input a workflow stores when it schedules a
tool leg (arguments or answers of 256 KiB or more) is marked in its claim, and the
worker's decode hands the leg a reference to it (`StoredLegInput`) instead of reading
the store. The leg reads it with `fetch_leg_input`, heartbeating and retrying while the
store is away (`worker/_store_outage`). A leg's input never costs more store reads than
before, and a task without stored input runs exactly as before.

Claims keep the driver's own fields, so a worker of an earlier release reads a marked
claim as it always did.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    ExternalStorage,
    SerializationContext,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    WithSerializationContext,
)

from fastmcp_temporal.connection._wrapped_driver import WrappedDriver
from fastmcp_temporal.workflows.models import RUN_TOOL_LEG

LEG_INPUT_CLAIM = "fastmcp-temporal-leg-input"
STORED_LEG_INPUT_ENCODING = "binary/fastmcp-temporal-stored-leg-input"


@dataclasses.dataclass(frozen=True)
class StoredLegInput:
    """Where a leg's input waits in the store: the driver and the claim it returned."""

    driver: str
    claim: dict[str, str]

    @classmethod
    def of(cls, payload: Payload) -> StoredLegInput | None:
        """The reference `payload` is, or None for an input that came whole."""
        if payload.metadata.get("encoding") != STORED_LEG_INPUT_ENCODING.encode():
            return None
        return cls(**json.loads(payload.data))

    def payload(self) -> Payload:
        data = json.dumps(dataclasses.asdict(self)).encode()
        return Payload(metadata={"encoding": STORED_LEG_INPUT_ENCODING.encode()}, data=data)


class LegInputsByReference(WrappedDriver):
    """`driver`, marking the leg inputs a workflow stores and handing them back as references."""

    def __init__(self, driver: StorageDriver, *, marking: bool = False) -> None:
        super().__init__(driver)
        self._marking = marking

    def marking(self) -> LegInputsByReference:
        """This driver, marking what it stores as a leg's input (unless a leg itself stores it)."""
        return LegInputsByReference(self._driver, marking=True)

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = await self._driver.store(context, payloads)
        if not self._marking or activity.in_activity():  # a leg's own result or heartbeat
            return claims
        return [StorageDriverClaim({**claim.claim_data, LEG_INPUT_CLAIM: "true"}) for claim in claims]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        if not any(LEG_INPUT_CLAIM in claim.claim_data for claim in claims):
            return await self._driver.retrieve(context, claims)
        return [await self._retrieve_one(context, claim) for claim in claims]

    async def _retrieve_one(
        self, context: StorageDriverRetrieveContext, claim: StorageDriverClaim
    ) -> Payload:
        if LEG_INPUT_CLAIM in claim.claim_data:
            return StoredLegInput(self.name(), dict(claim.claim_data)).payload()
        (payload,) = await self._driver.retrieve(context, [claim])
        return payload

    async def fetch(self, reference: StoredLegInput) -> Payload:
        """The stored input itself (a stand-in when the store lost it); raises while the store is away."""
        claim = StorageDriverClaim(reference.claim)
        (payload,) = await self._driver.retrieve(StorageDriverRetrieveContext(), [claim])
        return payload


@dataclasses.dataclass(frozen=True)
class TasksExternalStorage(ExternalStorage, WithSerializationContext):
    """The SDK's external storage, whose drivers mark what a workflow stores as a tool leg's input."""

    def with_context(self, context: SerializationContext) -> TasksExternalStorage:
        if not (isinstance(context, ActivitySerializationContext) and context.activity_type == RUN_TOOL_LEG):
            return self
        drivers = [d.marking() if isinstance(d, LegInputsByReference) else d for d in self.drivers]
        return dataclasses.replace(self, drivers=drivers)


async def fetch_leg_input(converter: DataConverter, reference: StoredLegInput) -> Payload:
    """Read the leg's input from the store, still encoded (a stand-in when the store lost it);
    raises while the store is away."""
    storage = converter.external_storage
    driver = next((d for d in (storage.drivers if storage else ()) if d.name() == reference.driver), None)
    if not isinstance(driver, LegInputsByReference):
        raise RuntimeError(
            f"This worker has no payload store {reference.driver!r} to read the leg's input from; give every "
            "server and worker of the task queue the same FASTMCP_TEMPORAL_PAYLOAD_STORE."
        )
    return await driver.fetch(reference)
