"""A task's facts, decided once when its workflow starts: every record of them derives from one value.

When a task was created, its TTL and poll interval, whose it is, which tool it runs and how
each leg is scheduled are written to Temporal in several places: the workflow's input, its
memo (what reads answer with no worker online), its search attributes and its summary in the
Temporal UI (`_ui_metadata.py`); the answers given at creation repeat them. Each comes from
one `TaskFacts`, so no two can disagree; what reads the memo back is `TaskMemo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._scope import WorkflowKind, new_task_id, workflow_id
from fastmcp_temporal.server._watch import Timing
from fastmcp_temporal.workflows.models import DEFAULT_POLL_INTERVAL_MS, LegPolicy, created_memo
from fastmcp_temporal.workflows.task import SCOPE_ATTRIBUTE, STATUS_ATTRIBUTE, TOOL_ATTRIBUTE

if TYPE_CHECKING:
    from fastmcp_temporal.server._plan import CallPlan

# A tool's own `timeout=` is enforced inside the leg; the activity gets this much
# longer so the tool's clean timeout error wins over a Temporal retry.
_TOOL_TIMEOUT_MARGIN = timedelta(seconds=30)
_INITIAL_RETRY = timedelta(milliseconds=500)


@dataclass(frozen=True)
class TaskFacts:
    """What a task is, fixed when its workflow starts."""

    kind: WorkflowKind
    task_id: str
    scope: str
    """The caller's scope tag."""
    tool: str
    version: str | None
    created_at: str
    ttl_ms: int
    poll_interval_ms: int
    policy: LegPolicy

    @classmethod
    def decide(
        cls, backend: Backend, plan: CallPlan, kind: WorkflowKind, task_id: str | None = None
    ) -> TaskFacts:
        """A new task's facts: the planned call's tool as called, run as its component (a mounted tool's
        child), under `task_id` (a new one when None)."""
        return cls(
            kind=kind,
            task_id=task_id or new_task_id(),
            scope=backend.caller_scope().tag,
            tool=plan.tool.name,
            version=plan.tool.version,
            created_at=datetime.now(timezone.utc).isoformat(),
            ttl_ms=backend.ttl_ms,
            poll_interval_ms=int(plan.component.task_config.poll_interval.total_seconds() * 1000),
            policy=_leg_policy(backend, plan),
        )

    @property
    def workflow_id(self) -> str:
        return workflow_id(self.scope, self.task_id, self.kind)

    def memo(self, input_bytes: int) -> dict[str, Any]:
        """The memo the workflow starts with; `input_bytes` is its input's size, known once converted."""
        return created_memo(
            kind=self.kind,
            created_at=self.created_at,
            ttl_ms=self.ttl_ms,
            poll_interval_ms=self.poll_interval_ms,
            scope=self.scope,
            tool=self.tool,
            input_bytes=input_bytes,
        )

    def search_attributes(self) -> TypedSearchAttributes:
        """What a new task is listed by: its tool, `working`, and its caller's scope."""
        return TypedSearchAttributes(
            [
                SearchAttributePair(TOOL_ATTRIBUTE, self.tool),
                SearchAttributePair(STATUS_ATTRIBUTE, "working"),
                SearchAttributePair(SCOPE_ATTRIBUTE, self.scope),
            ]
        )

    @property
    def timing(self) -> Timing:
        """The wire's timing fields, as a read of the task's memo gives them."""
        return Timing(self.created_at, self.ttl_ms, self.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS)


def _leg_policy(backend: Backend, plan: CallPlan) -> LegPolicy:
    """The extension's defaults, overridden by the tool's own `execution_policy`."""
    settings, policy = backend.settings, plan.policy
    start_to_close = policy.start_to_close_timeout or settings.start_to_close_timeout
    tool_timeout = getattr(plan.component, "timeout", None)
    if tool_timeout is not None:
        start_to_close = max(start_to_close, timedelta(seconds=tool_timeout) + _TOOL_TIMEOUT_MARGIN)
    attempts = policy.maximum_attempts if policy.maximum_attempts is not None else settings.maximum_attempts
    return LegPolicy(
        start_to_close_seconds=start_to_close.total_seconds(),
        heartbeat_seconds=(policy.heartbeat_timeout or settings.heartbeat_timeout).total_seconds(),
        maximum_attempts=attempts,
        initial_retry_seconds=(policy.initial_retry_interval or _INITIAL_RETRY).total_seconds(),
        local=(policy.leg or settings.leg) == "local",
    )
