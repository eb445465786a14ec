"""A durable call reads its outcome from the close event in hand, through temporalio's own `handle.result()`.

Unit tests, no dev server: each kind of close event is given to `server/_close.py` with a
client whose connection fails on any use, so the result (or the `WorkflowFailureError`) a
caller gets is read from that event alone, asking Temporal nothing.
"""

from __future__ import annotations

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
from temporalio.client import WorkflowFailureError
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError

from fastmcp_temporal.server._close import is_close, next_run, result_of
from fastmcp_temporal.workflows.models import TaskOutcome

pytestmark = pytest.mark.anyio

CONVERTER = DataConverter.default


class _NoConnection:
    """A service client that fails the test on any use: a close is read without asking Temporal."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the close was read from Temporal again ({name})")


CLIENT: Any = SimpleNamespace(service_client=_NoConnection(), data_converter=CONVERTER, namespace="default")


async def _closes() -> dict[str, HistoryEvent]:
    failure = Failure()
    await CONVERTER.encode_failure(ApplicationError("the tool broke", {"n": 1}, type="Broken"), failure)
    details = await CONVERTER.encode_wrapper(["why"])
    return {
        "completed": HistoryEvent(
            workflow_execution_completed_event_attributes=WorkflowExecutionCompletedEventAttributes(
                result=await CONVERTER.encode_wrapper([TaskOutcome(result={"content": []})])
            )
        ),
        "completed empty": HistoryEvent(
            workflow_execution_completed_event_attributes=WorkflowExecutionCompletedEventAttributes()
        ),
        "failed": HistoryEvent(
            workflow_execution_failed_event_attributes=WorkflowExecutionFailedEventAttributes(failure=failure)
        ),
        "cancelled": HistoryEvent(
            workflow_execution_canceled_event_attributes=WorkflowExecutionCanceledEventAttributes(
                details=details
            )
        ),
        "terminated": HistoryEvent(
            workflow_execution_terminated_event_attributes=(
                WorkflowExecutionTerminatedEventAttributes(reason="reset", details=details)
            )
        ),
        "terminated without reason": HistoryEvent(
            workflow_execution_terminated_event_attributes=WorkflowExecutionTerminatedEventAttributes()
        ),
        "timed out": HistoryEvent(
            workflow_execution_timed_out_event_attributes=WorkflowExecutionTimedOutEventAttributes()
        ),
    }


async def test_a_completed_close_reads_as_its_result() -> None:
    closes = await _closes()
    outcome = await result_of(closes["completed"], CLIENT, "call-wf", TaskOutcome)
    assert outcome == TaskOutcome(result={"content": []})
    assert await result_of(closes["completed empty"], CLIENT, "call-wf", TaskOutcome) is None


@pytest.mark.parametrize(
    ("kind", "cause", "details"),
    [
        ("failed", ApplicationError, ({"n": 1},)),
        ("cancelled", CancelledError, ("why",)),
        ("terminated", TerminatedError, ("why",)),
        ("terminated without reason", TerminatedError, ()),
        ("timed out", WorkflowTimeoutError, None),
    ],
)
async def test_a_close_without_a_result_raises_what_handle_result_raises(
    kind: str, cause: type[Exception], details: tuple[Any, ...] | None
) -> None:
    close = (await _closes())[kind]
    assert is_close(close) and next_run(close) == ""
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(close, CLIENT, "call-wf", TaskOutcome)
    assert type(failed.value.cause) is cause
    if details is not None:
        assert tuple(getattr(failed.value.cause, "details")) == details
    if kind == "failed":
        assert getattr(failed.value.cause, "message") == "the tool broke"
        assert getattr(failed.value.cause, "type") == "Broken"
    if kind == "terminated":
        assert getattr(failed.value.cause, "message") == "reset"


async def test_a_close_that_hands_on_names_the_run_handle_result_follows() -> None:
    continued = HistoryEvent(
        workflow_execution_continued_as_new_event_attributes=(
            WorkflowExecutionContinuedAsNewEventAttributes(new_execution_run_id="run-2")
        )
    )
    retried = HistoryEvent(
        workflow_execution_failed_event_attributes=(
            WorkflowExecutionFailedEventAttributes(new_execution_run_id="run-3")
        )
    )
    assert [next_run(continued), next_run(retried)] == ["run-2", "run-3"]
    assert is_close(continued) and not is_close(HistoryEvent()) and not is_close(None)
