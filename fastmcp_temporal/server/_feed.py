"""What changed among this server's tasks, from one visibility query per interval, not a read per task.

A task stamps `McpTaskChangedAt` in the upsert that publishes its status (an ask, the end of
a round, a failure, a cancel), and a closed task has its `CloseTime`; so while anyone waits
on the `ChangeFeed`, it asks Temporal's visibility every `change_feed_interval` for the
tasks either moved on since the previous query began, on Temporal's clock, less
`change_feed_lag`, and wakes whoever waits on them. The cost is one request (a page) per
interval per server, whatever the number of tasks waiting.

Visibility lags history (about a second on Elasticsearch or SQL, and it may list rows out
of order): a change listed within `change_feed_lag` of its stamp is never missed, because
every query reaches that far back before the previous one's start; rows seen twice wake
nobody twice. A change listed later may be missed: `last_mentioned` and `covering_since`
let a reader re-read a task the feed has not mentioned for long (its safety re-read). A
failed query crashes nothing: its waiters are told to re-read (their future resolves to
None) and the feed backs off, its next query reaching back over the failed ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol

from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client
from temporalio.converter import decode_typed_search_attributes

from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._temporal_clock import TemporalClock, monotonic
from fastmcp_temporal.workflows.models import CHANGED_AT_SEARCH_ATTRIBUTE, WORKFLOW_NAME
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE

logger = logging.getLogger(__name__)

# The feed queries on this long after its last waiter left, so a reader that re-reads and
# waits again finds it running, its window unbroken.
_LINGER = timedelta(seconds=1)
# After a failed query the next waits twice as long as the one before, up to this.
_MOST_BACKOFF = timedelta(seconds=5)
# A task mentioned longer ago than this is forgotten (reads as never mentioned).
_MENTION_MEMORY = timedelta(minutes=10)
_PAGE_SIZE = 1000
_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Change:
    """A change of one task, as visibility lists it."""

    workflow_id: str
    at: datetime
    """When it changed, on Temporal's clock: its `McpTaskChangedAt`, or its close, whichever is later."""
    closed: bool


class VisibilitySource(Protocol):
    """Where the feed reads which tasks changed (Temporal's visibility, or a test's stand-in)."""

    async def changed_since(self, since: datetime) -> list[Change]:
        """Every task whose change or close is at `since` or later, in any order."""
        ...


class TemporalVisibility:
    """The tasks of one task queue that changed, from Temporal's visibility, a page per request."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue
        self.requests = 0
        """Visibility requests made so far (a page each)."""

    def query(self, since: datetime) -> str:
        """The visibility query for the tasks changed or closed at `since` or later."""
        stamp = since.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        return (
            f"WorkflowType = '{WORKFLOW_NAME}' AND TaskQueue = '{self._task_queue}' "
            f"AND ({CHANGED_AT_SEARCH_ATTRIBUTE} >= '{stamp}' OR CloseTime >= '{stamp}')"
        )

    async def changed_since(self, since: datetime) -> list[Change]:
        request = ListWorkflowExecutionsRequest(
            namespace=self._client.namespace, page_size=_PAGE_SIZE, query=self.query(since)
        )
        changes: list[Change] = []
        while True:
            self.requests += 1
            page = await self._client.workflow_service.list_workflow_executions(request)
            changes += (change for info in page.executions if (change := _change_of(info)) is not None)
            if not page.next_page_token:
                return changes
            request.next_page_token = page.next_page_token


def _change_of(info: WorkflowExecutionInfo) -> Change | None:
    """The row's change; None for a run that continued as new (its next run carries its stamp)."""
    if info.status == WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
        return None
    closed = info.HasField("close_time") and info.status != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
    stamps = [info.close_time.ToDatetime(tzinfo=timezone.utc)] if closed else []
    if (changed_at := decode_typed_search_attributes(info.search_attributes).get(CHANGED_AT_ATTRIBUTE)) is not None:
        stamps.append(changed_at)
    if not stamps:
        return None
    return Change(info.execution.workflow_id, max(stamps), closed)


