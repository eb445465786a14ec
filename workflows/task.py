"""The one workflow every MCP task runs, whatever the tool.

A task is a loop of legs. Each leg is one activity that runs the tool body (a local
activity, inside the workflow task, for a tool with `execution_policy(leg="local")`); a leg
that asks for input parks the workflow, which publishes the requests in its memo (so
``tasks/get`` reads them with no worker online) and waits, holding no activity and no
worker slot, until ``submit_input`` signals have answered every request. The workflow
alone applies answers, one signal at a time, so partial, duplicate and concurrent
updates need no lock and start exactly one next leg.

History grows with what a task does: a round's asks are written to the memo once, and
a partial answer marks only the keys it answers (tasks created before 0.3.0 rewrite
every open ask instead). A run whose history fills up continues as new between rounds,
or inside a round, carrying the open asks (in its memo) and the answers so far.

The module is deterministic and does no I/O; it imports no FastMCP code.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy, SearchAttributeKey
from temporalio.converter import value_to_type
from temporalio.exceptions import (
    ActivityError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

from fastmcp_temporal.workflows.arguments import JSON_ENCODING, JoinedLegInput, joined
from fastmcp_temporal.workflows.budget import (
    HISTORY_BYTES_LIMIT,
    converted,
    converted_size,
    over_budget,
    run_full,
    size_of,
)
from fastmcp_temporal.workflows.models import (
    CHANGED_AT_SEARCH_ATTRIBUTE,
    INPUT_REQUESTS_MEMO,
    LEG_OUTCOME_SIGNAL,
    PROGRESSED_SIGNAL,
    RUN_TOOL_LEG,
    SCOPE_SEARCH_ATTRIBUTE,
    STATUS_SEARCH_ATTRIBUTE,
    SUBMIT_INPUT_SIGNAL,
    TOOL_MEMO,
    TOOL_SEARCH_ATTRIBUTE,
    WORKFLOW_NAME,
    InputAnswers,
    LateLegOutcome,
    LegInput,
    LegOutcome,
    LegPolicy,
    LostOnReplay,
    NextLeg,
    OpenRound,
    TaskInput,
    TaskOutcome,
    TaskState,
    UnreadablePayload,
    answered_bytes_memo,
    answered_marks_memo,
    asks_memo,
    closed_round_memo,
    is_round_field,
    surfaced_key,
)
from fastmcp_temporal.workflows.ui import leg_summary, live_details

STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword(STATUS_SEARCH_ATTRIBUTE)
TOOL_ATTRIBUTE = SearchAttributeKey.for_keyword(TOOL_SEARCH_ATTRIBUTE)
SCOPE_ATTRIBUTE = SearchAttributeKey.for_keyword(SCOPE_SEARCH_ATTRIBUTE)
CHANGED_AT_ATTRIBUTE = SearchAttributeKey.for_datetime(CHANGED_AT_SEARCH_ATTRIBUTE)

# The second input of a task whose arguments travel in its first (`TaskInput.arguments_apart` False).
_ARGUMENTS_IN_CALL = RawValue(Payload())


# Patch ids, one per change to the workflow's commands since 0.2.0 (see CONTRIBUTING.md).
_CONTINUE_ON_HISTORY_SIZE = "continue-as-new-on-history-size"
_ANSWER_BYTES_IN_MEMO = "answer-bytes-in-memo"
_PROGRESS_STAMPED = "progress-stamped"
_PARTIAL_ANSWERS_STAMPED = "partial-answers-stamped"

# An exception in this workflow's code is a bug no retry of the workflow task fixes:
# it fails the task (published as failed) instead of leaving it running forever. Not
# a NondeterminismError (a TemporalError): a task that no longer replays after an
# upgrade waits for a worker with compatible code instead of failing.
WORKFLOW_BUGS = (
    ArithmeticError, AssertionError, AttributeError, LookupError, NameError, RuntimeError, TypeError, ValueError
)


# Unsandboxed: this module is reviewed to be deterministic, and a sandbox per task
# (re-importing this package, and a sandbox round trip per payload) was a fifth of
# a trivial task's CPU in the worker.
@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=list(WORKFLOW_BUGS), sandboxed=False)
class McpTaskWorkflow:
    @workflow.init
    def __init__(self, task: TaskInput, arguments: RawValue = _ARGUMENTS_IN_CALL) -> None:
        task = _task_input(task)
        self._arguments = arguments if isinstance(task, TaskInput) and task.arguments_apart else None
        self._outstanding: dict[str, str] = {}
        self._requests: dict[str, dict[str, Any]] = {}
        self._answers: dict[str, dict[str, Any]] = {}
        self._task = task if isinstance(task, TaskInput) else None  # None: its stored input is lost
        self._running_leg: tuple[int, workflow.ActivityHandle[LegOutcome]] | None = None
        self._late_outcome: LegOutcome | None = None
        self._leg = 0
        self._failure: str | None = None
        self._lost_answers: str | None = None
        # The round's answers marked in this run's memo so far (`asks_written_once` tasks).
        self._answered_keys: list[str] = []
        self._answered_bytes = 0
        self._stay_in_run = False  # the open round is too big to carry to a new run
        if isinstance(task, TaskInput) and task.open_round is not None:
            self._reopen(task.open_round)  # here, before this run applies its first answers

    @workflow.run
    async def run(self, task: TaskInput, arguments: RawValue = _ARGUMENTS_IN_CALL) -> TaskOutcome:
        task = _task_input(task)
        if isinstance(task, UnreadablePayload):  # its stored input is gone: nothing can run
            return self._lost(task.reason)
        if (lost := _lost_arguments(arguments)) is not None:  # so are its stored arguments
            return self._lost(lost.reason)
        self._task = task
        try:
            return await self._run_legs(task)
        except LostOnReplay:
            raise
        except BaseException as err:
            if _is_cancellation(err):
                self._publish("cancelled")
            elif isinstance(err, Exception):
                self._publish("failed")
            raise

    async def _run_legs(self, task: TaskInput) -> TaskOutcome:
        leg = task.resume or NextLeg()
        open_round = task.open_round
        while True:
            if open_round is None:
                leg_input = leg.input_of(task.call)
                if oversize := over_budget(task, leg_input, self._arguments):
                    return self._finish("failed", TaskOutcome(error=_internal_error(oversize)))
                try:
                    outcome = await self._execute(task, leg_input)
                except ActivityError as err:
                    if isinstance(err.cause, CancelledError):
                        raise
                    return self._finish("failed", TaskOutcome(error=_internal_error(_unfinished(err, task))))
                if isinstance(outcome, UnreadablePayload):
                    return self._lost(outcome.reason)
                if outcome.input_requests is None:
                    final = TaskOutcome(result=outcome.result, error=outcome.error)
                    return self._finish("failed" if outcome.error else "completed", final)
                self._park(task, leg.leg, outcome)
                open_round = OpenRound(leg.leg, _now_ms() + task.ttl_ms, request_state=outcome.request_state)
                answered = await self._wait_for_answers(task, timedelta(milliseconds=task.ttl_ms))
            else:
                answered = await self._wait_for_answers(task, _time_left(open_round))
            while answered and self._lost_answers is None and self._outstanding:  # the run filled up
                self._continue_round(task, open_round)
                answered = await self._wait_for_answers(task, _time_left(open_round))
            if self._lost_answers is not None:
                return self._lost(self._lost_answers)
            if not answered:
                # Nobody answered within the TTL: the task ended without a result and nobody
                # cancelled it, so operators find it among the failed ones. The wire answers
                # "not found" from now on, as the reference does for an expired task.
                return self._finish("failed", TaskOutcome(expired=True))
            leg = open_round.next_leg(self._answers)
            open_round = None
            self._publish("working", closed_round_memo(self._answered_keys))
            if _history_full(task):
                workflow.continue_as_new(
                    args=self._inputs(dataclasses.replace(task, resume=leg, open_round=None)),
                    memo=dict(workflow.memo()),
                    search_attributes=workflow.info().typed_search_attributes,
                )

    async def _execute(self, task: TaskInput, leg: LegInput) -> LegOutcome:
        self._leg = leg.leg
        self._show("working")
        activity = _start_leg(task.policy, leg, self._arguments)
        self._running_leg, self._late_outcome = (leg.leg, activity), None
        try:
            return await asyncio.shield(activity)
        except asyncio.CancelledError:
            # The task's cancel wins over a late outcome that arrived with it.
            activity.cancel()
            with contextlib.suppress(ActivityError):
                await activity
            raise
        except ActivityError:
            if self._late_outcome is None:
                raise
            return self._late_outcome
        finally:
            self._running_leg = None

    @workflow.signal(name=LEG_OUTCOME_SIGNAL)
    def leg_outcome(self, late: LateLegOutcome) -> None:
        """Take a late outcome once for the running leg and cancel its retry, which would run it again.

        An unreadable or malformed one is ignored: the leg's retry still delivers an outcome.
        """
        if not _well_formed_late(late):
            workflow.logger.warning("Ignored a leg_outcome signal that is unreadable or malformed: %r", late)
            return
        if self._running_leg is None or self._late_outcome is not None:
            return
        number, activity = self._running_leg
        if late.leg == number:
            self._late_outcome = late.outcome
            activity.cancel()

    @workflow.signal(name=PROGRESSED_SIGNAL)
    def progressed(self) -> None:
        """A leg's message changed after standing still (those following the history see this signal)."""
        self._stamp(_PROGRESS_STAMPED)

    def _stamp(self, patch: str) -> None:
        """Stamp `McpTaskChangedAt` for a change no status upsert carries: change-feed readers re-read."""
        if self._task is not None and self._task.stamps_changes and workflow.patched(patch):
            workflow.upsert_search_attributes([CHANGED_AT_ATTRIBUTE.value_set(workflow.now())])

    def _park(self, task: TaskInput, leg: int, outcome: LegOutcome) -> None:
        """Mint a surfaced key per request and publish them for ``tasks/get``."""
        assert outcome.input_requests is not None
        self._outstanding, self._requests, self._answers = {}, {}, {}
        self._answered_keys, self._answered_bytes, self._stay_in_run = [], 0, False
        for tool_key, request in outcome.input_requests.items():
            surfaced = surfaced_key(task.call.task_id, leg, workflow.random().getrandbits(48))
            self._outstanding[surfaced] = tool_key
            self._requests[surfaced] = request
        self._publish("input_required", asks_memo(dict(self._requests)))

    def _reopen(self, open_round: OpenRound) -> None:
        """Take up the round the previous run continued as new in; its open asks are in the memo.

        Done when the run is created: answers sent while the previous run continued as new
        reach this one as its first signals, applied before the run method starts."""
        self._leg = open_round.leg
        self._outstanding, self._answers = dict(open_round.outstanding), dict(open_round.answers)
        asks = workflow.memo_value(INPUT_REQUESTS_MEMO, {})
        self._requests = {key: asks[key] for key in self._outstanding if key in asks}
        self._answered_bytes = converted_size(self._answers) if self._answers else 0
        self._show("input_required")

    async def _wait_for_answers(self, task: TaskInput, timeout: timedelta) -> bool:
        """Wait until every request is answered, or this run's history fills up inside the round;
        False when the round's TTL ran out first."""
        if timeout <= timedelta(0):
            return not self._outstanding
        try:
            await workflow.wait_condition(
                lambda: not self._outstanding
                or self._lost_answers is not None
                or self._run_full_in_round(task),
                timeout=timeout,
            )
        except asyncio.TimeoutError:
            return False
        return True

    def _run_full_in_round(self, task: TaskInput) -> bool:
        """Whether to carry the open round to a new run: after at least one answer in this one,
        so every run moves the round on."""
        moved_on = bool(self._answered_keys) and not self._stay_in_run
        return task.asks_written_once and moved_on and run_full(task)

    def _continue_round(self, task: TaskInput, open_round: OpenRound) -> None:
        """Continue as new inside the round: the open asks in the new run's memo, the answers so
        far in its input. Not when they would not fit one payload; then this run waits on."""
        carried = dataclasses.replace(
            open_round, outstanding=dict(self._outstanding), answers=dict(self._answers)
        )
        continued = dataclasses.replace(task, resume=None, open_round=carried)
        size = converted_size(continued) + size_of(self._arguments)
        if task.leg_input_budget is not None and size > task.leg_input_budget:
            self._stay_in_run = True
            return
        memo = {key: workflow.memo_value(key) for key in workflow.info().raw_memo if not is_round_field(key)}
        memo.update(asks_memo(dict(self._requests)))
        workflow.continue_as_new(
            args=self._inputs(continued), memo=memo, search_attributes=workflow.info().typed_search_attributes
        )

    def _inputs(self, task: TaskInput) -> list[Any]:
        """The next run's inputs: the task, and the arguments' payload when it is the second."""
        return [task] if self._arguments is None else [task, self._arguments]

    @workflow.signal(name=SUBMIT_INPUT_SIGNAL)
    def submit_input(self, update: InputAnswers) -> None:
        """Apply answers for outstanding keys; anything else is ignored.

        Answers the store lost end the parked task (it cannot run on without them); a
        malformed signal (not what `tasks/update` sends) is ignored with a warning.
        """
        if isinstance(update, UnreadablePayload):
            if self._outstanding:
                self._lost_answers = update.reason
            return
        if not _well_formed_answers(update):
            workflow.logger.warning("Ignored a submit_input signal that is not {'answers': {key: answer}}: %r", update)
            return
        answered = [key for key in update.answers if key in self._outstanding]
        if not answered:
            return
        written_once = self._task is not None and self._task.asks_written_once
        for key in answered:
            tool_key = self._outstanding.pop(key)
            self._answers[tool_key] = update.answers[key]
            self._requests.pop(key, None)
            if written_once:  # each answer measured once, with its own braces: never less than in the dict
                self._answered_bytes += converted_size({tool_key: update.answers[key]})
        if not self._outstanding:
            return
        if written_once:
            self._answered_keys += answered  # their marks: removed when the round ends
            memo = {**answered_marks_memo(answered), **answered_bytes_memo(self._leg, self._answered_bytes)}
        else:
            memo = asks_memo(self._requests)
            if workflow.patched(_ANSWER_BYTES_IN_MEMO):
                memo.update(answered_bytes_memo(self._leg, converted_size(self._answers)))
        workflow.upsert_memo(memo)
        self._stamp(_PARTIAL_ANSWERS_STAMPED)
        self._show("input_required")

    def _lost(self, reason: str) -> TaskOutcome:
        """End the task whose stored payload is lost; on replay, the worker ends it (`LostOnReplay`)."""
        if workflow.unsafe.is_replaying():
            raise LostOnReplay(reason)
        return self._finish("failed", TaskOutcome(error=_internal_error(reason)))

    def _finish(self, state: TaskState, outcome: TaskOutcome) -> TaskOutcome:
        self._failure = (outcome.error or {}).get("message")
        if state == "completed" and not _publishes_completion(self._task):
            self._show(state)  # the execution's COMPLETED status says it, for no Action
        else:
            self._publish(state)
        return outcome

    def _publish(self, state: TaskState, memo: dict[str, Any] | None = None) -> None:
        """Record the task's state where ``tasks/get`` and operators read it.

        Each write is a billed history event, so the state itself lives only in the
        ``McpTaskStatus`` search attribute (and, once closed, in the execution's own
        status, which alone says a task completed); the memo carries just the open
        input requests ``tasks/get`` serves.
        """
        if memo is not None:
            workflow.upsert_memo(memo)
        if workflow.info().typed_search_attributes.get(STATUS_ATTRIBUTE) is not None:  # created searchable
            updates = [STATUS_ATTRIBUTE.value_set(state)]
            if self._task is not None and self._task.stamps_changes:  # in the same event: no extra Action
                updates.append(CHANGED_AT_ATTRIBUTE.value_set(workflow.now()))
            workflow.upsert_search_attributes(updates)
        self._show(state)

    def _show(self, state: TaskState) -> None:
        """Operators' live view (the UI's current details): free, served by a query."""
        requests = None
        if state == "input_required":
            requests = {self._outstanding.get(key, key): request for key, request in self._requests.items()}
        workflow.set_current_details(live_details(state, self._leg, requests, self._failure))


