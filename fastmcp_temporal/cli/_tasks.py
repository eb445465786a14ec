"""`fastmcp-temporal tasks`: list, inspect, cancel and terminate MCP tasks from a terminal.

Durable synchronous calls (`sync_calls="workflow"`) run as the same workflow under
`mcp-call/...` ids; every command handles them too, and `list` tells the two kinds
apart (a `kind` column, `--kind task|call`). An operator holds the Temporal namespace,
not a caller's token, so every command works across scopes: a task id is found by its
workflow id (`mcp-task/<scope tag>/<task id>`), directly when the scope is given or
anonymous, else by a bounded visibility scan over `McpTaskWorkflow` executions
(visibility cannot match an id suffix). `cancel` has the semantics of `tasks/cancel`; `terminate` ends a task now,
without running its cleanup (and `cancel` terminates a task no worker runs, as
`tasks/cancel` does: `server/_stalled.py`). `list --stuck` finds what no worker can
move, whatever the cause (a worker without the key, a store it cannot reach, a bug in
workflow code, a build with no workers left): running tasks whose workflow task has
failed at least once and is being retried, or has waited for a worker past the grace,
or whose leg waits for its payload store (its heartbeats say so), with the reason and the fix. Tables print caller and tool text verbatim (`_plain`).
`--json` output is stable (docs/operations.md).

The connection options are local to this module for now; they read the same
`FASTMCP_TEMPORAL_*` environment as the extension.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import quote

from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.deployment.v1 import RoutingConfig
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
    DescribeWorkerDeploymentRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription, WorkflowHandle
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._settings import UI_URL_VARIABLE, TemporalTasksSettings
from fastmcp_temporal.cli._options import add_connection_options, setting_overrides
from fastmcp_temporal.connection._client import TemporalConnectionError, connect, resolve_profile
from fastmcp_temporal.connection._stores import PayloadStoreError
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, WorkflowKind, workflow_id, workflow_id_prefix
from fastmcp_temporal.server._stalled import (
    CANCELLED_REASON,
    EXPIRED_REASON,
    StalledTasks,
    newest_events_first,
    pinned_build,
    stalled,
    waiting_for_worker,
)
from fastmcp_temporal.server._status import Ending, mcp_status
from fastmcp_temporal.workflows.models import (
    INPUT_REQUESTS_MEMO,
    STORE_WAITING_DETAIL,
    SUBMIT_INPUT_SIGNAL,
    WORKFLOW_NAME,
)
from fastmcp_temporal.workflows.task import SCOPE_ATTRIBUTE, STATUS_ATTRIBUTE, TOOL_ATTRIBUTE

if TYPE_CHECKING:
    from rich.text import Text

MCP_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
KINDS: tuple[WorkflowKind, ...] = get_args(WorkflowKind)
_KIND_PREFIXES = {kind: workflow_id_prefix(kind) for kind in KINDS}
DEFAULT_UI_URL = "http://localhost:8233"
_DEFAULT_SCAN_LIMIT = 10_000
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
_STUCK_FROM_ATTEMPT = 2
"""A workflow task on this attempt or later has failed or timed out before, and is retried."""
_DESCRIBED_AT_ONCE = 20
_TEMPORAL_CLOCK = TemporalClock()
"""Temporal's clock, which every age this command prints or decides by is measured on (one command a process)."""
_DECRYPTION_FAILURES = frozenset({"InvalidToken", "UnknownEncryptionKeyError"})
"""Failure types of a worker whose keys cannot decrypt a task (Fernet's, and ours naming the key id)."""


class OperatorError(Exception):
    """A command cannot do what was asked; the message says why and what to do."""


