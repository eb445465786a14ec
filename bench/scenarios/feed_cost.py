"""What the change feed costs and how soon it wakes a reader, at N tasks of which K change.

    .venv/bin/python -m bench run feed_cost [--tasks 2000] [--changes 100] [--interval 0.25] [--lag 3]

On the run's dev server (in memory), holds `--tasks` workflows running under the task
workflow's name, on a task queue of their own: a stand-in that does to visibility what a
parked task does (no `McpTaskChangedAt` until it changes; at an ask, one upsert of
`McpTaskStatus` and `McpTaskChangedAt`; a close), so thousands start in seconds without
MCP. Then one `ChangeFeed` (`server/_feed.py`) at `--interval` and `--lag`:

- idle: the visibility query with nothing changed, timed 20 times (what one interval costs);
- changes: a reader waits on each of `--changes` tasks, which change one by one, 100 ms
  apart, alternately by an ask (an upsert) and a close; from the signal's acknowledgement to
  the reader's wake (the feed's freshness on this machine's SQLite visibility), and the
  visibility requests and rows of the queries meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from bench.harness import dev_server
from bench.metrics import percentiles
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._feed import Change, ChangeFeed, TemporalVisibility
from fastmcp_temporal.workflows.models import WORKFLOW_NAME
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE, STATUS_ATTRIBUTE

QUESTION = (
    "What does the change feed cost, and how soon does it wake a reader, at N running tasks of which "
    "K change?"
)
QUICK = {"tasks": 100, "changes": 10}
TASK_QUEUE = "feed-cost"
STARTS_AT_ONCE = 50


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class StandInTask:
    """Visibility's view of a task: parked until `ask` stamps a change, or `close` ends it."""

    def __init__(self) -> None:
        self._closed = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._closed)

    @workflow.signal
    def ask(self) -> None:
        workflow.upsert_search_attributes(
            [STATUS_ATTRIBUTE.value_set("input_required"), CHANGED_AT_ATTRIBUTE.value_set(workflow.now())]
        )

    @workflow.signal
    def close(self) -> None:
        self._closed = True


class TimedVisibility(TemporalVisibility):
    """Temporal's visibility, each query timed with the rows it listed."""

    def __init__(self, client: Client, task_queue: str) -> None:
        super().__init__(client, task_queue)
        self.queries: list[tuple[float, int]] = []

    async def changed_since(self, since: datetime) -> list[Change]:
        began = time.monotonic()
        changes = await super().changed_since(since)
        self.queries.append(((time.monotonic() - began) * 1000, len(changes)))
        return changes


async def _start_tasks(client: Client, count: int) -> list[str]:
    ids = [f"feed-cost-{uuid.uuid4().hex}" for _ in range(count)]
    working = TypedSearchAttributes([SearchAttributePair(STATUS_ATTRIBUTE, "working")])
    gate = asyncio.Semaphore(STARTS_AT_ONCE)

    async def start(workflow_id: str) -> None:
        async with gate:
            await client.start_workflow(
                WORKFLOW_NAME, id=workflow_id, task_queue=TASK_QUEUE, search_attributes=working
            )

    await asyncio.gather(*(start(workflow_id) for workflow_id in ids))
    return ids


async def _idle_queries(visibility: TimedVisibility, clock: TemporalClock, lag: timedelta) -> dict[str, Any]:
    for _ in range(20):
        await visibility.changed_since(clock.now() - lag)
    timings = [ms for ms, _ in visibility.queries]
    rows = [count for _, count in visibility.queries]
    visibility.queries.clear()
    return {"query_ms": percentiles(timings), "rows_max": max(rows)}


async def _changes(
    client: Client, feed: ChangeFeed, visibility: TimedVisibility, ids: list[str]
) -> dict[str, Any]:
    requests_before, began = visibility.requests, time.monotonic()
    waits = {workflow_id: feed.subscribe(workflow_id) for workflow_id in ids}
    woken: dict[str, float] = {}
    for workflow_id, waiting in waits.items():
        waiting.add_done_callback(
            lambda _, workflow_id=workflow_id: woken.setdefault(workflow_id, time.monotonic())
        )
    signalled: dict[str, float] = {}
    for number, workflow_id in enumerate(ids):
        await client.get_workflow_handle(workflow_id).signal("ask" if number % 2 == 0 else "close")
        signalled[workflow_id] = time.monotonic()
        await asyncio.sleep(0.1)
    results = await asyncio.wait_for(asyncio.gather(*waits.values()), timeout=60)
    elapsed = time.monotonic() - began
    requests = visibility.requests - requests_before
    latencies = [woken[workflow_id] - signalled[workflow_id] for workflow_id in ids]
    return {
        "woken": sum(result is not None for result in results),
        "closes_seen": sum(result is not None and result.closed for result in results),
        "wake_after_signal_s": percentiles(latencies, digits=3),
        "seconds": round(elapsed, 1),
        "visibility_requests": requests,
        "visibility_requests_per_s": round(requests / elapsed, 2),
        "query_ms": percentiles([ms for ms, _ in visibility.queries]),
        "rows_per_query": percentiles([float(count) for _, count in visibility.queries]),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server(in_memory=True) as server:
        return await _measured(await Client.connect(server.address), args)


async def _measured(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    lag = timedelta(seconds=args.lag)
    async with Worker(
        client, task_queue=TASK_QUEUE, workflows=[StandInTask], max_cached_workflows=args.tasks + 100
    ):
        started = time.monotonic()
        ids = await _start_tasks(client, args.tasks)
        start_seconds = time.monotonic() - started
        clock = TemporalClock()
        await clock.read_once(client)
        visibility = TimedVisibility(client, TASK_QUEUE)
        idle = await _idle_queries(visibility, clock, lag)
        feed = ChangeFeed(visibility, clock, interval=timedelta(seconds=args.interval), lag=lag)
        try:
            changes = await _changes(client, feed, visibility, ids[: args.changes])
        finally:
            await feed.close()
    per_task = changes["visibility_requests_per_s"] * 30 / args.tasks
    return {
        "start_seconds": round(start_seconds, 1),
        "idle": idle,
        "changing": changes,
        "visibility_requests_per_task_per_30s": round(per_task, 4),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=2000, help="tasks held running")
    parser.add_argument(
        "--changes", type=int, default=100, help="tasks that change, a reader waiting on each"
    )
    parser.add_argument("--interval", type=float, default=0.25, help="change_feed_interval, seconds")
    parser.add_argument("--lag", type=float, default=3.0, help="change_feed_lag, seconds")
