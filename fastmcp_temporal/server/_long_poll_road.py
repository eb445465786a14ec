"""Following a task by a long poll of its history: each event that changes an answer, as it happens.

Temporal answers the long poll at the run's next events, or empty after its long-poll period, and
each open one counts against the namespace's cap. A task this server just created is followed for
its close alone for `_CLOSE_ONLY_FOR`: a short task's dozen events would each end a long poll, and
none of them changes an answer. Still running then, it is followed event by event. The road ends
when the run closes, when nobody reads the task any more, or when the change feed follows tasks
(`_watches` then moves this one to it); an error (a refusal, a failed poll) ends it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._watch import Watch

# A task this server just created is followed for its close alone this long.
_CLOSE_ONLY_FOR = timedelta(seconds=2)
# Temporal answers a long poll empty this long before the caller's deadline.
_LONG_POLL_TAIL = timedelta(seconds=1)


async def follow_history(
    client: Client,
    clock: TemporalClock,
    watch: Watch,
    completed: Callable[[HistoryEvent], Awaitable[None]],
    changed: Callable[[], None],
    feed_follows_any: Callable[[], bool],
) -> bool:
    """Long-poll the watched run's history until it closes or nobody reads it (False), or an empty
    poll finds the feed following tasks (True: follow this one through the feed from now on).

    Every event read moves `clock`; the run's completion goes to `completed` before the change is
    signalled, so a held read it wakes finds the outcome; `changed` is called at each event that
    changes an answer or starts a leg (`Watch.saw`).
    """
    long_poll = client.workflow_service.get_workflow_execution_history
    loop = asyncio.get_running_loop()
    request = _history_request(client.namespace, watch)
    while True:
        response = await _next_page(long_poll, request, watch)
        if watch.close_only and not response.history.events:
            watch.close_only = False  # still running after _CLOSE_ONLY_FOR: follow every event
            watch.read_history.clear()  # reads wait for the events so far
            request = _history_request(client.namespace, watch)
            continue
        for event in response.history.events:
            clock.saw(event.event_time)
            if not watch.run_id and event.HasField("workflow_execution_started_event_attributes"):
                watch.run_id = event.workflow_execution_started_event_attributes.original_execution_run_id
            if event.HasField("workflow_execution_completed_event_attributes"):
                await completed(event)
            if watch.saw(event, loop.time()):
                changed()
        watch.read_history.set()
        if not response.next_page_token:  # the run has closed
            return False
        if not response.history.events and watch.idle(loop.time()):
            return False
        if not response.history.events and feed_follows_any():
            return True
        request.next_page_token = response.next_page_token


async def _next_page(
    long_poll: Callable[..., Awaitable[GetWorkflowExecutionHistoryResponse]],
    request: GetWorkflowExecutionHistoryRequest,
    watch: Watch,
) -> GetWorkflowExecutionHistoryResponse:
    """The next events, or none when the close alone is followed and has not come in `_CLOSE_ONLY_FOR`."""
    if not watch.close_only:
        return await long_poll(request)
    try:
        return await long_poll(request, timeout=_CLOSE_ONLY_FOR + _LONG_POLL_TAIL)
    except RPCError as exc:
        if exc.status != RPCStatusCode.DEADLINE_EXCEEDED:
            raise
        return GetWorkflowExecutionHistoryResponse()  # no close yet


def _history_request(namespace: str, watch: Watch) -> GetWorkflowExecutionHistoryRequest:
    """A long poll of the watched run's history: every event, or its close alone."""
    return GetWorkflowExecutionHistoryRequest(
        namespace=namespace,
        execution=WorkflowExecution(workflow_id=watch.handle.id, run_id=watch.run_id),
        wait_new_event=True,
        skip_archival=True,
        history_event_filter_type=(
            HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
            if watch.close_only
            else HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT
        ),
    )
