"""A round's answers: validated against the open requests, sized, signalled to the workflow.

`tasks/update` (`_handlers.py`) and a durable call relaying its tool's questions
(`_relay.py`) deliver answers the same way, so they get the same -32602 for an invalid
answer or one the next leg could not carry, and the workflow the same `submit_input`
signal. One rule, one home: a change to what an answer may be is made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._task_json import encode_answer
from fastmcp_temporal.connection._sizes import converted
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.workflows.models import SUBMIT_INPUT_SIGNAL, InputAnswers


def validated_answer(key: str, request: dict[str, Any], raw: Any) -> dict[str, Any]:
    """An answer to the outstanding request `key`, encoded as a leg reads it; -32602 when invalid."""
    try:
        return encode_answer(request, raw)
    except ValidationError as exc:
        raise invalid_answer(key, request, exc) from None


def invalid_answer(key: str, request: dict[str, Any], exc: ValidationError) -> MCPError:
    return MCPError(
        code=mcp_types.INVALID_PARAMS,
        message=f"Invalid answer for input request {key!r} ({request.get('method')}): {exc}",
    )


async def submit_answers(
    backend: Backend,
    handle: WorkflowHandle[Any, Any],
    answers: dict[str, Any],
    carried_bytes: int,
    left_open: Sequence[str] = (),
) -> bool:
    """Signal validated answers to a parked workflow (`submit_input`); False when it has closed.

    Refused (-32602) before anything is signalled when the next leg could not carry them: its
    input holds the arguments and every answer of this round (`carried_bytes` of them already
    applied or sent with the arguments), so it is measured whole, against the limit that will
    apply to it (Temporal's payload limit, or the store's); the workflow checks it again
    before the leg. Refused too when they would leave too little room to decline the round's
    questions `left_open`: a round the limit could no longer finish would wait for its TTL.
    """
    converter = backend.client.data_converter
    value, size = await converted(converter, InputAnswers(answers))
    what = "The next leg's input (the task's arguments with this round's answers)"
    if refusal := backend.payload_limits.refusal(what, size + carried_bytes):
        raise MCPError(code=mcp_types.INVALID_PARAMS, message=refusal)
    if left_open:
        _, closing = await converted(converter, InputAnswers({**answers, **dict.fromkeys(left_open, _DECLINED)}))
        if backend.payload_limits.refusal(what, closing + carried_bytes):
            limit = backend.payload_limits.limit
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=(
                    f"{what}: these answers leave {limit - size - carried_bytes:,} bytes under its limit of "
                    f"{limit:,} bytes, and the round's {len(left_open)} other open question(s) need "
                    f"{closing - size:,} bytes even declined, so the round could never be finished. "
                    "Answer with less; any question can still be declined."
                ),
            )
    try:
        await handle.signal(SUBMIT_INPUT_SIGNAL, value)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
    return True


_DECLINED = encode_answer({"method": "elicitation/create"}, {"action": "decline"})
"""The smallest answer a question takes: what the room kept for the round's open questions is measured with."""
