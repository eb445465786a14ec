"""A call's arguments carried through the workflow as the caller's payload, never decoded there.

A tool's arguments may be tens of megabytes. Decoding them into the workflow's input and
encoding them again into every leg's took seconds of CPU per workflow task, past the
SDK's deadlock detector, and held copies for as long as the workflow stayed cached. So
the server converts them to a payload of their own, the workflow's second input, which
the workflow takes as a `RawValue`; to schedule a leg it splices the leg's converted input
and the arguments' JSON, bytes untouched, into one JSON payload, `{"leg": …, "arguments": …}`,
which the leg decodes (`worker/_leg_input`) and the Temporal UI shows as any JSON input.
Both ends are here, so the layout has one owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from fastmcp_temporal.workflows.models import LegInput

JSON_ENCODING = b"json/plain"
JOINED = "fastmcp-temporal-joined"
"""The metadata key that marks a leg's input spliced with the call's arguments."""


@dataclass(frozen=True)
class JoinedLegInput(RawValue):
    """A leg's input joined with the call's arguments: Temporal passes its payload as it is.

    `leg` keeps the leg's number readable to the workflow's interceptors (`worker/_metrics`)."""

    leg: int = 1


@dataclass
class Joined:
    """What a joined leg input decodes to."""

    leg: LegInput
    arguments: dict[str, Any]


def joined(leg: int, leg_input: Payload, arguments: Payload) -> JoinedLegInput:
    """One JSON payload spliced from the leg's converted input and the arguments' JSON payload."""
    data = b'{"leg":' + leg_input.data + b',"arguments":' + arguments.data + b"}"
    return JoinedLegInput(Payload(metadata={"encoding": JSON_ENCODING, JOINED: b"1"}, data=data), leg)


def is_joined(payload: Payload) -> bool:
    """Whether `payload` is a joined leg input, not one that came whole (tasks created before the
    arguments became the workflow's second input)."""
    return JOINED in payload.metadata