def _start_leg(
    policy: LegPolicy, leg: LegInput, arguments: RawValue | None
) -> workflow.ActivityHandle[LegOutcome]:
    """Schedule the leg's activity: a regular one, or a local one that runs inside this workflow task.

    Its input is the leg's, joined with the arguments' payload as it came when that is the workflow's second input."""
    summary = leg_summary(_tool_name(), leg.leg, leg.input_responses or ())
    argument: LegInput | JoinedLegInput = leg
    if arguments is not None:
        argument = joined(leg.leg, converted(leg), arguments.payload)
    start_to_close = timedelta(seconds=policy.start_to_close_seconds)
    retry_policy = RetryPolicy(
        initial_interval=timedelta(seconds=policy.initial_retry_seconds),
        maximum_attempts=policy.maximum_attempts,
    )
    cancellation_type = workflow.ActivityCancellationType.TRY_CANCEL
    if policy.local:
        return workflow.start_local_activity(
            RUN_TOOL_LEG,
            argument,
            result_type=LegOutcome,
            summary=summary,
            start_to_close_timeout=start_to_close,
            retry_policy=retry_policy,
            cancellation_type=cancellation_type,
        )
    return workflow.start_activity(
        RUN_TOOL_LEG,
        argument,
        result_type=LegOutcome,
        summary=summary,
        start_to_close_timeout=start_to_close,
        heartbeat_timeout=timedelta(seconds=policy.heartbeat_seconds),
        retry_policy=retry_policy,
        cancellation_type=cancellation_type,
    )


