"""A task's MCP status is worked out by one function, for `tasks/get` and the operators' CLI alike.

Unit tests, no dev server: the facts each caller gathers, and the status each answers.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus as Status

from fastmcp_temporal.cli._reading import task_status
from fastmcp_temporal.server._status import mcp_status
from fastmcp_temporal.workflows.task import STATUS_ATTRIBUTE


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        ({"cancel_requested": True, "awaiting_input": True}, "cancelled"),
        ({"awaiting_input": True}, "input_required"),
        ({}, "working"),
    ],
)
def test_a_running_task(facts: dict[str, Any], status: str) -> None:
    assert mcp_status(Status.RUNNING, **facts) == status


@pytest.mark.parametrize(
    ("execution", "facts", "status"),
    [
        (Status.CANCELED, {}, "cancelled"),
        (Status.COMPLETED, {"cancel_requested": True, "ending": "completed"}, "cancelled"),  # the answer holds
        (Status.COMPLETED, {"ending": "expired"}, "expired"),
        (Status.COMPLETED, {}, "completed"),
        (Status.TERMINATED, {}, "failed"),
        (Status.TIMED_OUT, {}, "failed"),
        (Status.FAILED, {}, "failed"),
        (Status.CONTINUED_AS_NEW, {}, "continued_as_new"),
        (None, {}, "unknown"),
    ],
)
def test_an_ended_task(execution: Status | None, facts: dict[str, Any], status: str) -> None:
    assert mcp_status(execution, **facts) == status


def _execution(status: Status, published: str | None) -> Any:
    attributes = {STATUS_ATTRIBUTE: published} if published else {}
    return SimpleNamespace(status=status, typed_search_attributes=SimpleNamespace(get=attributes.get))


@pytest.mark.parametrize(
    ("status", "published", "cancel_requested", "shown"),
    [
        (Status.RUNNING, None, False, "working"),
        (Status.RUNNING, "working", False, "working"),
        (Status.RUNNING, "input_required", False, "input_required"),
        (Status.RUNNING, "input_required", True, "cancelled"),
        (Status.CANCELED, "working", False, "cancelled"),
        (Status.COMPLETED, "input_required", False, "expired"),
        (Status.COMPLETED, "failed", False, "failed"),
        (Status.COMPLETED, "completed", False, "completed"),
        (Status.COMPLETED, "working", True, "completed"),  # an operator sees how a closed task ended
        (Status.COMPLETED, None, False, "completed"),
        (Status.TERMINATED, "working", False, "failed"),
        (Status.TIMED_OUT, "input_required", False, "failed"),
    ],
)
def test_the_cli_status_of_a_workflow(
    status: Status, published: str | None, cancel_requested: bool, shown: str
) -> None:
    assert task_status(_execution(status, published), cancel_requested=cancel_requested) == shown
