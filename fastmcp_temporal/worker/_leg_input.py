"""A leg's input as its body needs it: read from the payload store, and joined with the call's arguments.

Temporal hands the leg its input whole, or, when the workflow stored it (arguments or answers
of 256 KiB or more), a reference to it (`connection/_leg_inputs`). The leg reads a stored input
itself while it heartbeats, waiting for a store that is away (`_store_outage`), so an outage
spends no attempt. An input the store lost becomes an `UnreadablePayload`, which the leg hands
back and the workflow ends the task with. A workflow whose arguments are its second input joins
them to the leg's input undecoded (`workflows/arguments`); they are put back in the call here.
"""

from __future__ import annotations

from functools import partial

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from fastmcp_temporal.connection._leg_inputs import StoredLegInput, fetch_leg_input
from fastmcp_temporal.worker._heartbeat import HeartbeatCadence, Ticker
from fastmcp_temporal.worker._progress import LegProgress
from fastmcp_temporal.worker._store_outage import until_store_answers
from fastmcp_temporal.workflows.arguments import Joined, is_joined
from fastmcp_temporal.workflows.models import LegInput, UnreadablePayload


async def leg_input(
    leg: RawValue, progress: LegProgress | None, cadence: HeartbeatCadence
) -> LegInput | UnreadablePayload:
    """The leg's input as Temporal delivered it, or read from the store first, heartbeating
    `progress` at `cadence` (none for a local attempt, which cannot heartbeat)."""
    payload = leg.payload
    if (reference := StoredLegInput.of(payload)) is not None:
        payload = await _fetched(reference, progress, cadence)
    converter = activity.payload_converter()
    if not is_joined(payload):
        return converter.from_payload(payload, LegInput)
    parts = converter.from_payload(payload, Joined)
    return parts.leg.with_arguments(parts.arguments)


async def _fetched(reference: StoredLegInput, progress: LegProgress | None, cadence: HeartbeatCadence) -> Payload:
    """The stored input, decoded by the codec; waiting while the store is away."""
    converter = activity.client().data_converter
    fetch = partial(fetch_leg_input, converter, reference)
    if progress is None:
        payload = await until_store_answers(fetch, "reading its stored input", None)
    else:
        async with Ticker("(reading its input)", progress, cadence).running():
            payload = await until_store_answers(fetch, "reading its stored input", progress)
        # Decoding a big input holds the loop, as Temporal's own decode did before the first beat.
        activity.heartbeat(progress.details())
    if converter.payload_codec is None:
        return payload
    (decoded,) = await converter.payload_codec.decode([payload])
    return decoded
