"""`run_tool_leg`: the activity that runs one leg of a FastMCP tool.

It runs in a worker that has entered the server's lifespan, so the tool sees the
same `lifespan_context`, dependencies and `Context` API as in the reference engine.
It returns only JSON: a converted result, a protocol error, or the requests of an ask
(`worker/_body`); whatever the body raises is such a result and never a retry. A
durable call's leg (`sync_calls="workflow"`) also collects the body's log messages and
progress for its caller (`worker/_notices`).

An attempt, in order:

1. joins the body an earlier attempt of its leg started on this worker, if any
   (`worker/_attempts`: Temporal retried it because the body held the event loop past
   the heartbeat timeout), and skips to step 5;
2. reads its input, from the payload store when it was stored, heartbeating and waiting
   for a store that is away (`worker/_leg_input`); an input the store lost is handed back,
   and the workflow ends the task with the reason;
3. restores the submitting caller from the task's snapshot (`worker/_leg_context`) and
   checks the tool is still deployed and takes the task's arguments (`worker/_tool_changes`);
4. starts the body in its own asyncio task, so it outlives an attempt Temporal gives up on;
5. heartbeats until the outcome is kept (`worker/_outcome`: size-checked, and stored when
   large), delivering it by signal when Temporal gave up on the attempt meanwhile.

A local attempt (`execution_policy(leg="local")`) runs inside the workflow task of the
worker that scheduled it: it cannot heartbeat (its progress never reaches `tasks/get`, its
checkpoints stay in this process), so it reads its input, starts the body and waits for
the kept outcome in place, joining nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from mcp.shared.exceptions import MCPError
from temporalio import activity
from temporalio.common import RawValue

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._task_json import decode_answers, error_result_json
from fastmcp_temporal.worker._attempts import (
    LegRun,
    attempt_outcome,
    earlier_run,
    outcome_in_place,
    registered,
    this_leg,
)
from fastmcp_temporal.worker._body import protocol_error, run_body
from fastmcp_temporal.worker._heartbeat import HeartbeatCadence
from fastmcp_temporal.worker._leg_context import RunningLeg, SnapshotRestoreError, leg_scope, restore_caller
from fastmcp_temporal.worker._leg_input import leg_input
from fastmcp_temporal.worker._loop_lag import timed_steps
from fastmcp_temporal.worker._metrics import label_leg
from fastmcp_temporal.worker._notices import WINDOW_AGE, LegNotices
from fastmcp_temporal.worker._progress import LegProgress, progress_scope
from fastmcp_temporal.worker._tool_changes import deployed_component, refused_arguments
from fastmcp_temporal.workflows.models import RUN_TOOL_LEG, LegInput, LegOutcome, UnreadablePayload

if TYPE_CHECKING:
    from fastmcp import FastMCP


class ToolLegActivities:
    """Activities bound to the root server whose tools they run."""

    def __init__(self, server: FastMCP, cadence: HeartbeatCadence | None = None) -> None:
        self._server = server
        self._cadence = cadence or HeartbeatCadence()

    @activity.defn(name=RUN_TOOL_LEG)
    async def run_tool_leg(self, leg: RawValue) -> LegOutcome | RawValue | UnreadablePayload:
        """Run the leg's body once per process, however many attempts Temporal starts for it.

        `leg` is a `LegInput`, or the reference to one in the payload store.
        """
        progress = LegProgress.resumed()
        if activity.info().is_local:
            local_input = await leg_input(leg, None, self._cadence)
            if isinstance(local_input, UnreadablePayload):
                return local_input
            label_leg(local_input.call.component_key)
            return await outcome_in_place(await self._start(local_input, progress))
        key = this_leg()
        run = earlier_run(key)
        if run is None:
            delivered = await leg_input(leg, progress, self._cadence)
            if isinstance(delivered, UnreadablePayload):
                return delivered
            run = registered(key, await self._start(delivered, progress))
        label_leg(run.call.component_key)
        return await attempt_outcome(key, run)

    def _notice_age(self) -> float:
        """How long a relayed notice stays in the leg's window: two of the SDK's sends at least."""
        timeout = activity.info().heartbeat_timeout
        if timeout is None:
            return WINDOW_AGE
        return max(WINDOW_AGE, 2 * self._cadence.sent_within(timeout.total_seconds()))

    async def _start(self, leg: LegInput, progress: LegProgress) -> LegRun:
        """Start the body in its own asyncio task, so it outlives an attempt Temporal gave up on.

        A caller that cannot be restored, a tool the server no longer has, or arguments it
        no longer accepts (it was redeployed while the task was parked or waiting for a
        retry) end the task here.
        """
        call = leg.call
        try:
            snapshot = restore_caller(call.snapshot)
            component = await deployed_component(self._server, call.component_key)
        except (MCPError, SnapshotRestoreError) as exc:
            failed = LegOutcome(error=protocol_error(exc))
            return LegRun.settled(call.component_key, leg, failed, progress, self._cadence)
        refusal = refused_arguments(component, call.arguments, strict=self._server.strict_input_validation)
        if refusal is not None:
            refused = LegOutcome(result=error_result_json(refusal))
            return LegRun.settled(component.name, leg, refused, progress, self._cadence)
        if call.relay_logs or call.relay_progress:
            progress.notices = LegNotices(progress=call.relay_progress, age=self._notice_age())
        progress.stamps = not call.synchronous
        owner = await _fastmcp_private.resolve_owning_server(snapshot) or self._server
        running = RunningLeg(
            task_id=call.task_id,
            server=owner,
            origin_request_id=snapshot.origin_request_id,
            client_extensions=frozenset(call.client_extensions),
            input_responses=decode_answers(leg.input_responses),
            request_state=leg.request_state,
            notices=progress.notices,
        )
        with leg_scope(running), progress_scope(call.task_id, progress):
            body = asyncio.create_task(timed_steps(run_body(component, owner, call), component.name))
        return LegRun(component.name, call, body, progress, self._cadence, leg.leg)
