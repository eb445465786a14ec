"""What a task's history may hold: when a run is full, and whether a leg's input fits.

Temporal terminates a workflow whose history passes 50 MiB and refuses, on every retry, a
workflow task with a command whose payload is too large. The task workflow asks here
before it schedules a leg or carries a round into a new run; every answer is a pure
function of the task's input and what this run has recorded, so it replays the same.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from fastmcp_temporal.workflows.models import LegInput, TaskInput

# Continue as new past this many bytes of history too (Temporal terminates a task at 50 MiB),
# or when Temporal suggests it.
HISTORY_BYTES_LIMIT = 8 * 1024 * 1024


def run_full(task: TaskInput) -> bool:
    """Whether this run's history is past the task's event limit or the byte limit.

    Not Temporal's suggestion: inside a round a new run starts with the open asks in its
    memo and the answers in its input, a few MiB that Temporal may already call enough."""
    info = workflow.info()
    return (
        info.get_current_history_length() > task.history_events_limit
        or info.get_current_history_size() > HISTORY_BYTES_LIMIT
    )


def converted(value: Any) -> Payload:
    (payload,) = workflow.payload_converter().to_payloads([value])
    return payload


def converted_size(value: Any) -> int:
    return converted(value).ByteSize()


def size_of(arguments: RawValue | None) -> int:
    """The converted bytes of the arguments when they are the workflow's second input; 0 when they
    are in the call."""
    return 0 if arguments is None else arguments.payload.ByteSize()


def over_budget(task: TaskInput, leg: LegInput, arguments: RawValue | None) -> str | None:
    """Why the leg's input cannot enter history, checked before scheduling it.

    Temporal refuses the whole workflow task when one command's payload is too large,
    and refuses it again on every retry; a leg that cannot be scheduled ends the task.
    """
    if task.leg_input_budget is None or (leg.input_responses is None and leg.request_state is None):
        return None  # the arguments alone: measured, with more, when the task was created
    size = converted_size(leg) + size_of(arguments)
    if size <= task.leg_input_budget:
        return None
    if task.call.outcome_stored:
        where, fix = "the payload store takes", "raise FASTMCP_TEMPORAL_STORED_PAYLOAD_LIMIT, or answer with less"
    else:
        where, fix = "Temporal history takes", "set FASTMCP_TEMPORAL_PAYLOAD_STORE so large payloads are stored outside history"
    return (
        f"The tool's arguments and answers together are {size:,} bytes, more than the "
        f"{task.leg_input_budget:,} bytes {where} for a leg's input; {fix}."
    )
