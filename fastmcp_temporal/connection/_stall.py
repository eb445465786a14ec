"""Whether any worker moves a workflow: the stall rule the servers act on and `tasks list --stuck` reports.

A workflow moves only when a worker runs its workflow tasks. One pinned to a build
whose workers are all gone (Worker Versioning), or whose every worker fails it, stays
RUNNING in Temporal for good. Temporal keeps no record of which builds still have
workers (it remembers pollers for minutes after they stop), so a workflow counts as
stalled when its pending workflow task has waited `STALL_GRACE` for a worker, or has
failed before and waits for a retry: a live worker takes one within milliseconds, and a
stopped worker's sticky queue hands it on after the plugin's `STICKY_TIMEOUT`.

These are pure readings of a `describe()` at a "now" the caller takes from Temporal's
clock (`TemporalClock`), never the local one, plus the history read newest first that
tells what happened last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionDescription

STALL_GRACE = timedelta(seconds=10)


def waiting_for_worker(description: WorkflowExecutionDescription, now: datetime) -> timedelta | None:
    """How long the workflow's pending workflow task has waited for a worker; None when none waits."""
    raw = description.raw_description
    if not raw.HasField("pending_workflow_task"):
        return None
    pending = raw.pending_workflow_task
    if pending.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        return None  # a worker is running it (a long local activity keeps it started)
    return now - pending.scheduled_time.ToDatetime(tzinfo=timezone.utc)


def failed_before(description: WorkflowExecutionDescription) -> bool:
    """Whether the pending workflow task is a retry: an earlier attempt failed or timed out."""
    return description.raw_description.pending_workflow_task.attempt > 1


def stalled(description: WorkflowExecutionDescription, now: datetime) -> bool:
    """Whether no worker runs the workflow: its workflow task waits past the grace, or failed before."""
    waited = waiting_for_worker(description, now)
    if waited is None:
        return False
    return waited >= STALL_GRACE or failed_before(description)


async def newest_events_first(client: Client, workflow_id: str, run_id: str) -> AsyncIterator[HistoryEvent]:
    """The run's history from its newest event back, a page at a time."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        maximum_page_size=100,
    )
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(request)
        for event in page.history.events:
            yield event
        if not page.next_page_token:
            return
        request.next_page_token = page.next_page_token
