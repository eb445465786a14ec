"""What a tool leg's outcome becomes before the activity returns it.

Kept inline, stored in the payload store with only its reference returned, or
replaced by an error result naming its size: that is the leg's decision, made by the
activity while it still heartbeats (`keepable` says why). The connection layer only
measures sizes and stores payloads. Keeping is a step of its own after the body
(`kept_outcome`): it waits for a store that is away (`_store_outage`), and an attempt
whose keep step failed otherwise is retried to keep the same outcome again.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from temporalio import activity
from temporalio.common import RawValue
from temporalio.converter import DataConverter

from fastmcp_temporal._task_json import error_result_json
from fastmcp_temporal.connection._codec import EncryptionCodec
from fastmcp_temporal.connection._sizes import PayloadLimits, encoded_size
from fastmcp_temporal.worker._progress import LegProgress
from fastmcp_temporal.worker._store_outage import until_store_answers
from fastmcp_temporal.workflows.models import LegOutcome, ToolCall


async def kept_outcome(
    body: asyncio.Future[LegOutcome], call: ToolCall, progress: LegProgress
) -> LegOutcome | RawValue:
    """The body's outcome as it will be kept: size-checked and stored while the leg still heartbeats,
    waiting for a store that is away.

    A durable call's outcome also carries the notices its last heartbeat may have missed.
    """
    outcome = await asyncio.shield(body)
    if progress.notices is not None:
        outcome = replace(outcome, notices=progress.notices.window())
    converter = activity.client().data_converter
    return await until_store_answers(
        lambda: keepable(outcome, call, converter), "storing the tool's result", progress
    )


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
