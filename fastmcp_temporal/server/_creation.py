"""Turn a `tools/call` into a task: validate, snapshot the caller, start the workflow.

A synchronous call run on the workers (`sync_calls="workflow"`) starts the same
workflow by the same path, under an `mcp-call/` id.

Arguments are validated exactly as a synchronous call would before anything exists,
so a bad call gets the same `isError` result and starts nothing. The workflow is
started before `CreateTaskResult` is returned; Temporal has persisted it by then,
so the id answers `tasks/get` at once, with or without a worker online. What the task is
(`_facts.TaskFacts`) is decided once; everything the start writes of it derives from that.

With Worker Versioning on, Temporal routes the task to the deployment's current version
(never eagerly to this process's own worker, which may be an older one), and a tool's
own `versioning_behavior` is passed as the start's versioning override.

Every workflow starts with a Temporal `Priority`: the caller's fairness key (from its scope
tag), so a queue with fairness on shares the workers between callers, and the tool's own
`priority`. The legs inherit both from the start, so what the workflow commands does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fastmcp.exceptions import ValidationError
from temporalio.client import WorkflowHandle
from temporalio.common import (
    AutoUpgradeVersioningOverride,
    PinnedVersioningOverride,
    Priority,
    RawValue,
    VersioningOverride,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import CreateTaskResult, TaskContextSnapshot, snapshot_codec
from fastmcp_temporal._policy import ExecutionPolicy
from fastmcp_temporal._task_json import encode_answers
from fastmcp_temporal.connection._sizes import converted, converter_budget
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._facts import TaskFacts
from fastmcp_temporal.server._plan import CallPlan
from fastmcp_temporal.server._scope import WorkflowKind, fairness_key
from fastmcp_temporal.server._ui_metadata import task_user_metadata
from fastmcp_temporal.server._wire import task_answer
from fastmcp_temporal.workflows.models import WORKFLOW_NAME, NextLeg, TaskInput, TaskOutcome, ToolCall

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.tools.base import Tool


# A rejoinable call joins its running workflow, and starts again once that has closed.
_CONFLICT_POLICY = {False: WorkflowIDConflictPolicy.FAIL, True: WorkflowIDConflictPolicy.USE_EXISTING}
_REUSE_POLICY = {False: WorkflowIDReusePolicy.REJECT_DUPLICATE, True: WorkflowIDReusePolicy.ALLOW_DUPLICATE}


@dataclass(frozen=True)
class StartedWorkflow:
    """A tool call's workflow, persisted by Temporal."""

    handle: WorkflowHandle[Any, TaskOutcome]
    facts: TaskFacts
    input_bytes: int = 0


async def start_task(
    backend: Backend,
    plan: CallPlan,
    arguments: dict[str, Any] | None,
    context: Context,
    *,
    task_id: str | None = None,
) -> tuple[CreateTaskResult, StartedWorkflow]:
    """Start a task's workflow (under `task_id`, else a new id): what the wire answers, and the workflow started."""
    started = await start_tool_workflow(backend, plan, arguments, context, kind="task", task_id=task_id)
    facts = started.facts
    created = task_answer(
        CreateTaskResult, facts.task_id, "working", facts.timing, updated_at=facts.created_at
    )
    return created, started


async def start_tool_workflow(
    backend: Backend,
    plan: CallPlan,
    arguments: dict[str, Any] | None,
    context: Context,
    *,
    kind: WorkflowKind,
    relay: Relayed | None = None,
    call_id: str | None = None,
    task_id: str | None = None,
) -> StartedWorkflow:
    """Validate the call and start its workflow: a task's, or a synchronous call's (`kind="call"`),
    whose leg collects what `relay` says its server relays to the caller. With a rejoinable
    call's `call_id` (`Backend.call_id`), the workflow is named by it, and a running one of that
    name is joined instead of started again. `task_id`, when given, is the new task's id."""
    raw_arguments, strict = dict(arguments or {}), context.fastmcp.strict_input_validation
    _fastmcp_private.validate_call(plan.component, raw_arguments, strict=strict)

    facts = TaskFacts.decide(backend, plan, kind, call_id or task_id)
    task = _task_input(backend, facts, plan.component, context, relay)
    inputs, input_bytes = await _converted_call(backend, task, raw_arguments)
    handle = await backend.client.start_workflow(
        WORKFLOW_NAME,
        args=inputs,
        result_type=TaskOutcome,
        id=facts.workflow_id,
        task_queue=backend.settings.task_queue,
        memo=facts.memo(input_bytes),
        search_attributes=facts.search_attributes() if backend.searchable else None,
        id_conflict_policy=_CONFLICT_POLICY[call_id is not None],
        id_reuse_policy=_REUSE_POLICY[call_id is not None],
        request_eager_start=backend.embedded_worker and backend.settings.deployment_version is None,
        versioning_override=_versioning_override(backend, plan.policy),
        priority=_priority(facts.scope, plan.policy),
        **task_user_metadata(facts, raw_arguments, encrypted=_encrypted(backend)),
    )
    return StartedWorkflow(handle, facts, input_bytes)


