"""A call's arguments carried through the workflow as the caller's payload, never decoded there.

A tool's arguments may be tens of megabytes. Decoding them into the workflow's input and
encoding them again into every leg's took seconds of CPU per workflow task, past the
SDK's deadlock detector, and held copies for as long as the workflow stayed cached. So
the server converts them to a payload of their own, the workflow's second input, which
the workflow takes as a `RawValue`; to schedule a leg it joins the leg's converted input
and that payload, bytes untouched, into one payload of its own encoding, which the leg
splits and decodes (`activities/tool_leg`). Both ends are here, so the layout has one owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.common.v1 import Payload, Payloads
from temporalio.common import RawValue

JOINED_ENCODING = b"binary/fastmcp-temporal-leg-and-arguments"


@dataclass(frozen=True)
class JoinedLegInput(RawValue):
    """A leg's input joined with the call's arguments: Temporal passes its payload as it is.

    `leg` keeps the leg's number readable to the workflow's interceptors (`worker/_metrics`)."""

    leg: int = 1


def joined(leg: int, leg_input: Payload, arguments: Payload) -> JoinedLegInput:
    """One payload holding the leg's converted input, then the arguments' payload."""
    data = Payloads(payloads=[leg_input, arguments]).SerializeToString()
    return JoinedLegInput(Payload(metadata={"encoding": JOINED_ENCODING}, data=data), leg)


def split(payload: Payload) -> tuple[Payload, Payload] | None:
    """The leg's input and the arguments' payload `joined` put in `payload`; None for a leg's
    input that came whole (tasks created before the arguments travelled apart)."""
    if payload.metadata.get("encoding") != JOINED_ENCODING:
        return None
    parts = Payloads()
    parts.ParseFromString(payload.data)
    leg_input, arguments = parts.payloads
    return leg_input, arguments