def _publishes_completion(task: TaskInput | None) -> bool:
    """Whether a successful end is upserted to `McpTaskStatus`, as 0.2.0 always did.

    Versioned by the task's input rather than `workflow.patched`: the choice is fixed when
    the task is created, and a patch marker would itself be a billed event, the very
    Action this saves. Histories without the field replay on the old path.
    """
    return task is None or task.publish_completion


def _history_full(task: TaskInput) -> bool:
    """Whether the next leg should start a new run: by event count, or by size (patched in after 0.2.0)."""
    info = workflow.info()
    if info.get_current_history_length() > task.history_events_limit:
        return True
    too_big = info.is_continue_as_new_suggested() or info.get_current_history_size() > HISTORY_BYTES_LIMIT
    return too_big and workflow.patched(_CONTINUE_ON_HISTORY_SIZE)


def _now_ms() -> int:
    return int(workflow.now().timestamp() * 1000)


def _time_left(open_round: OpenRound) -> timedelta:
    return timedelta(milliseconds=open_round.deadline_ms - _now_ms())


def _well_formed_answers(update: Any) -> bool:
    answers = getattr(update, "answers", None)
    return isinstance(answers, dict) and all(
        isinstance(key, str) and isinstance(answer, dict) for key, answer in answers.items()
    )