def add_tasks_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `tasks list|show|cancel|terminate` under the `fastmcp-temporal` CLI."""
    tasks = commands.add_parser("tasks", help="List, inspect, cancel or terminate MCP tasks (operators).")
    verbs = tasks.add_subparsers(required=True, metavar="VERB")

    listing = verbs.add_parser("list", help="Tasks, newest first.")
    listing.add_argument("--tool", help="Only tasks of this tool (default: every tool)")
    listing.add_argument("--status", choices=MCP_STATUSES, help="Only tasks in this MCP status (default: any)")
    listing.add_argument("--scope", help="Only tasks of this caller scope tag, McpScope (default: every scope)")
    listing.add_argument(
        "--kind", choices=KINDS, help="Only tasks ('task') or durable synchronous calls ('call'); default both"
    )
    listing.add_argument("--limit", type=_positive, default=50, help="At most this many tasks (default 50)")
    listing.add_argument(
        "--stuck",
        action="store_true",
        help="Only running tasks whose workflow task keeps failing (no worker moves them), with the reason",
    )
    listing.add_argument(
        "--scan-limit",
        type=_positive,
        default=_DEFAULT_SCAN_LIMIT,
        help=f"Newest running tasks --stuck checks (default {_DEFAULT_SCAN_LIMIT})",
    )
    listing.add_argument("--json", action="store_true", help="A JSON array instead of a table")
    listing.set_defaults(run=_list)

    show = verbs.add_parser("show", help="One task: status, legs, input rounds, result or error.")
    show.add_argument("--json", action="store_true", help="A JSON object instead of a table")
    cancel = verbs.add_parser("cancel", help="Cancel a task, as tasks/cancel does.")
    terminate = verbs.add_parser("terminate", help="End a task now, without cleanup.")
    terminate.add_argument("--reason", required=True, help="Recorded in the workflow's history")
    for verb, run in ((show, _show), (cancel, _cancel), (terminate, _terminate)):
        verb.add_argument("task_id", help="The MCP taskId (or the full workflow id)")
        verb.add_argument(
            "--scope", help="The task's scope tag, to skip the search across scopes (default: search them)"
        )
        verb.add_argument(
            "--scan-limit",
            type=_positive,
            default=_DEFAULT_SCAN_LIMIT,
            help=f"Newest tasks searched for the id when the scope is unknown (default {_DEFAULT_SCAN_LIMIT})",
        )
        verb.set_defaults(run=run)

    for verb in (listing, show, cancel, terminate):
        verb.add_argument(
            "--ui-url", help=f"Temporal UI base URL for links ({UI_URL_VARIABLE}, default {DEFAULT_UI_URL})"
        )
        add_connection_options(verb)


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


# --- commands ----------------------------------------------------------------


def _list(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        await _TEMPORAL_CLOCK.read_once(client)
        if args.stuck:
            rows = await _stuck_rows(client, args)
        else:
            rows = [_row(e) async for e in client.list_workflows(_list_query(args), limit=args.limit)]
        rows.sort(key=lambda row: row["createdAt"], reverse=True)
        rows = rows[: args.limit]
        if args.json:
            _print_json(rows)
        else:
            _print_rows(rows, stuck=args.stuck)

    _execute(args, run)


def _show(args: argparse.Namespace) -> None:
    async def run(client: Client, ui_url: str) -> None:
        await _TEMPORAL_CLOCK.read_once(client)
        task = await _find(client, args.task_id, args.scope, args.scan_limit)
        shown = await _inspect(client, task, ui_url)
        if args.json:
            _print_json(shown)
        else:
            _print_task(shown)

    _execute(args, run)


def _cancel(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        task = await _find(client, args.task_id, args.scope, args.scan_limit)
        if task.description.status != Status.RUNNING:
            print(f"Task {task.task_id} already ended ({task.status()}); nothing to cancel.")
            return
        if not task.description.raw_description.workflow_extended_info.cancel_requested:
            await task.handle.cancel()
        if await StalledTasks(client, TemporalClock()).close_cancelled(task.handle):
            print(f"Cancelled task {task.task_id}: no worker could run its cancel, so it was ended in Temporal.")
            return
        print(f"Cancellation requested for task {task.task_id}; it reports 'cancelled' from now on.")

    _execute(args, run)


def _terminate(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        task = await _find(client, args.task_id, args.scope, args.scan_limit)
        if task.description.status != Status.RUNNING:
            raise OperatorError(f"Task {task.task_id} already ended ({task.status()}); nothing to terminate.")
        await task.handle.terminate(reason=args.reason)
        print(f"Terminated task {task.task_id}; it reports 'failed' from now on.")

    _execute(args, run)


# --- connection --------------------------------------------------------------


def _execute(args: argparse.Namespace, command: Any) -> None:
    """Connect, run the command, and turn a failure into a message and exit code 1."""
    try:
        asyncio.run(_connected(args, command))
    except (OperatorError, PayloadStoreError, RPCError) as exc:
        sys.exit(f"error: {exc}")


async def _connected(args: argparse.Namespace, command: Any) -> None:
    settings = _operator_settings(args)
    try:
        profile = resolve_profile(settings)
        if not profile.address:
            raise OperatorError(
                "No Temporal address: pass --address host:port or set FASTMCP_TEMPORAL_ADDRESS or "
                "TEMPORAL_ADDRESS (an embedded dev server logs its address when it starts)."
            )
        client = await connect(profile, settings)
    except TemporalConnectionError as exc:
        raise OperatorError(str(exc)) from None
    ui_url = (getattr(args, "ui_url", None) or os.environ.get(UI_URL_VARIABLE) or DEFAULT_UI_URL).rstrip("/")
    await command(client, ui_url)


def _operator_settings(args: argparse.Namespace) -> TemporalTasksSettings:
    """The connection from the options over `FASTMCP_TEMPORAL_*`; never the server's metrics or tracing."""
    try:
        settings = TemporalTasksSettings(**setting_overrides(args))
    except ValidationError as exc:
        raise OperatorError(str(exc)) from None
    return settings.model_copy(update={"metrics_address": None, "tracing": False})


