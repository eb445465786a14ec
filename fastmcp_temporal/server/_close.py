"""A run's close event read by temporalio's own `WorkflowHandle.result()`, for a caller that holds it already.

A durable call follows its run's history to relay what the tool says (`_relay.py`), so
the close event is in its hands when the run ends: asking `handle.result()` would read it
from Temporal a second time. `result_of` gives `handle.result()` that event instead, through
a client interceptor that answers the history read it makes, so the result is decoded, and
the `WorkflowFailureError` raised, by temporalio itself. A close that hands on to another
run (a continue-as-new; a retry or cron run, which this package never starts) has no
result: `next_run` names the run that result follows to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeGuard, cast

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowHistoryEventAsyncIterator,
)

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
    reader = Client(
        client.service_client,
        namespace=client.namespace,
        data_converter=client.data_converter,
        interceptors=[_OneCloseHistory(close)],
    )
    return await reader.get_workflow_handle(workflow_id, result_type=result_type).result(follow_runs=False)


class _OneCloseHistory(Interceptor):
    """A client whose every history read yields `close` and asks Temporal nothing."""

    def __init__(self, close: HistoryEvent) -> None:
        self._close = close

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _CloseReads(next, self._close)


class _CloseReads(OutboundInterceptor):
    """Answers a history read with the close in hand."""

    def __init__(self, next: OutboundInterceptor, close: HistoryEvent) -> None:
        super().__init__(next)
        self._close = close

    def fetch_workflow_history_events(
        self, input: FetchWorkflowHistoryEventsInput
    ) -> WorkflowHistoryEventAsyncIterator:
        # `result()` only iterates what this returns
        return cast(WorkflowHistoryEventAsyncIterator, _yielding(self._close))


async def _yielding(event: HistoryEvent) -> AsyncIterator[HistoryEvent]:
    yield event
