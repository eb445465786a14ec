"""A stored payload that is gone or altered ends its task, instead of wedging its workflow.

Temporal decodes a workflow task's payloads before the workflow sees them. A store
driver that raises there fails the workflow task, and Temporal retries it forever:
the task stays `working` on the wire, a cancel never closes it, its TTL never fires.
So a payload the store has lost for good (missing, truncated, altered) is retrieved
as a small stand-in instead, which converts to `UnreadablePayload`: the workflow
sees it where its input, a leg's outcome or an answer should be, and ends the task
`failed` with the reason. Reads (`tasks/get`) name the reason the same way.

A store that is only unreachable, or away (an empty mount point, another cluster's
store: `_store_marker` tells it from a lost payload), still raises: the workflow task
is retried and goes on, with nothing lost, once the store answers again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    EncodingPayloadConverter,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
)

from fastmcp_temporal.connection._wrapped_driver import WrappedDriver
from fastmcp_temporal.workflows.models import UnreadablePayload

ENCODING = "binary/fastmcp-temporal-unreadable"
_GONE_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class UnreadablePayloadConverter(EncodingPayloadConverter):
    """Converts the stand-in for a lost payload to `UnreadablePayload`, whatever type was expected."""

    @property
    def encoding(self) -> str:
        return ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        if not isinstance(value, UnreadablePayload):
            return None
        return Payload(metadata={"encoding": ENCODING.encode()}, data=value.reason.encode())

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        return UnreadablePayload(payload.data.decode(errors="replace"))


class LostPayloadsAsUnreadable(WrappedDriver):
    """`driver`, retrieving a payload it has lost for good as the `UnreadablePayload` stand-in."""

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await self._driver.retrieve(context, claims)
        except Exception as exc:
            if not lost_for_good(exc):
                raise
        return [await self._retrieve_one(context, claim) for claim in claims]  # which of them is lost

    async def _retrieve_one(self, context: StorageDriverRetrieveContext, claim: StorageDriverClaim) -> Payload:
        try:
            (payload,) = await self._driver.retrieve(context, [claim])
        except Exception as exc:
            if not lost_for_good(exc):
                raise
            return _stand_in(exc)
        return payload


def _stand_in(exc: Exception) -> Payload:
    reason = (
        f"A payload of this task is no longer in the payload store ({_describe(exc)}); it was deleted, "
        "expired or altered while the task could still read it. Keep stored payloads until their task "
        "has expired (fastmcp-temporal payloads gc removes only those), and give every server and worker "
        "the same FASTMCP_TEMPORAL_PAYLOAD_STORE."
    )
    return UnreadablePayloadConverter().to_payload(UnreadablePayload(reason)) or Payload()


def _describe(exc: BaseException) -> str:
    """The driver's own words: its message names the file or object, never the payload's content."""
    cause = exc.__cause__
    return f"{exc}: {cause}" if cause is not None and str(cause) not in str(exc) else str(exc)


def lost_for_good(exc: BaseException) -> bool:
    """Missing, or present but not the bytes that were stored: no retry brings it back."""
    if isinstance(exc, (FileNotFoundError, DecodeError)):
        return True
    if isinstance(exc, ValueError):  # the drivers' integrity checks
        return True
    return missing_object(exc)


def missing_object(exc: BaseException) -> bool:
    """The S3 driver's error for an object the bucket does not have."""
    return _s3_error_code(exc.__cause__) in _GONE_CODES


def _s3_error_code(exc: BaseException | None) -> str | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    return str(response.get("Error", {}).get("Code"))
