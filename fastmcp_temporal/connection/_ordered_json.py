"""JSON payloads that keep each object's key order.

Temporal's default JSON converter sorts object keys, so a tool's `structuredContent`
and `_meta` would reach the caller in another order than a synchronous call sends
them. Every client and worker of a task queue encodes with the order the tool built
instead, so tasks and durable calls answer with the same bytes as an inline call.
Decoding is unchanged: any Temporal JSON reader reads these payloads.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

from fastmcp_temporal.connection._unreadable import UnreadablePayloadConverter


class OrderedJSONPayloadConverter(JSONPlainPayloadConverter):
    """`json/plain` exactly as Temporal writes it, but with keys in insertion order."""

    def to_payload(self, value: Any) -> Payload | None:
        # The text is dropped as soon as it is encoded: a large value is held twice at most, not three times.
        data = json.dumps(value, cls=AdvancedJSONEncoder, separators=(",", ":")).encode()
        return Payload(metadata={"encoding": self.encoding.encode()}, data=data)


class TasksPayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters, with `OrderedJSONPayloadConverter` for JSON,
    and the stand-in a store returns for a payload it lost (`_unreadable`)."""

    def __init__(self) -> None:
        super().__init__(
            UnreadablePayloadConverter(),
            *(
                OrderedJSONPayloadConverter() if isinstance(converter, JSONPlainPayloadConverter) else converter
                for converter in DefaultPayloadConverter.default_encoding_payload_converters
            ),
        )


def keeping_key_order(converter: DataConverter) -> DataConverter:
    """`converter` writing JSON in key order, unless it brings a payload converter of its own."""
    if converter.payload_converter_class is not DefaultPayloadConverter:
        return converter
    return dataclasses.replace(converter, payload_converter_class=TasksPayloadConverter)