def _well_formed_late(late: Any) -> bool:
    return isinstance(late, LateLegOutcome) and isinstance(late.leg, int) and isinstance(late.outcome, LegOutcome)


def _lost_arguments(arguments: RawValue) -> UnreadablePayload | None:
    """The stand-in the store gave for the task's arguments; never decodes their JSON itself."""
    if arguments.payload.metadata.get("encoding") in (None, JSON_ENCODING):  # the server wrote JSON
        return None
    lost = workflow.payload_converter().from_payload(arguments.payload)
    return lost if isinstance(lost, UnreadablePayload) else None


def _task_input(value: Any) -> Any:
    """The run's first input as a `TaskInput`. The SDK decodes an input of one payload (a task's
    whose arguments are in its call) without this two-parameter run's type hints, as plain JSON."""
    return value_to_type(TaskInput, value) if isinstance(value, dict) else value


def _tool_name() -> str:
    """The tool as the caller named it, from the memo the task was created with."""
    return str(workflow.memo_value(TOOL_MEMO, "tool"))


def _is_cancellation(err: BaseException) -> bool:
    """The task was cancelled: directly, or through the leg it was running."""
    if isinstance(err, asyncio.CancelledError):
        return True
    return isinstance(err, ActivityError) and isinstance(err.cause, CancelledError)


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
