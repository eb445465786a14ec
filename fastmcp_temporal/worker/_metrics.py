"""Prometheus metrics: the Temporal SDK's own worker metrics plus MCP task counters.

With `metrics_address` set (`FASTMCP_TEMPORAL_METRICS_ADDRESS`, e.g. `127.0.0.1:9464`)
the client is created (`connection._client`) on a temporalio `Runtime` that serves `/metrics` there: the
SDK's worker and client metrics (`temporal_*`), and ours, recorded through
temporalio's metric meter by a worker interceptor, so the task workflow and the tool
activity stay free of metrics code:

| metric | kind | labels |
| --- | --- | --- |
| `mcp_tasks_created` | counter | `tool` (counted when a worker first runs the task) |
| `mcp_tasks_finished` | counter | `tool`, `status` (`completed`, `failed`, `cancelled`, `expired`) |
| `mcp_task_input_rounds` | counter | `tool` (legs started after answers) |
| `mcp_leg_duration` | histogram (ms) | `tool`, `outcome` (`returned`, `raised`) |
| `mcp_leg_retries` | counter | `tool` (attempts of a leg after its first) |

The workflow's meter is replay-safe: replaying a history records nothing twice.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ActivityError, CancelledError, FailureError, is_cancelled_exception
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from fastmcp_temporal.workflows.models import RUN_TOOL_LEG, TOOL_MEMO, WORKFLOW_NAME
from fastmcp_temporal.workflows.task import WORKFLOW_BUGS


def worker_interceptors() -> list[Interceptor]:
    """Worker interceptors for MCP metrics; a no-op on a runtime without metrics."""
    return [TaskMetricsInterceptor()]


class TaskMetricsInterceptor(Interceptor):
    """Records MCP task metrics on whatever runtime the worker's client uses."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _LegMetrics(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _TaskMetrics


@dataclass
class _LegLabel:
    tool: str = "unknown"


# The leg's input reaches the activity undecoded (it may first be read from the store), so the
# activity names its tool here once it has the input.
_leg_label: ContextVar[_LegLabel | None] = ContextVar("fastmcp_temporal_leg_label", default=None)


def label_leg(component_key: str) -> None:
    """Name the tool of the leg this activity runs, for its metrics (`tool:crunch@1.0` → `crunch`)."""
    if (label := _leg_label.get()) is not None:
        label.tool = component_key.partition(":")[2].rpartition("@")[0] or component_key or "unknown"


class _LegMetrics(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.activity_type != RUN_TOOL_LEG:
            return await self.next.execute_activity(input)
        label = _LegLabel()
        token = _leg_label.set(label)
        started, outcome = time.monotonic(), "raised"
        try:
            result = await self.next.execute_activity(input)
            outcome = "returned"
            return result
        finally:
            _leg_label.reset(token)
            elapsed_ms = int((time.monotonic() - started) * 1000)
            meter = activity.metric_meter().with_additional_attributes({"tool": label.tool})
            if info.attempt > 1:
                meter.create_counter("mcp_leg_retries", "Attempts of a tool leg after its first").add(1)
            meter.create_histogram("mcp_leg_duration", "Wall time of one tool leg attempt", "ms").record(
                elapsed_ms, {"outcome": outcome}
            )


class _TaskMetrics(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_LegStartMetrics(outbound))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if workflow.info().workflow_type != WORKFLOW_NAME:
            return await self.next.execute_workflow(input)
        if workflow.info().continued_run_id is None:
            _task_counter("mcp_tasks_created", "MCP tasks a worker started running").add(1)
        try:
            outcome = await self.next.execute_workflow(input)
        except (FailureError, asyncio.CancelledError, *WORKFLOW_BUGS) as exc:  # not eviction, continue-as-new, replay
            cancelled = is_cancelled_exception(exc) or (
                isinstance(exc, ActivityError) and isinstance(exc.cause, CancelledError)
            )
            _finished("cancelled" if cancelled else "failed")
            raise
        if getattr(outcome, "expired", False):
            _finished("expired")
        else:
            _finished("failed" if getattr(outcome, "error", None) else "completed")
        return outcome


class _LegStartMetrics(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        _count_input_round(input)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        _count_input_round(input)
        return super().start_local_activity(input)


def _count_input_round(input: StartActivityInput | StartLocalActivityInput) -> None:
    if input.activity == RUN_TOOL_LEG and getattr(input.args[0], "leg", 1) > 1:
        _task_counter("mcp_task_input_rounds", "Tool legs started after the client's answers").add(1)


def _task_counter(name: str, description: str) -> Any:
    tool = str(workflow.memo_value(TOOL_MEMO, "unknown"))
    return (
        workflow.metric_meter().with_additional_attributes({"tool": tool}).create_counter(name, description)
    )


def _finished(status: str) -> None:
    _task_counter("mcp_tasks_finished", "MCP tasks that ended, by status").add(1, {"status": status})
