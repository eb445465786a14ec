"""How large a task's payloads are once encoded, and which sizes a task refuses up front.

Temporal refuses any payload over its blob limit (2 MiB by default); the payload store
(`_stores`) takes larger ones, up to `stored_payload_limit`. What neither can take
(over `stored_payload_limit`, or over `payload_limit` without a store) is refused
before anything runs: arguments at `tools/call`, answers at `tasks/update`, a result
by ending the task once with an error naming the size. Every size is measured as
Temporal and the store see it: encoded, after the payload converter and the
encryption codec.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.converter import DataConverter, PayloadCodec

_INLINE_MARGIN = 16 * 1024
"""Room a task leaves in an inline payload for what wraps it (ids, answers' framing)."""
_CODEC_SLACK = 64
"""Bytes a codec's block padding may add beyond its measured growth."""


@dataclass(frozen=True)
class PayloadLimits:
    """How large one encoded payload of a task may be, and why."""

    limit: int
    stored: bool

    def refusal(self, what: str, size: int) -> str | None:
        """Why `size` encoded bytes of `what` cannot be kept, or None when they can."""
        if size <= self.limit:
            return None
        if self.stored:
            fix = "raise FASTMCP_TEMPORAL_STORED_PAYLOAD_LIMIT, or send less"
        else:
            fix = (
                "set FASTMCP_TEMPORAL_PAYLOAD_STORE to a folder or s3://bucket so large payloads "
                "are stored outside Temporal, or send less"
            )
        return f"{what}: {size:,} bytes encoded, over the limit of {self.limit:,} bytes; {fix}."


def limits_of(converter: DataConverter, payload_limit: int, stored_payload_limit: int) -> PayloadLimits:
    """What one payload may weigh with this converter's store (or lack of one)."""
    if converter.external_storage is not None:
        return PayloadLimits(stored_payload_limit, stored=True)
    return PayloadLimits(payload_limit - _INLINE_MARGIN, stored=False)


async def encoded_size(converter: DataConverter, value: Any) -> int:
    """The bytes `value` takes once converted and encoded, before any store."""
    return (await converted(converter, value))[1]


async def converted(converter: DataConverter, value: Any) -> tuple[RawValue, int]:
    """`value` converted once, for Temporal to send as it is, and the bytes it takes encoded."""
    (payload,) = converter.payload_converter.to_payloads([value])
    return RawValue(payload), await encoded_payload_size(converter, payload)


async def encoded_payload_size(converter: DataConverter, payload: Payload) -> int:
    """The bytes a converted payload takes once encoded, before any store.

    The codec's growth is measured once per codec, so a size check never pays for
    encrypting a large value twice.
    """
    return await encoded_size_of(converter, payload.ByteSize())


async def encoded_size_of(converter: DataConverter, converted_size: int) -> int:
    """The bytes a payload that converted to `converted_size` bytes takes once encoded."""
    if converter.payload_codec is None:
        return converted_size
    fixed, per_byte = await _growth(converter.payload_codec)
    return math.ceil(fixed + per_byte * converted_size) + _CODEC_SLACK


async def converter_budget(converter: DataConverter, encoded_limit: int) -> int:
    """The most bytes a value may convert to and still encode within `encoded_limit`."""
    if converter.payload_codec is None:
        return encoded_limit
    fixed, per_byte = await _growth(converter.payload_codec)
    return int((encoded_limit - fixed) / per_byte)


_codec_growth: weakref.WeakKeyDictionary[PayloadCodec, tuple[int, float]] = weakref.WeakKeyDictionary()


async def _growth(codec: PayloadCodec) -> tuple[int, float]:
    """A codec's fixed overhead and growth per byte, measured once on two probes."""
    if codec not in _codec_growth:
        probe = 64 * 1024
        empty, full = await codec.encode(
            [Payload(metadata={"encoding": b"binary/plain"}, data=b"\0" * n) for n in (0, probe)]
        )
        _codec_growth[codec] = (empty.ByteSize(), (full.ByteSize() - empty.ByteSize()) / probe)
    return _codec_growth[codec]
