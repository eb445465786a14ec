"""What an operator command reads of MCP tasks in Temporal, short of their histories.

An operator holds the Temporal namespace, not a caller's token, so a task is found
across scopes by its workflow id (`mcp-task/<scope tag>/<task id>`): directly when the
scope is given or anonymous, else by a bounded visibility scan over `McpTaskWorkflow`
executions (visibility cannot match an id suffix). A listing is one visibility query
(tool, MCP status, scope, kind). Each task's MCP status is worked out without reading
its result, by the rule `tasks/get` uses (`server/_status.py`), and its row (the stable
`--json` shape, docs/operations.md) ages it on Temporal's clock. Payloads decode to
plain JSON, or to `UNREADABLE` when encrypted with a key the command does not hold.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal.cli._operator import OperatorError
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, WorkflowKind, workflow_id, workflow_id_prefix
from fastmcp_temporal.server._status import listed_status
from fastmcp_temporal.workflows.models import WORKFLOW_NAME
from fastmcp_temporal.workflows.task import SCOPE_ATTRIBUTE, STATUS_ATTRIBUTE, TOOL_ATTRIBUTE

KINDS: tuple[WorkflowKind, ...] = get_args(WorkflowKind)
_KIND_PREFIXES = {kind: workflow_id_prefix(kind) for kind in KINDS}
STATUS_QUERIES = {
    "working": "McpTaskStatus = 'working' AND ExecutionStatus = 'Running'",
    "input_required": "McpTaskStatus = 'input_required' AND ExecutionStatus = 'Running'",
    "completed": "McpTaskStatus IN ('working', 'completed') AND ExecutionStatus = 'Completed'",
    "failed": "(McpTaskStatus = 'failed' OR ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut'))",
    "cancelled": "(McpTaskStatus = 'cancelled' OR ExecutionStatus = 'Canceled')",
}
"""The visibility query of each MCP status (the UI views in docs/operations.md). A task that succeeds keeps
its last published `McpTaskStatus`, 'working' (0.2.0 published 'completed'): its execution's
COMPLETED status says it, and a task that completes with an error outcome is published 'failed'."""
TEMPORAL_CLOCK = TemporalClock()
"""Temporal's clock, which every age this command prints or decides by is measured on (one command a process)."""
UNREADABLE = object()
"""A payload encrypted with a key the command does not hold."""


@dataclass
class FoundTask:
    task_id: str
    handle: WorkflowHandle[Any, Any]
    description: WorkflowExecutionDescription

    def status(self) -> str:
        extended = self.description.raw_description.workflow_extended_info
        return task_status(self.description, cancel_requested=extended.cancel_requested)


async def find(client: Client, task_id: str, scope: str | None, scan_limit: int) -> FoundTask:
    """The task's workflow: by id when the scope is known (or anonymous), else by a visibility scan."""
    direct = (
        task_id if task_id.startswith(tuple(_KIND_PREFIXES.values())) else workflow_id(scope or ANONYMOUS_SCOPE_TAG, task_id)
    )
    found = await describe(client, direct)
    if found is None and scope is None and direct != task_id:
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
        async for execution in client.list_workflows(query, limit=scan_limit):
            if execution.id.endswith(f"/{task_id}"):
                found = await describe(client, execution.id)
                break
    if found is None:
        where = f"in scope {scope!r}" if scope else f"among the newest {scan_limit} tasks of any scope"
        raise OperatorError(
            f"No task {task_id!r} {where} in namespace {client.namespace!r}. Check the id and --namespace "
            "(the task may also have expired); pass --scope or a larger --scan-limit to search further."
        )
    return FoundTask(direct.rsplit("/", 1)[-1], *found)


async def describe(
    client: Client, id: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription] | None:
    """The workflow's handle and description; None when Temporal has no such workflow."""
    handle = client.get_workflow_handle(id)
    try:
        return handle, await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


def task_status(execution: WorkflowExecution, *, cancel_requested: bool = False) -> str:
    """The MCP status of a task's workflow, without reading its result: a closed task's as it ended."""
    published = execution.typed_search_attributes.get(STATUS_ATTRIBUTE)
    asking = published == "input_required"
    return listed_status(execution, awaiting_input=asking, cancel_requested=cancel_requested)


def list_query(args: argparse.Namespace) -> str:
    """The visibility query of `tasks list`'s filters."""
    clauses = [f"WorkflowType = '{WORKFLOW_NAME}'", "ExecutionStatus != 'ContinuedAsNew'"]
    if args.tool:
        clauses.append(f"McpTool = {_quoted(args.tool)}")
    if args.scope:
        clauses.append(f"McpScope = {_quoted(args.scope)}")
    if args.status:
        clauses.append(STATUS_QUERIES[args.status])
    if args.kind:
        clauses.append(f"WorkflowId STARTS_WITH {_quoted(_KIND_PREFIXES[args.kind])}")
    return " AND ".join(clauses)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def row(execution: WorkflowExecution) -> dict[str, Any]:
    """The task as `tasks list` shows it."""
    attributes = execution.typed_search_attributes
    return {
        "taskId": execution.id.rsplit("/", 1)[-1],
        "kind": next(kind for kind, prefix in _KIND_PREFIXES.items() if execution.id.startswith(prefix)),
        "tool": attributes.get(TOOL_ATTRIBUTE),
        "status": task_status(execution),
        "scope": attributes.get(SCOPE_ATTRIBUTE) or execution.id.split("/")[1],
        "createdAt": execution.start_time.isoformat(),
        "closedAt": execution.close_time.isoformat() if execution.close_time else None,
        "durationSeconds": _duration(execution),
        "workflowId": execution.id,
        "runId": execution.run_id,
    }


def _duration(execution: WorkflowExecution) -> float:
    end = execution.close_time or TEMPORAL_CLOCK.now()
    return round((end - execution.start_time).total_seconds(), 3)


async def decoded(client: Client, payloads: Sequence[Payload]) -> Any:
    """The first payload as plain JSON, or `UNREADABLE` when encrypted with a key we lack."""
    try:
        (value,) = await client.data_converter.decode(payloads)
    except Exception:
        return UNREADABLE
    return value


def field(value: Any, name: str) -> Any:
    """A decoded object's field, `{}` when it is missing or empty or the value is no object."""
    return (value.get(name) or {}) if isinstance(value, dict) else {}
