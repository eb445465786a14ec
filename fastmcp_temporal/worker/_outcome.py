"""What a tool leg's outcome becomes before the activity returns it.

Kept inline, stored in the payload store with only its reference returned, or
replaced by an error result naming its size: that is the leg's decision, made by the
activity while it still heartbeats (`keepable` says why). The connection layer only
measures sizes and stores payloads.
"""

from __future__ import annotations

from temporalio.common import RawValue
from temporalio.converter import DataConverter

from fastmcp_temporal._wire import error_result_json
from fastmcp_temporal.connection._codec import EncryptionCodec
from fastmcp_temporal.connection._sizes import PayloadLimits, encoded_size
from fastmcp_temporal.workflows.models import LegOutcome, ToolCall


async def keepable(outcome: LegOutcome, call: ToolCall, converter: DataConverter) -> LegOutcome | RawValue:
    """The leg's outcome as it will be kept, or an error result naming its size.

    Checked while the leg still heartbeats: Temporal would refuse an oversize
    completion and run the tool body again, once per attempt. A large outcome is
    stored here too, and only its reference returned, because the SDK's own store
    runs after the activity stops heartbeating and a slow upload would time it out.
    """
    if call.outcome_limit is None:
        return outcome
    limits = PayloadLimits(call.outcome_limit, stored=call.outcome_stored)
    what = "The tool's result" if outcome.input_requests is None else "The tool's input requests"
    if refusal := limits.refusal(what, await encoded_size(converter, outcome)):
        return LegOutcome(result=error_result_json(refusal))
    codec = converter.payload_codec
    if converter.external_storage is None or not (codec is None or isinstance(codec, EncryptionCodec)):
        return outcome
    (payload,) = await converter.encode([outcome])
    return RawValue(payload) if payload.external_payloads else outcome
