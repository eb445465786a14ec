"""Temporal's clock as one process sees it, so no age this package computes reads the local clock.

The stall, TTL and waiting rules compare a timestamp Temporal wrote (when a workflow task
was scheduled, when a task closed, when its TTL timer fires, when a leg's attempt started)
with "now". A server or CLI
whose clock runs ahead of Temporal's would see every age too old (a cancel terminating a
task a worker was about to take, a result "not found" before its TTL), one behind too young.
So "now" is Temporal's: the newest timestamp this process has seen Temporal write, moved
on by the monotonic clock since it was seen. Temporal stamps an event when it happens, so
this is never ahead of Temporal's clock: an age is never overstated and no rule fires
early. It lags by how old the newest timestamp was when seen, so a process reads
Temporal's clock once, before its first age (`read_once`): Temporal answers no request
with its time, but it notes when a poller last polled, so the process starts a poll of a
task queue of its own that no worker uses and reads that back (`DescribeTaskQueue`):
Temporal's time between the two requests, a few milliseconds wide. From then on the
monotonic clock carries it, and the watches' long polls, every `describe()` and a cancel's
own event (read right after it) only move it on.

The monotonic clock is read in `monotonic()` alone; no local wall clock is read.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import datetime, timedelta, timezone

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, PollWorkflowTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

logger = logging.getLogger(__name__)

# The probe's poll: on a sticky queue (one partition, which `DescribeTaskQueue` describes), as
# short as Temporal lets a long poll be; its poller shows within milliseconds.
_PROBE_QUEUE = "fastmcp-temporal-clock"
_PROBE_POLL = timedelta(seconds=3)
_PROBE_CHECK = 0.005
_PROBE_WAIT = 5.0


def monotonic() -> float:
    """Seconds on this process's monotonic clock (never the wall clock, which may be set anywhere)."""
    return time.monotonic()


class TemporalClock:
    """Now on Temporal's clock, from the timestamps Temporal wrote that this process has read."""

    def __init__(self) -> None:
        self._newest: datetime | None = None
        self._seen_at = 0.0
        self._first_read: asyncio.Future[None] | None = None

    async def read_once(self, client: Client) -> None:
        """Read Temporal's clock, the first time this is called (later calls join or skip it)."""
        first = self._first_read
        if first is None or (not first.done() and first.get_loop() is not asyncio.get_running_loop()):
            self._first_read = asyncio.ensure_future(self._read(client))  # once, or again on a new loop
        if not self._first_read.done():
            await asyncio.shield(self._first_read)

    async def _read(self, client: Client) -> None:
        """Poll a task queue of our own and read back when Temporal saw the poll start; on any
        failure, ages rest on the timestamps seen (never ahead, possibly behind)."""
        identity = f"{_PROBE_QUEUE}-{uuid.uuid4().hex}"
        queue = TaskQueue(name=identity, kind=TaskQueueKind.TASK_QUEUE_KIND_STICKY, normal_name=_PROBE_QUEUE)
        poll_request = PollWorkflowTaskQueueRequest(namespace=client.namespace, task_queue=queue, identity=identity)
        poll = asyncio.ensure_future(client.workflow_service.poll_workflow_task_queue(poll_request, timeout=_PROBE_POLL))
        poll.add_done_callback(lambda done: done.cancelled() or done.exception())  # its end is not ours to read
        describe = DescribeTaskQueueRequest(namespace=client.namespace, task_queue=queue,
                                            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, report_pollers=True)
        give_up = monotonic() + _PROBE_WAIT
        try:
            while not poll.done() and monotonic() < give_up:
                pollers = (await client.workflow_service.describe_task_queue(describe)).pollers
                if seen := [poller.last_access_time for poller in pollers if poller.identity == identity]:
                    self.saw(seen[0])
                    return
                await asyncio.sleep(_PROBE_CHECK)
            logger.warning("Could not read Temporal's clock: ages rest on the timestamps this process reads.")
        except RPCError as exc:
            logger.warning("Could not read Temporal's clock (%s): ages rest on the timestamps this process reads.", exc)
        finally:
            poll.cancel()

    def saw(self, stamp: datetime | Timestamp) -> None:
        """A timestamp Temporal wrote, just read from one of its answers."""
        if isinstance(stamp, Timestamp):
            if not stamp.seconds and not stamp.nanos:
                return  # unset
            stamp = stamp.ToDatetime(tzinfo=timezone.utc)
        seen_at = monotonic()
        if self._newest is None or stamp > self._newest + timedelta(seconds=seen_at - self._seen_at):
            self._newest, self._seen_at = stamp, seen_at

    def saw_description(self, description: WorkflowExecutionDescription) -> None:
        """The timestamps of a `describe()` just answered."""
        raw = description.raw_description
        info = raw.workflow_execution_info
        # not when a workflow task is scheduled: a retry that backs off may be scheduled ahead
        for stamp in (info.start_time, info.close_time, raw.pending_workflow_task.started_time):
            self.saw(stamp)
        for activity in raw.pending_activities:
            self.saw(activity.last_heartbeat_time)
            self.saw(activity.last_started_time)

    def since_written(self, stamp: datetime) -> timedelta:
        """How long ago, on Temporal's clock, Temporal wrote `stamp` (a timestamp just read from it)."""
        self.saw(stamp)
        return self.now() - stamp

    def now(self) -> datetime:
        """Now on Temporal's clock, never ahead of it: before any timestamp was seen, the earliest
        time (nothing has aged)."""
        if self._newest is None:
            return datetime.min.replace(tzinfo=timezone.utc)
        return self._newest + timedelta(seconds=monotonic() - self._seen_at)


worker_clock = TemporalClock()
"""Temporal's clock for the legs this process's workers run (read when a worker starts), by which
a leg ages its attempt: how long ago Temporal started it, and when its time runs out."""
