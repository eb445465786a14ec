"""The one workflow every MCP task runs, whatever the tool.

A task is a loop of legs. Each leg is one activity that runs the tool body (a local
activity, inside the workflow task, for a tool with `execution_policy(leg="local")`); a leg
that asks for input parks the workflow, which publishes the outstanding requests in
its memo (so ``tasks/get`` reads them with no worker online) and waits, holding no
activity and no worker slot, until ``submit_input`` signals have answered every
request. The workflow alone applies answers, one signal at a time, so partial,
duplicate and concurrent updates need no lock and start exactly one next leg.

The module is deterministic and does no I/O; it imports no FastMCP code.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import (
    ActivityError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

from fastmcp_temporal.workflows.models import (
    LEG_OUTCOME_SIGNAL,
    RUN_TOOL_LEG,
    SCOPE_SEARCH_ATTRIBUTE,
    STATUS_SEARCH_ATTRIBUTE,
    SUBMIT_INPUT_SIGNAL,
    TOOL_SEARCH_ATTRIBUTE,
    WORKFLOW_NAME,
    InputAnswers,
    LateLegOutcome,
    LegInput,
    LegOutcome,
    LegPolicy,
    NextLeg,
    TaskInput,
    TaskOutcome,
    TaskState,
)
from fastmcp_temporal.workflows.ui import leg_summary, live_details

STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword(STATUS_SEARCH_ATTRIBUTE)
TOOL_ATTRIBUTE = SearchAttributeKey.for_keyword(TOOL_SEARCH_ATTRIBUTE)
SCOPE_ATTRIBUTE = SearchAttributeKey.for_keyword(SCOPE_SEARCH_ATTRIBUTE)


# An exception in this workflow's code is a bug no retry of the workflow task fixes:
# it fails the task (published as failed) instead of leaving it running forever. Not
# a NondeterminismError (a TemporalError): a task that no longer replays after an
# upgrade waits for a worker with compatible code instead of failing.
_BUGS = [
    ArithmeticError, AssertionError, AttributeError, LookupError, NameError, RuntimeError, TypeError, ValueError
]


# Unsandboxed: this module is reviewed to be deterministic, and a sandbox per task
# (re-importing this package, and a sandbox round trip per payload) was a fifth of
# a trivial task's CPU in the worker.
@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=_BUGS, sandboxed=False)
class McpTaskWorkflow:
    def __init__(self) -> None:
        self._outstanding: dict[str, str] = {}
        self._requests: dict[str, dict[str, Any]] = {}
        self._answers: dict[str, dict[str, Any]] = {}
        self._task: TaskInput | None = None
        self._running_leg: tuple[int, workflow.ActivityHandle[LegOutcome]] | None = None
        self._late_outcome: LegOutcome | None = None
        self._leg = 0
        self._failure: str | None = None

    @workflow.run
    async def run(self, task: TaskInput) -> TaskOutcome:
        self._task = task
        try:
            return await self._run_legs(task)
        except BaseException as err:
            if _is_cancellation(err):
                self._publish("cancelled")
            elif isinstance(err, Exception):
                self._publish("failed")
            raise

    async def _run_legs(self, task: TaskInput) -> TaskOutcome:
        leg = task.resume or NextLeg()
        while True:
            leg_input = LegInput(task.call, leg.leg, leg.input_responses, leg.request_state)
            if oversize := _over_budget(task, leg_input):
                return self._finish("failed", TaskOutcome(error=_internal_error(oversize)))
            try:
                outcome = await self._execute(task, leg_input)
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    raise
                return self._finish("failed", TaskOutcome(error=_internal_error(_unfinished(err, task))))
            if outcome.input_requests is None:
                final = TaskOutcome(result=outcome.result, error=outcome.error)
                return self._finish("failed" if outcome.error else "completed", final)
            self._park(task, leg.leg, outcome)
            answered = await self._wait_for_answers(task)
            if not answered:
                # Nobody answered within the TTL: the task ended without a result and nobody
                # cancelled it, so operators find it among the failed ones. The wire answers
                # "not found" from now on, as the reference does for an expired task.
                return self._finish("failed", TaskOutcome(expired=True))
            leg = NextLeg(leg.leg + 1, self._answers, outcome.request_state)
            self._publish("working", {"inputRequests": None})
            if workflow.info().get_current_history_length() > task.history_events_limit:
                task.resume = leg
                workflow.continue_as_new(
                    task,
                    memo=dict(workflow.memo()),
                    search_attributes=workflow.info().typed_search_attributes,
                )

    async def _execute(self, task: TaskInput, leg: LegInput) -> LegOutcome:
        self._leg = leg.leg
        self._show("working")
        activity = _start_leg(task.policy, leg)
        self._running_leg, self._late_outcome = (leg.leg, activity), None
        try:
            return await activity
        except ActivityError:
            if self._late_outcome is None:
                raise
            return self._late_outcome
        finally:
            self._running_leg = None

    @workflow.signal(name=LEG_OUTCOME_SIGNAL)
    def leg_outcome(self, late: LateLegOutcome) -> None:
        """Take a late outcome once for the running leg and cancel its retry, which would run it again."""
        if self._running_leg is None or self._late_outcome is not None:
            return
        number, activity = self._running_leg
        if late.leg == number:
            self._late_outcome = late.outcome
            activity.cancel()

    def _park(self, task: TaskInput, leg: int, outcome: LegOutcome) -> None:
        """Mint a surfaced key per request and publish them for ``tasks/get``."""
        assert outcome.input_requests is not None
        self._outstanding, self._requests, self._answers = {}, {}, {}
        for tool_key, request in outcome.input_requests.items():
            surfaced = f"{task.call.task_id}:{leg}.{workflow.random().getrandbits(48):012x}"
            self._outstanding[surfaced] = tool_key
            self._requests[surfaced] = request
        self._publish("input_required", {"inputRequests": self._requests})

    async def _wait_for_answers(self, task: TaskInput) -> bool:
        """Wait until every request is answered; False when the TTL ran out first."""
        try:
            await workflow.wait_condition(
                lambda: not self._outstanding,
                timeout=timedelta(milliseconds=task.ttl_ms),
            )
        except asyncio.TimeoutError:
            return False
        return True

    @workflow.signal(name=SUBMIT_INPUT_SIGNAL)
    def submit_input(self, update: InputAnswers) -> None:
        """Apply answers for outstanding keys; anything else is ignored."""
        answered = [key for key in update.answers if key in self._outstanding]
        if not answered:
            return
        for key in answered:
            self._answers[self._outstanding.pop(key)] = update.answers[key]
            self._requests.pop(key, None)
        if self._outstanding:
            workflow.upsert_memo({"inputRequests": self._requests})
            self._show("input_required")

    def _finish(self, state: TaskState, outcome: TaskOutcome) -> TaskOutcome:
        self._failure = (outcome.error or {}).get("message")
        self._publish(state)
        return outcome

    def _publish(self, state: TaskState, memo: dict[str, Any] | None = None) -> None:
        """Record the task's state where ``tasks/get`` and operators read it.

        Each write is a billed history event, so the state itself lives only in the
        ``McpTaskStatus`` search attribute (and, once closed, in the execution's own
        status); the memo carries just the open input requests ``tasks/get`` serves.
        """
        if memo is not None:
            workflow.upsert_memo(memo)
        if self._task is not None and self._task.search_attributes:
            workflow.upsert_search_attributes([STATUS_ATTRIBUTE.value_set(state)])
        self._show(state)

    def _show(self, state: TaskState) -> None:
        """Operators' live view (the UI's current details): free, served by a query."""
        requests = None
        if state == "input_required":
            requests = {self._outstanding.get(key, key): request for key, request in self._requests.items()}
        workflow.set_current_details(live_details(state, self._leg, requests, self._failure))


def _start_leg(policy: LegPolicy, leg: LegInput) -> workflow.ActivityHandle[LegOutcome]:
    """Schedule the leg's activity: a regular one, or a local one that runs inside this workflow task."""
    summary = leg_summary(_tool_name(), leg.leg, leg.input_responses or ())
    start_to_close = timedelta(seconds=policy.start_to_close_seconds)
    retry_policy = RetryPolicy(
        initial_interval=timedelta(seconds=policy.initial_retry_seconds),
        maximum_attempts=policy.maximum_attempts,
    )
    cancellation_type = workflow.ActivityCancellationType.TRY_CANCEL
    if policy.local:
        return workflow.start_local_activity(
            RUN_TOOL_LEG,
            leg,
            result_type=LegOutcome,
            summary=summary,
            start_to_close_timeout=start_to_close,
            retry_policy=retry_policy,
            cancellation_type=cancellation_type,
        )
    return workflow.start_activity(
        RUN_TOOL_LEG,
        leg,
        result_type=LegOutcome,
        summary=summary,
        start_to_close_timeout=start_to_close,
        heartbeat_timeout=timedelta(seconds=policy.heartbeat_seconds),
        retry_policy=retry_policy,
        cancellation_type=cancellation_type,
    )


