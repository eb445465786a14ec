"""A task's MCP status, worked out in one place from what Temporal says of its workflow.

`tasks/get` (`_handlers.py`) and the operators' `fastmcp-temporal tasks` (`cli/_reading.py`) both
name a task's status from its execution's status, whether a cancel was requested, whether it
waits for input and, once it has ended, how it ended. Each gathers those facts its own way
(the memo's open asks or the published `McpTaskStatus`; the outcome read from history or the
status published last), and `mcp_status` alone turns them into the status; `listed_status` gathers
them from a visibility row, without reading the task's result. The groups of statuses the server
decides by (ended, running) are named here, and nowhere else.
"""

from __future__ import annotations

from typing import Literal, get_args

from mcp_types import TaskStatus
from temporalio.client import WorkflowExecution
from temporalio.client import WorkflowExecutionStatus as Status

from fastmcp_temporal.workflows.task import STATUS_ATTRIBUTE

Ending = Literal["completed", "failed", "expired"]
"""How an ended task ended, as its outcome (or the status it published last) says."""

MCP_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
"""Every status a task reads on the wire, in the order a task may pass through them."""
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""A task that reads one of these has ended: its answer never changes again."""
RUNNING_STATUSES: frozenset[str] = frozenset(MCP_STATUSES) - TERMINAL_STATUSES
"""A task that reads one of these may still change."""
SETTLED_STATUSES: frozenset[str] = TERMINAL_STATUSES | {"input_required"}
"""A task that reads one of these waits on its caller: it has ended, or it asks."""

_FAILED = (Status.FAILED, Status.TERMINATED, Status.TIMED_OUT)


def mcp_status(
    execution: Status | None,
    *,
    cancel_requested: bool = False,
    awaiting_input: bool = False,
    ending: Ending | None = None,
) -> str:
    """The task's MCP status: one of `TaskState`'s, or `expired` for an `ending` that says so.

    Args:
        execution: the workflow execution's status.
        cancel_requested: a cancel was requested. The task reads `cancelled` from then on, even when
            it went on to end otherwise (the wire's answer holds); pass it only while the task runs
            to report how a closed task ended.
        awaiting_input: a running task waits for answers to its input requests.
        ending: how an ended task ended, when known; otherwise a completed task reads `completed`
            and one that failed, was terminated or timed out reads `failed`.
    """
    if execution == Status.RUNNING:
        if cancel_requested:
            return "cancelled"
        return "input_required" if awaiting_input else "working"
    if execution == Status.CANCELED or cancel_requested:
        return "cancelled"
    if ending is not None:
        return ending
    if execution in _FAILED:
        return "failed"
    if execution == Status.COMPLETED:
        return "completed"
    return (execution.name if execution else "unknown").lower()


def listed_status(
    execution: WorkflowExecution, *, awaiting_input: bool, cancel_requested: bool = False
) -> str:
    """The MCP status of a task's workflow as a visibility row (or a description) shows it, without reading
    its result: a closed task's as it ended, by the status it published last."""
    published = execution.typed_search_attributes.get(STATUS_ATTRIBUTE)
    return mcp_status(
        execution.status,
        cancel_requested=cancel_requested and execution.status == Status.RUNNING,
        awaiting_input=awaiting_input,
        ending=_completed_as(published) if execution.status == Status.COMPLETED else None,
    )


def _completed_as(published: str | None) -> Ending:
    """How a completed workflow ended, by the status it published last."""
    if published == "input_required":
        return "expired"  # its TTL ran out while it waited for input
    # 'working': success is not published; 'completed': 0.2.0 published it; None: not searchable
    return "failed" if published == "failed" else "completed"
