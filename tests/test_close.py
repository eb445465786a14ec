"""A durable call reads its outcome from the close event in hand exactly as `handle.result()` reads it.

Unit tests, no dev server: each kind of close event is fed both to `server/_close.py` and
to temporalio's own `WorkflowHandle.result(follow_runs=False)` (its history read stubbed to
yield that one event), which must return the same result or raise the same error; so an
upgrade of temporalio that reads a close otherwise fails here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import (
    HistoryEvent,
    WorkflowExecutionCanceledEventAttributes,
    WorkflowExecutionCompletedEventAttributes,
    WorkflowExecutionContinuedAsNewEventAttributes,
    WorkflowExecutionFailedEventAttributes,
    WorkflowExecutionTerminatedEventAttributes,
    WorkflowExecutionTimedOutEventAttributes,
)
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from fastmcp_temporal.server._close import is_close, next_run, result_of
from fastmcp_temporal.workflows.models import TaskOutcome

pytestmark = pytest.mark.anyio

CONVERTER = DataConverter.default
CLIENT: Any = SimpleNamespace(data_converter=CONVERTER, namespace="default")


class _ClosedWith(WorkflowHandle[Any, TaskOutcome]):
    """A handle whose run's history is the one close event given."""

    def __init__(self, close: HistoryEvent) -> None:
        super().__init__(CLIENT, "call-wf", result_run_id="run-1", result_type=TaskOutcome)
        self._close = close

    def _fetch_history_events_for_run(self, *args: Any, **kwargs: Any) -> Any:
        return self._events()

    async def _events(self) -> AsyncIterator[HistoryEvent]:
        yield self._close


async def _closes() -> dict[str, HistoryEvent]:
    failure = Failure()
    await CONVERTER.encode_failure(ApplicationError("the tool broke", {"n": 1}, type="Broken"), failure)
    details = await CONVERTER.encode_wrapper(["why"])
    return {
        "completed": HistoryEvent(workflow_execution_completed_event_attributes=WorkflowExecutionCompletedEventAttributes(
            result=await CONVERTER.encode_wrapper([TaskOutcome(result={"content": []})]))),
        "completed empty": HistoryEvent(
            workflow_execution_completed_event_attributes=WorkflowExecutionCompletedEventAttributes()),
        "failed": HistoryEvent(
            workflow_execution_failed_event_attributes=WorkflowExecutionFailedEventAttributes(failure=failure)),
        "cancelled": HistoryEvent(
            workflow_execution_canceled_event_attributes=WorkflowExecutionCanceledEventAttributes(details=details)),
        "terminated": HistoryEvent(workflow_execution_terminated_event_attributes=(
            WorkflowExecutionTerminatedEventAttributes(reason="reset", details=details))),
        "terminated without reason": HistoryEvent(
            workflow_execution_terminated_event_attributes=WorkflowExecutionTerminatedEventAttributes()),
        "timed out": HistoryEvent(
            workflow_execution_timed_out_event_attributes=WorkflowExecutionTimedOutEventAttributes()),
    }


@pytest.mark.parametrize("kind", ["completed", "completed empty", "failed", "cancelled", "terminated",
                                  "terminated without reason", "timed out"])
async def test_a_close_reads_as_handle_result_reads_it(kind: str) -> None:
    close = (await _closes())[kind]
    assert is_close(close) and next_run(close) == ""
    try:
        expected = await _ClosedWith(close).result(follow_runs=False)
    except WorkflowFailureError as failed:
        with pytest.raises(WorkflowFailureError) as ours:
            await result_of(close, CLIENT, "call-wf", TaskOutcome)
        assert type(ours.value.cause) is type(failed.cause) and str(ours.value.cause) == str(failed.cause)
        assert getattr(ours.value.cause, "details", None) == getattr(failed.cause, "details", None)
        assert getattr(ours.value.cause, "type", None) == getattr(failed.cause, "type", None)
        return
    assert await result_of(close, CLIENT, "call-wf", TaskOutcome) == expected


async def test_a_close_that_hands_on_names_the_run_handle_result_follows() -> None:
    continued = HistoryEvent(workflow_execution_continued_as_new_event_attributes=(
        WorkflowExecutionContinuedAsNewEventAttributes(new_execution_run_id="run-2")))
    retried = HistoryEvent(workflow_execution_failed_event_attributes=(
        WorkflowExecutionFailedEventAttributes(new_execution_run_id="run-3")))
    assert [next_run(continued), next_run(retried)] == ["run-2", "run-3"]
    assert is_close(continued) and not is_close(HistoryEvent()) and not is_close(None)
