"""A running leg hears its task close (a cancel, its TTL, an operator) from a long poll, not a heartbeat.

Temporal tells an activity it was cancelled only in the answer to a heartbeat, and a leg's
heartbeats are sparse, for liveness (`_heartbeat`): a cancel would wait up to an interval.
A task's cancel closes its workflow without waiting for the leg, so each attempt long-polls
its run's history for the close event alone (`HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT`): a
read, never a billed Action, answered by the frontend when the run closes or empty when its
long poll expires, with no page of events in between. At the close the attempt stops the
body at once (`_attempts`), without waiting for a heartbeat's answer. A poll that fails
leaves the cancel to the next heartbeat, and is tried again after a pause. The frontend caps
the long polls it holds per namespace (`frontend.namespaceCount`, history long polls among
them): a leg it refuses hears a cancel from its heartbeats and asks again only
`_REFUSED_PAUSE` later, so legs past the cap cost one request a minute, not a retry loop.

The first poll waits `_FOLLOW_AFTER` into the attempt: a leg that ends sooner (a short tool)
would have its poll answered only by the close its own outcome brings, one request more per
task for nothing. A cancel in that time is heard as the poll starts, since the closed run
answers it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.service import RPCError, RPCStatusCode

logger = logging.getLogger(__name__)

# An attempt starts following its run this long after it started; a leg that ends sooner follows nothing.
_FOLLOW_AFTER = timedelta(milliseconds=100)
# The caller's deadline for one long poll; the frontend answers empty before it.
_LONG_POLL_DEADLINE = timedelta(minutes=1)
# After a failed poll, the next one waits this long.
_RETRY_AFTER = timedelta(seconds=5)
# After the frontend refused a poll for its cap on concurrent long polls, the next one waits this long.
_REFUSED_PAUSE = timedelta(minutes=1)


@asynccontextmanager
async def following_close(closed: Callable[[], None]) -> AsyncIterator[None]:
    """Call `closed` when the running attempt's workflow run closes, while the block runs."""
    following = asyncio.create_task(_until_closed(closed))
    try:
        yield
    finally:
        following.cancel()


async def _until_closed(closed: Callable[[], None]) -> None:
    info = activity.info()
    client = activity.client()
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=info.workflow_id, run_id=info.workflow_run_id),
        wait_new_event=True,
        skip_archival=True,
        history_event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT,
    )
    await asyncio.sleep(_FOLLOW_AFTER.total_seconds())
    while True:
        try:
            response = await client.workflow_service.get_workflow_execution_history(
                request, timeout=_LONG_POLL_DEADLINE
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                closed()  # the run is gone already
                return
            if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                await asyncio.sleep(_REFUSED_PAUSE.total_seconds())
            elif exc.status != RPCStatusCode.DEADLINE_EXCEEDED:
                logger.info("A leg could not follow its task for a cancel (%s); a heartbeat carries it.", exc.message)
                await asyncio.sleep(_RETRY_AFTER.total_seconds())
            continue
        if response.history.events or not response.next_page_token:
            closed()
            return
        request.next_page_token = response.next_page_token