class Relayed(Protocol):
    """What a synchronous call's server relays to its caller besides log messages (`_relay.CallerChannel`)."""

    @property
    def progress(self) -> bool: ...

    @property
    def asks(self) -> bool: ...

    @property
    def carried_asks(self) -> list[str] | None: ...


def _task_input(
    backend: Backend, facts: TaskFacts, component: Tool, context: Context, relay: Relayed | None
) -> TaskInput:
    """The workflow's first input: the call as a leg runs it (its arguments as the workflow's second
    input), and the task's facts."""
    snapshot = TaskContextSnapshot.capture(owning_tool_name=facts.tool, owning_tool_version=facts.version)
    call = ToolCall(
        task_id=facts.task_id,
        component_key=component.key,
        arguments={},  # they travel as the workflow's second input
        snapshot=snapshot_codec().encode(snapshot.to_json()),
        client_extensions=_client_extensions(context),
        synchronous=facts.kind == "call",
        outcome_limit=backend.payload_limits.limit,
        outcome_stored=backend.payload_limits.stored,
        relay_logs=relay is not None,
        relay_progress=relay is not None and relay.progress,
        relay_asks=relay is not None and relay.asks,
        carried_asks=relay.carried_asks if relay is not None else None,
    )
    return TaskInput(
        call=call,
        ttl_ms=facts.ttl_ms,
        policy=facts.policy,
        search_attributes=backend.searchable,
        history_events_limit=backend.settings.history_events_limit,
        resume=continuation_of(context) if facts.kind == "call" else None,
        publish_completion=False,
        asks_written_once=True,
        arguments_apart=True,
        stamps_changes=backend.stamps_changes,
    )


async def _converted_call(
    backend: Backend, task: TaskInput, arguments: dict[str, Any]
) -> tuple[list[RawValue], int]:
    """The workflow's inputs, the task and, as a second input, its arguments (which the workflow passes to
    each leg undecoded), each converted once, and their encoded size; refused as a bad call
    is when they cannot be kept.

    It also tells the workflow how large a leg's input may grow with answers (Temporal's
    payload limit, or the store's), so it never schedules one that could not be kept.
    """
    converter, limits = backend.client.data_converter, backend.payload_limits
    task.leg_input_budget = await converter_budget(converter, limits.limit)
    (task_value, task_size), (arguments_value, arguments_size) = [
        await converted(converter, value) for value in (task, arguments)
    ]
    size = task_size + arguments_size
    if refusal := limits.refusal("The call's arguments", size):
        raise ValidationError(refusal)
    return [task_value, arguments_value], size


def _client_extensions(context: Context) -> list[str]:
    """The extensions the caller declared, for `ctx.client_supports_extension` in the task."""
    try:
        capabilities = context.session.client_capabilities
    except RuntimeError:
        return []
    extensions = (capabilities.extensions if capabilities else None) or {}
    return sorted(extensions)


def continuation_of(context: Context) -> NextLeg | None:
    """A synchronous caller's answers to an earlier ask (SEP-2322) go to the first leg."""
    responses, state = context.input_responses, context.request_state
    if responses is None and state is None:
        return None
    return NextLeg(input_responses=encode_answers(responses) if responses else None, request_state=state)


def _encrypted(backend: Backend) -> bool:
    """Whether payloads, the UI's summary and details among them, go through a codec."""
    return backend.client.data_converter.payload_codec is not None


def _versioning_override(backend: Backend, policy: ExecutionPolicy) -> VersioningOverride | None:
    """The tool's own `versioning_behavior` where it differs from the extension's (the workers' default).

    Temporal pins a task only to a named version: a `pinned` tool's task stays on this
    process's version, the build that accepted the call.
    """
    settings = backend.settings
    version, wanted = settings.deployment_version, policy.versioning_behavior
    if version is None or wanted in (None, settings.versioning_behavior):
        return None
    if wanted == "auto_upgrade":
        return AutoUpgradeVersioningOverride()
    return PinnedVersioningOverride(version)


def _priority(scope_tag: str, policy: ExecutionPolicy) -> Priority:
    """The caller's fairness key and the tool's priority key (unset: Temporal's default)."""
    return Priority(priority_key=policy.priority, fairness_key=fairness_key(scope_tag))
