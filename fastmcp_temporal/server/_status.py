"""A task's MCP status, worked out in one place from what Temporal says of its workflow.

`tasks/get` (`_handlers.py`) and the operators' `fastmcp-temporal tasks` (`cli/_reading.py`) both
name a task's status from its execution's status, whether a cancel was requested, whether it
waits for input and, once it has ended, how it ended. Each gathers those facts its own way
(the memo's open asks or the published `McpTaskStatus`; the outcome read from history or the
status published last), and this function alone turns them into the status.
"""

from __future__ import annotations

from typing import Literal

from temporalio.client import WorkflowExecutionStatus as Status

Ending = Literal["completed", "failed", "expired"]
"""How an ended task ended, as its outcome (or the status it published last) says."""

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