# --- finding tasks -----------------------------------------------------------


@dataclass
class _FoundTask:
    task_id: str
    handle: WorkflowHandle[Any, Any]
    description: WorkflowExecutionDescription

    def status(self) -> str:
        extended = self.description.raw_description.workflow_extended_info
        return _mcp_status(self.description, cancel_requested=extended.cancel_requested)


async def _find(client: Client, task_id: str, scope: str | None, scan_limit: int) -> _FoundTask:
    """The task's workflow: by id when the scope is known (or anonymous), else by a visibility scan."""
    direct = (
        task_id if task_id.startswith(tuple(_KIND_PREFIXES.values())) else workflow_id(scope or ANONYMOUS_SCOPE_TAG, task_id)
    )
    found = await _describe(client, direct)
    if found is None and scope is None and direct != task_id:
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus != 'ContinuedAsNew'"
        async for execution in client.list_workflows(query, limit=scan_limit):
            if execution.id.endswith(f"/{task_id}"):
                found = await _describe(client, execution.id)
                break
    if found is None:
        where = f"in scope {scope!r}" if scope else f"among the newest {scan_limit} tasks of any scope"
        raise OperatorError(
            f"No task {task_id!r} {where} in namespace {client.namespace!r}. Check the id and --namespace "
            "(the task may also have expired); pass --scope or a larger --scan-limit to search further."
        )
    return _FoundTask(direct.rsplit("/", 1)[-1], *found)


async def _describe(
    client: Client, id: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription] | None:
    handle = client.get_workflow_handle(id)
    try:
        return handle, await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


def _mcp_status(execution: WorkflowExecution, *, cancel_requested: bool = False) -> str:
    """The MCP status of a task's workflow, without reading its result: a closed task's as it ended."""
    published = execution.typed_search_attributes.get(STATUS_ATTRIBUTE)
    return mcp_status(
        execution.status,
        cancel_requested=cancel_requested and execution.status == Status.RUNNING,
        awaiting_input=published == "input_required",
        ending=_completed_as(published) if execution.status == Status.COMPLETED else None,
    )


