"""A run's close event read as `WorkflowHandle.result()` reads it, by a caller that holds it already.

A durable call follows its run's history to relay what the tool says (`_relay.py`), so
the close event is in its hands when the run ends: asking `handle.result()` would read it
from Temporal a second time. `result_of` maps it exactly as temporalio's
`WorkflowHandle.result()` does: the result decoded by the client's data converter in the
workflow's serialization context, or a `WorkflowFailureError` whose cause is the decoded
failure, a `CancelledError`, a `TerminatedError` or a `TimeoutError`. A close that hands
on to another run (a continue-as-new; a retry or cron run, which this package never
starts) has no result: `next_run` names the run that result follows to.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.exceptions import CancelledError, TerminatedError, TimeoutType
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError

_CLOSES = (
    "workflow_execution_completed_event_attributes",
    "workflow_execution_failed_event_attributes",
    "workflow_execution_canceled_event_attributes",
    "workflow_execution_terminated_event_attributes",
    "workflow_execution_timed_out_event_attributes",
    "workflow_execution_continued_as_new_event_attributes",
)
_HANDING_ON = (
    "workflow_execution_completed_event_attributes",
    "workflow_execution_failed_event_attributes",
    "workflow_execution_timed_out_event_attributes",
    "workflow_execution_continued_as_new_event_attributes",
)


def is_close(event: HistoryEvent | None) -> TypeGuard[HistoryEvent]:
    """Whether `event` closes its run."""
    return event is not None and any(event.HasField(close) for close in _CLOSES)


def next_run(close: HistoryEvent) -> str:
    """The run `close` hands on to, which `handle.result()` follows; empty when it ends the workflow."""
    for handing_on in _HANDING_ON:
        if close.HasField(handing_on):
            return str(getattr(close, handing_on).new_execution_run_id)
    return ""


async def result_of(close: HistoryEvent, client: Client, workflow_id: str, result_type: type | None) -> Any:
    """The result of the run `close` ended, or the `WorkflowFailureError` it ends in."""
    converter = client.data_converter.with_context(
        WorkflowSerializationContext(namespace=client.namespace, workflow_id=workflow_id)
    )
    if close.HasField("workflow_execution_completed_event_attributes"):
        payloads = close.workflow_execution_completed_event_attributes.result
        results = await converter.decode_wrapper(payloads, [result_type] if result_type else None)
        return results[0] if results else None
    raise WorkflowFailureError(cause=await _cause(close, converter))


async def _cause(close: HistoryEvent, converter: DataConverter) -> BaseException:
    if close.HasField("workflow_execution_failed_event_attributes"):
        return await converter.decode_failure(close.workflow_execution_failed_event_attributes.failure)
    if close.HasField("workflow_execution_canceled_event_attributes"):
        details = await converter.decode_wrapper(close.workflow_execution_canceled_event_attributes.details)
        return CancelledError("Workflow cancelled", *details)
    if close.HasField("workflow_execution_terminated_event_attributes"):
        terminated = close.workflow_execution_terminated_event_attributes
        details = await converter.decode_wrapper(terminated.details)
        return TerminatedError(terminated.reason or "Workflow terminated", *details)
    if close.HasField("workflow_execution_timed_out_event_attributes"):
        return WorkflowTimeoutError("Workflow timed out", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    raise RuntimeError("Unexpectedly missing new run ID from continue as new")