class ChangeFeed:
    """Wakes the readers waiting on a task when visibility lists its next change.

    Args:
        source: where the tasks that changed are listed.
        clock: Temporal's clock, read before the first `subscribe`.
        interval: time between the starts of two queries.
        lag: how far before the previous query's start each query reaches back, the
            visibility lag the feed misses nothing within.
    """

    def __init__(
        self, source: VisibilitySource, clock: TemporalClock, *, interval: timedelta, lag: timedelta
    ) -> None:
        self._source = source
        self._clock = clock
        self._interval = interval.total_seconds()
        self._lag = lag
        self._waiters: dict[str, set[asyncio.Future[Change | None]]] = {}
        self._seen: dict[tuple[str, datetime], None] = {}
        self._latest: dict[str, tuple[Change, float]] = {}
        """The newest change listed of each task, and when (`monotonic()`) it was listed."""
        self._covering_since: float | None = None
        self._failing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def of(cls, client: Client, settings: TemporalTasksSettings, clock: TemporalClock) -> ChangeFeed:
        """The feed of the tasks on the settings' task queue, at their interval and lag."""
        source = TemporalVisibility(client, settings.task_queue)
        return cls(source, clock, interval=settings.change_feed_interval, lag=settings.change_feed_lag)

    @property
    def interval(self) -> timedelta:
        """The time between the starts of two queries."""
        return timedelta(seconds=self._interval)

    def subscribe(self, workflow_id: str, after: datetime | None = None) -> asyncio.Future[Change | None]:
        """A future resolved with the task's next change the feed lists (a `Change`), or with None when
        the feed cannot tell (a failed query, or the feed closed): re-read the task then.

        With `after` (Temporal's time your knowledge of the task dates from, taken before you read
        it), a change the feed listed already that is newer resolves it at once, so none falls
        between two waits. Without it, subscribe before reading the task. Cancel the future to stop
        waiting.
        """
        future: asyncio.Future[Change | None] = asyncio.get_running_loop().create_future()
        latest = self._latest.get(workflow_id)
        if self._closed:
            future.set_result(None)
            return future
        if after is not None and latest is not None and latest[0].at > after:
            future.set_result(latest[0])
            return future
        self._waiters.setdefault(workflow_id, set()).add(future)
        future.add_done_callback(lambda done: self._forget(workflow_id, done))
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name="fastmcp-temporal change feed")
        return future

    def last_mentioned(self, workflow_id: str) -> float | None:
        """When (`monotonic()`) the feed last listed a new change of the task; None if not in the
        last ten minutes or so: a reader whose copy is older re-reads the task (its safety re-read)."""
        latest = self._latest.get(workflow_id)
        return None if latest is None else latest[1]

    def covering_since(self) -> float | None:
        """Since when (`monotonic()`) the feed has listed every change within its lag, without a gap;
        None while it is not running or its last query failed. What a reader read of a task after this
        and the feed has not mentioned since is current, as far as visibility lags no more than `lag`."""
        return self._covering_since

    async def close(self) -> None:
        """Stop querying; whoever waits is told to re-read."""
        self._closed = True
        self._release_all()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task

    async def _run(self) -> None:
        """Query every interval while anyone waits (and `_LINGER` after), each query reaching back
        `lag` before the previous successful one began."""
        previous_start = self._clock.now()
        self._covering_since = None if self._failing else monotonic()
        backoff = self._interval
        idle_since: float | None = None
        try:
            while idle_since is None or monotonic() - idle_since < _LINGER.total_seconds():
                await asyncio.sleep(backoff)
                started, began = self._clock.now(), monotonic()
                try:
                    changes = await self._source.changed_since(_minus(previous_start, self._lag))
                except Exception as exc:  # visibility down or refusing: readers fall back to re-reading
                    backoff = self._failed(exc, backoff)
                else:
                    self._recovered()
                    backoff = max(0.0, self._interval - (monotonic() - began))
                    self._take(changes, since=_minus(previous_start, self._lag))
                    previous_start = started
                idle_since = None if self._waiters else (idle_since or monotonic())
        finally:
            self._covering_since = None

    def _failed(self, exc: Exception, backoff: float) -> float:
        if not self._failing:
            logger.warning("The change feed's visibility query failed (%s); readers re-read their tasks.", exc)
        self._failing, self._covering_since = True, None
        self._release_all()
        return min(max(backoff, self._interval) * 2, _MOST_BACKOFF.total_seconds())

    def _recovered(self) -> None:
        if self._failing:
            logger.warning("The change feed's visibility query answers again.")
        if self._covering_since is None:
            self._covering_since = monotonic()
        self._failing = False

    def _take(self, changes: Iterable[Change], *, since: datetime) -> None:
        """Wake the waiters of each change not listed before; forget what no query lists any more."""
        now = monotonic()
        for change in changes:
            key = (change.workflow_id, change.at)
            if key in self._seen:
                continue
            self._seen[key] = None
            latest = self._latest.get(change.workflow_id)
            if latest is None or change.at > latest[0].at:
                self._latest[change.workflow_id] = (change, now)
            for future in list(self._waiters.get(change.workflow_id, ())):
                if not future.done():
                    future.set_result(change)
        self._seen = {key: None for key in self._seen if key[1] >= since}
        horizon = now - _MENTION_MEMORY.total_seconds()
        if self._latest and min(listed for _, listed in self._latest.values()) < horizon:
            self._latest = {wid: latest for wid, latest in self._latest.items() if latest[1] >= horizon}

    def _release_all(self) -> None:
        for futures in list(self._waiters.values()):
            for future in list(futures):
                if not future.done():
                    future.set_result(None)

    def _forget(self, workflow_id: str, future: asyncio.Future[Change | None]) -> None:
        futures = self._waiters.get(workflow_id)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self._waiters[workflow_id]


def _minus(stamp: datetime, margin: timedelta) -> datetime:
    """`stamp` less `margin`, never before 1970 (a clock not yet read says the earliest time)."""
    return max(stamp, _EARLIEST + margin) - margin