def _completed_as(published: str | None) -> Ending:
    """How a completed workflow ended, by the status it published last."""
    if published == "input_required":
        return "expired"  # its TTL ran out while it waited for input
    # 'working': success is not published; 'completed': 0.2.0 published it; None: not searchable
    return "failed" if published == "failed" else "completed"


def _list_query(args: argparse.Namespace) -> str:
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


# --- stuck tasks -------------------------------------------------------------


async def _stuck_rows(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The running tasks of the query whose workflow task keeps failing, described a few at a time."""
    query = f"{_list_query(args)} AND ExecutionStatus = 'Running'"
    executions = [e async for e in client.list_workflows(query, limit=args.scan_limit)]
    gate = asyncio.Semaphore(_DESCRIBED_AT_ONCE)

    async def checked(execution: WorkflowExecution) -> dict[str, Any] | None:
        async with gate:
            return await _stuck_row(client, execution)

    return [row for row in await asyncio.gather(*map(checked, executions)) if row is not None]


async def _stuck_row(client: Client, execution: WorkflowExecution) -> dict[str, Any] | None:
    """The task's row with its workflow task's attempt and why it failed, or None when it moves."""
    found = await _describe(client, execution.id)
    if found is None or found[1].run_id != execution.run_id:
        return None  # gone, or continued as new since it was listed
    description = found[1]
    attempt = description.raw_description.pending_workflow_task.attempt
    if attempt >= _STUCK_FROM_ATTEMPT:
        reason, fix = await _workflow_task_problem(client, execution), _FIX_FAILING
    elif stalled(description, _TEMPORAL_CLOCK.now()):
        reason, fix = await _no_worker_problem(client, description)
    elif (waiting := await _store_waiting(client, description)) is not None:
        reason, fix = waiting, _FIX_STORE
    else:
        return None
    row = _row(execution)
    row.update(workflowTaskAttempt=attempt, reason=reason, fix=fix)
    return row


_FIX_FAILING = (
    "Fix what the reason names on the workers (Temporal keeps retrying the workflow task), "
    "or end the task: fastmcp-temporal tasks terminate."
)


_FIX_STORE = (
    "Make the store FASTMCP_TEMPORAL_PAYLOAD_STORE names reachable and writable from the workers (mounted, "
    "this cluster's, not read-only); the leg goes on by itself, or end the task: fastmcp-temporal tasks cancel."
)


async def _store_waiting(client: Client, description: WorkflowExecutionDescription) -> str | None:
    """Why a running leg of the task waits for its payload store, as its last heartbeat says."""
    for pending in description.raw_description.pending_activities:
        if pending.heartbeat_details.payloads:
            details = await _decoded(client, pending.heartbeat_details.payloads)
            if isinstance(details, dict) and isinstance(waiting := details.get(STORE_WAITING_DETAIL), str):
                return waiting
    return None


async def _no_worker_problem(client: Client, description: WorkflowExecutionDescription) -> tuple[str, str]:
    """Why no worker takes the task's workflow task (the build it is pinned or routed to, when that
    build's workers last polled), and what makes one take it."""
    waited = waiting_for_worker(description, _TEMPORAL_CLOCK.now()) or timedelta()
    waiting = f"Its workflow task has waited {waited.total_seconds():.0f} s for a worker"
    queue = description.task_queue
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    answer = await client.workflow_service.describe_task_queue(request)
    polls = _last_polls(answer)
    move = f"temporal workflow update-options --workflow-id {description.id} --versioning-override-behavior"
    if (pinned := pinned_build(description)) is not None:
        deployment, build = pinned
        reason = f"{waiting}: the task is pinned to build {build!r} of worker deployment {deployment!r}, and "
        fix = (
            f"Start a worker of build {build!r} (--deployment-name {deployment} --build-id {build}), or move "
            f"the task to the current build: {move} auto_upgrade"
        )
        return reason + _seen(polls, pinned) + ".", fix
    routing = await _routing(client, polls)
    current, ramping = routing.current_deployment_version, routing.ramping_deployment_version
    if not current.build_id:
        reason = f"{waiting} of task queue {queue!r}: {_seen(polls, None)}."
        return reason, f"Start a worker for task queue {queue!r} (fastmcp-temporal worker --task-queue {queue})."
    deployment, targets = current.deployment_name, [(current.deployment_name, current.build_id)]
    routed = f"the current build {current.build_id!r}"
    if ramping.build_id:
        targets.append((ramping.deployment_name, ramping.build_id))
        routed += f" or the ramping build {ramping.build_id!r} ({routing.ramping_version_percentage:g}%)"
    reason = (
        f"{waiting}: Temporal routes it to {routed} of worker deployment {deployment!r}, and "
        + "; ".join(_seen(polls, target) for target in targets)
        + "."
    )
    missing = [build for deployment_name, build in targets if (deployment_name, build) not in polls]
    polling = sorted({build for (name, build) in filter(None, polls) if name == deployment} - {b for _, b in targets})
    fix = (
        f"Start a worker of build {' or '.join(repr(b) for b in missing or [b for _, b in targets])}, or route "
        "new tasks "
        f"to a build that has workers: temporal worker deployment set-current-version (a ramp: "
        f"set-ramping-version) --deployment-name {deployment} --build-id BUILD"
        + (f" (builds polling now: {', '.join(map(repr, polling))})" if polling else "")
    )
    return reason, fix


async def _routing(client: Client, polls: dict[tuple[str, str] | None, datetime]) -> RoutingConfig:
    """Where the worker deployment of the queue's workers routes new workflow tasks (empty: unversioned)."""
    deployments = {name for name, _ in filter(None, polls)}
    if len(deployments) != 1:
        return RoutingConfig()  # no versioned worker seen (or several deployments): nothing to name
    request = DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployments.pop())
    return (await client.workflow_service.describe_worker_deployment(request)).worker_deployment_info.routing_config