def _tool_name() -> str:
    """The tool as the caller named it, from the memo the task was created with."""
    return str(workflow.memo_value("tool", "tool"))


def _is_cancellation(err: BaseException) -> bool:
    """The task was cancelled: directly, or through the leg it was running."""
    if isinstance(err, asyncio.CancelledError):
        return True
    return isinstance(err, ActivityError) and isinstance(err.cause, CancelledError)


def _over_budget(task: TaskInput, leg: LegInput) -> str | None:
    """Why the leg's input cannot enter history, checked before scheduling it.

    Temporal refuses the whole workflow task when one command's payload is too large,
    and refuses it again on every retry; a leg that cannot be scheduled ends the task.
    """
    if task.leg_input_budget is None:
        return None
    (payload,) = workflow.payload_converter().to_payloads([leg])
    size = payload.ByteSize()
    if size <= task.leg_input_budget:
        return None
    return (
        f"The tool's arguments and answers together are {size:,} bytes, more than the "
        f"{task.leg_input_budget:,} bytes a leg's input may hold in Temporal history; set "
        "FASTMCP_TEMPORAL_PAYLOAD_STORE so large payloads are stored outside history."
    )


def _unfinished(err: ActivityError, task: TaskInput) -> str:
    """Why a leg gave up, in the settings' own terms."""
    policy, cause = task.policy, err.cause
    attempts = f"after {policy.maximum_attempts} attempt(s)" if policy.maximum_attempts else "after retrying"
    if isinstance(cause, TimeoutError) and cause.type == TimeoutType.START_TO_CLOSE:
        return (
            f"The tool did not finish within its start_to_close_timeout of "
            f"{policy.start_to_close_seconds:g}s, {attempts}."
        )
    if isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT:
        return (
            f"The worker running the tool went silent for its heartbeat_timeout of "
            f"{policy.heartbeat_seconds:g}s (crashed, or the tool blocked the event loop), {attempts}."
        )
    return f"The tool did not finish: {cause or err}"


def _internal_error(message: str) -> dict[str, Any]:
    return {"code": -32603, "message": message}
