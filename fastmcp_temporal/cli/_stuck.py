"""`tasks list --stuck`: which running tasks no worker can move, why, and the fix.

Whatever the cause (a worker without the key, a store it cannot reach, a bug in workflow
code, a build with no workers left), a stuck task is one of three: its workflow task has
failed before and is being retried (the reason is the newest failure, decrypted when the
command holds the key); it has waited for a worker past the grace (the stall rule the
servers act on, `connection/_stall.py`: the reason names the build it is pinned or routed
to and when that build's workers last polled); or a leg waits for its payload store (its
heartbeats say so). Each row says which, and what makes the task move again.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

from temporalio.api.deployment.v1 import RoutingConfig
from temporalio.api.enums.v1 import EventType, TaskQueueType, VersioningBehavior
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeTaskQueueResponse,
    DescribeWorkerDeploymentRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription

from fastmcp_temporal.cli._reading import TEMPORAL_CLOCK, decoded, describe, field, list_query, row
from fastmcp_temporal.connection._stall import failed_before, newest_events_first, stalled, waiting_for_worker
from fastmcp_temporal.workflows.models import STORE_WAITING_DETAIL

_DESCRIBED_AT_ONCE = 20
_DECRYPTION_FAILURES = frozenset({"InvalidToken", "UnknownEncryptionKeyError"})
"""Failure types of a worker whose keys cannot decrypt a task (Fernet's, and ours naming the key id)."""
_FIX_FAILING = (
    "Fix what the reason names on the workers (Temporal keeps retrying the workflow task), "
    "or end the task: fastmcp-temporal tasks terminate."
)
_FIX_STORE = (
    "Make the store FASTMCP_TEMPORAL_PAYLOAD_STORE names reachable and writable from the workers (mounted, "
    "this cluster's, not read-only); the leg goes on by itself, or end the task: fastmcp-temporal tasks cancel."
)


async def stuck_rows(client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The running tasks of the query no worker moves, described a few at a time."""
    query = f"{list_query(args)} AND ExecutionStatus = 'Running'"
    executions = [e async for e in client.list_workflows(query, limit=args.scan_limit)]
    gate = asyncio.Semaphore(_DESCRIBED_AT_ONCE)

    async def checked(execution: WorkflowExecution) -> dict[str, Any] | None:
        async with gate:
            return await _stuck_row(client, execution)

    return [stuck for stuck in await asyncio.gather(*map(checked, executions)) if stuck is not None]


async def _stuck_row(client: Client, execution: WorkflowExecution) -> dict[str, Any] | None:
    """The task's row with its workflow task's attempt, why it cannot move and the fix; None when it moves."""
    found = await describe(client, execution.id)
    if found is None or found[1].run_id != execution.run_id:
        return None  # gone, or continued as new since it was listed
    description = found[1]
    if failed_before(description):
        reason, fix = await _workflow_task_problem(client, execution), _FIX_FAILING
    elif stalled(description, TEMPORAL_CLOCK.now()):
        reason, fix = await _no_worker_problem(client, description)
    elif (waiting := await _store_waiting(client, description)) is not None:
        reason, fix = waiting, _FIX_STORE
    else:
        return None
    stuck = row(execution)
    stuck.update(
        workflowTaskAttempt=description.raw_description.pending_workflow_task.attempt, reason=reason, fix=fix
    )
    return stuck


async def _store_waiting(client: Client, description: WorkflowExecutionDescription) -> str | None:
    """Why a running leg of the task waits for its payload store, as its last heartbeat says."""
    for pending in description.raw_description.pending_activities:
        if pending.heartbeat_details.payloads:
            details = await decoded(client, pending.heartbeat_details.payloads)
            if isinstance(details, dict) and isinstance(waiting := details.get(STORE_WAITING_DETAIL), str):
                return waiting
    return None


async def _no_worker_problem(client: Client, description: WorkflowExecutionDescription) -> tuple[str, str]:
    """Why no worker takes the task's workflow task (the build it is pinned or routed to, when that
    build's workers last polled), and what makes one take it."""
    waited = waiting_for_worker(description, TEMPORAL_CLOCK.now()) or timedelta()
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
    if (pinned := _pinned_build(description)) is not None:
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


def _pinned_build(description: WorkflowExecutionDescription) -> tuple[str, str] | None:
    """The (deployment, build id) a pinned task runs on; None when it may move to another build."""
    versioning = description.raw_description.workflow_execution_info.versioning_info
    override = versioning.versioning_override.WhichOneof("override")
    if override == "pinned":  # an operator moved it to this build
        version = versioning.versioning_override.pinned.version
    elif override is None and versioning.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED:
        version = versioning.deployment_version
    else:
        return None
    return (version.deployment_name, version.build_id) if version.build_id else None


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
        message = field(await decoded(client, [failure.encoded_attributes]), "message") or None
    if kind in _DECRYPTION_FAILURES:
        return (
            f"A worker could not decrypt the task's payloads ({kind}): every worker of the task queue "
            "needs every FASTMCP_TEMPORAL_ENCRYPTION_KEY the task was written with in its key list."
            + (f" {message}" if message else "")
        )
    if message is None:
        return f"{kind}: its message is encrypted with a key this command does not hold (--encryption-key)."
    return f"{kind}: {message}"