def _last_polls(answer: DescribeTaskQueueResponse) -> dict[tuple[str, str] | None, datetime]:
    """When workers of each build (None: of any build) last polled, among those Temporal remembers."""
    polls: dict[tuple[str, str] | None, datetime] = {}
    for poller in answer.pollers:
        at = poller.last_access_time.ToDatetime(tzinfo=timezone.utc)
        options = poller.deployment_options
        for key in (None, (options.deployment_name, options.build_id) if options.build_id else None):
            polls[key] = max(at, polls.get(key, at))
    return polls


def _seen(polls: dict[tuple[str, str] | None, datetime], build: tuple[str, str] | None) -> str:
    """When a worker (of `build`) last polled, as a reason says it."""
    whose = f"build {build[1]!r}" if build is not None else "the task queue"
    if build not in polls:
        return f"no worker of {whose} has polled in the last 5 minutes"
    return f"a worker of {whose} last polled at {polls[build]:%Y-%m-%d %H:%M:%S} UTC"


async def _workflow_task_problem(client: Client, execution: WorkflowExecution) -> str:
    """Why the newest workflow task failed or timed out, read from the end of the history."""
    async for event in newest_events_first(client, execution.id, execution.run_id):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return await _failure_reason(client, event)
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            return "The workflow task timed out: its worker crashed or blocked while running it."
    return "No failed workflow task is recorded yet."


async def _failure_reason(client: Client, event: HistoryEvent) -> str:
    """What the failure says, decoded with the key when the worker encrypted it, explained when known."""
    failure = event.workflow_task_failed_event_attributes.failure
    kind = failure.application_failure_info.type or "Failure"
    message = failure.message
    if failure.HasField("encoded_attributes"):
        message = _field(await _decoded(client, [failure.encoded_attributes]), "message") or None
    if kind in _DECRYPTION_FAILURES:
        return (
            f"A worker could not decrypt the task's payloads ({kind}): every worker of the task queue "
            "needs every FASTMCP_TEMPORAL_ENCRYPTION_KEY the task was written with in its key list."
            + (f" {message}" if message else "")
        )
    if message is None:
        return f"{kind}: its message is encrypted with a key this command does not hold (--encryption-key)."
    return f"{kind}: {message}"


# --- what is shown -----------------------------------------------------------


def _row(execution: WorkflowExecution) -> dict[str, Any]:
    attributes = execution.typed_search_attributes
    return {
        "taskId": execution.id.rsplit("/", 1)[-1],
        "kind": next(kind for kind, prefix in _KIND_PREFIXES.items() if execution.id.startswith(prefix)),
        "tool": attributes.get(TOOL_ATTRIBUTE),
        "status": _mcp_status(execution),
        "scope": attributes.get(SCOPE_ATTRIBUTE) or execution.id.split("/")[1],
        "createdAt": execution.start_time.isoformat(),
        "closedAt": execution.close_time.isoformat() if execution.close_time else None,
        "durationSeconds": _duration(execution),
        "workflowId": execution.id,
        "runId": execution.run_id,
    }


def _duration(execution: WorkflowExecution) -> float:
    end = execution.close_time or _TEMPORAL_CLOCK.now()
    return round((end - execution.start_time).total_seconds(), 3)


async def _inspect(client: Client, task: _FoundTask, ui_url: str) -> dict[str, Any]:
    shown = _row(task.description)
    shown["status"] = task.status()
    history = await task.handle.fetch_history()
    legs, requests, answers, closing = 0, [], [], None
    readable = True
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attributes = event.workflow_execution_started_event_attributes
            started = await _decoded(client, attributes.input.payloads[:1])  # the task, not its arguments
            legs = _legs_before_this_run(started)
            asks = attributes.memo.fields.get(INPUT_REQUESTS_MEMO)
            carried = await _open_round_requests(client, started, asks)
            readable &= carried is not _UNREADABLE
            requests += carried if isinstance(carried, list) else []
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            legs += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            outcome = await _decoded(client, event.activity_task_completed_event_attributes.result.payloads)
            readable &= outcome is not _UNREADABLE
            for key, request in _field(outcome, "input_requests").items():
                requests.append({"leg": legs, "key": key, "request": request})
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == SUBMIT_INPUT_SIGNAL:
                answered = await _decoded(client, signal.input.payloads)
                readable &= answered is not _UNREADABLE
                answers += [{"key": k, "answer": v} for k, v in _field(answered, "answers").items()]
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            closing = await _decoded(
                client, event.workflow_execution_completed_event_attributes.result.payloads
            )
            readable &= closing is not _UNREADABLE
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            closing = _terminated(event.workflow_execution_terminated_event_attributes.reason)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            closing = {"error": {"code": -32603, "message": failure.message}}
    if isinstance(closing, dict):  # the outcome itself, when readable, beats the search attribute
        shown["status"] = next((status for status in ("expired", "cancelled") if closing.get(status)), None) or (
            "failed" if closing.get("error") else "completed"
        )
    shown.update(
        legs=legs,
        inputRequests=requests,
        answers=answers,
        result=_field(closing, "result") or None,
        error=_field(closing, "error") or None,
        readable=readable,
        uiUrl=f"{ui_url}/namespaces/{quote(client.namespace)}/workflows/"
        f"{quote(task.description.id, safe='')}/{task.description.run_id}/history",
    )
    return shown


_UNREADABLE = object()


def _terminated(reason: str) -> dict[str, Any]:
    """What a terminated task ended as: a server ended it (its TTL, or a cancel no worker ran), or an operator."""
    if reason == EXPIRED_REASON:
        return {"expired": True}
    if reason == CANCELLED_REASON:
        return {"cancelled": True}
    return {"error": {"code": -32603, "message": f"Terminated by an operator: {reason}"}}


def _legs_before_this_run(task_input: Any) -> int:
    """Legs earlier runs of a continued-as-new task ran (its input names the next leg, or the
    leg whose round of input it took over)."""
    open_round = _field(task_input, "open_round")
    if open_round:
        return int(open_round.get("leg", 0))
    resume = _field(task_input, "resume")
    return int(resume.get("leg", 1)) - 1 if resume else 0


async def _open_round_requests(client: Client, task_input: Any, asks: Payload | None) -> Any:
    """The open asks of the round a run took over from the previous one: in its memo, not its events."""
    open_round = _field(task_input, "open_round")
    if not open_round or asks is None:
        return []
    decoded = await _decoded(client, [asks])
    if decoded is _UNREADABLE:
        return decoded
    leg = open_round.get("leg")
    return [{"leg": leg, "key": key, "request": request} for key, request in (decoded or {}).items()]


async def _decoded(client: Client, payloads: Sequence[Payload]) -> Any:
    """The first payload as plain JSON, or `_UNREADABLE` when encrypted with a key we lack."""
    try:
        (value,) = await client.data_converter.decode(payloads)
    except Exception:
        return _UNREADABLE
    return value


def _field(value: Any, name: str) -> Any:
    return (value.get(name) or {}) if isinstance(value, dict) else {}


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _plain(value: object) -> Text:
    """`value` as Rich shows it verbatim: never read as markup or emoji codes, control characters escaped.

    Tool names, questions, answers, results and failure messages come from callers and tools;
    as markup they could crash the command or hide text, and a raw escape sequence drives the
    operator's terminal.
    """
    from rich.text import Text

    return Text(_CONTROL_CHARACTERS.sub(lambda found: repr(found[0])[1:-1], str(value)))


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal acts on rather than prints (tab and newline excepted)."""


def _print_rows(rows: list[dict[str, Any]], *, stuck: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for name in ("TASK ID", "KIND", "TOOL", "STATUS", "CREATED", "DURATION", "SCOPE"):
        table.add_column(name, no_wrap=True)  # ids stay whole and copyable; a reason or a fix wraps
    if stuck:
        table.add_column("ATTEMPT", no_wrap=True)
        table.add_column("REASON", ratio=1, overflow="fold")
        table.add_column("FIX", ratio=1, overflow="fold")
    for row in rows:
        cells = [
            row["taskId"],
            row["kind"],
            row["tool"] or "",
            row["status"],
            row["createdAt"][:19].replace("T", " "),
            f"{row['durationSeconds']:.1f}s",
            row["scope"],
        ]
        if stuck:
            cells += [str(row["workflowTaskAttempt"]), row["reason"], row["fix"]]
        table.add_row(*map(_plain, cells))
    Console(width=200).print(table)


def _print_task(shown: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    fields = ("taskId", "kind", "tool", "status", "scope", "createdAt", "closedAt", "durationSeconds", "legs")
    rows: list[tuple[str, object]] = [(name, shown[name]) for name in fields]
    for request in shown["inputRequests"]:
        message = (request["request"].get("params") or {}).get("message", "")
        rows.append((f"leg {request['leg']} asked", f"{request['key']}: {message}"))
    for answer in shown["answers"]:
        rows.append(("answered", f"{answer['key']}: {json.dumps(answer['answer'], default=str)}"))
    for name in ("result", "error"):
        if shown[name] is not None:
            rows.append((name, json.dumps(shown[name], default=str)))
    if not shown["readable"]:
        rows.append(("payloads", "encrypted: pass --encryption-key (or FASTMCP_TEMPORAL_ENCRYPTION_KEY)"))
    rows.append(("UI", shown["uiUrl"]))
    table = Table("FIELD", "VALUE", show_header=False)
    for name, value in rows:
        table.add_row(name, _plain(value))
    Console(width=200).print(table)
