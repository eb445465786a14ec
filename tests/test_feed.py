"""The change feed: one visibility query per interval tells a server which of its tasks changed.

Against a real dev server, a running task's ask and its close each wake a reader waiting
on it, while other workflow types, task queues and namespaces are not listed; a task stamps
`McpTaskChangedAt` in the upsert it already makes, adding no history event, and a namespace
without the attribute still serves tasks, unstamped, with a log naming the fix. Against a stand-in visibility that lists changes late (up to the feed's
lag) and out of order, nothing is missed; a change listed later than that is left to the
reader's safety re-read, which `last_mentioned` tells it to make; a failing visibility
tells the waiting readers to re-read, and the feed stops querying once nobody waits.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from google.protobuf.duration_pb2 import Duration
from mcp_types import InputRequiredResult
from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client as TemporalClient
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._search_attributes import Indexed, ensure_search_attributes
from fastmcp_temporal.connection._temporal_clock import TemporalClock, monotonic
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server import _extension
from fastmcp_temporal.server._feed import Change, ChangeFeed, TemporalVisibility
from fastmcp_temporal.workflows.models import WORKFLOW_NAME
from fastmcp_temporal.workflows.task import CHANGED_AT_ATTRIBUTE, STATUS_ATTRIBUTE
from helpers.servers import server_with
from helpers.temporal import anonymous_workflow_id, task_handle
from helpers.waits import DEADLINE, finished, status_becomes
from helpers.wire import accept, ask, tasks_update

pytestmark = pytest.mark.anyio

UPSERT = EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES


async def _asker(ctx: Context) -> str | InputRequiredResult:
    if ctx.input_responses is None:
        return ask("name")
    return "done"


async def _read_clock(client: TemporalClient) -> TemporalClock:
    clock = TemporalClock()
    await clock.read_once(client)
    return clock


async def _next_change(feed: ChangeFeed, workflow_id: str, after: datetime | None = None) -> Change:
    """Wait on the feed until it lists a change of the task (its close, once `after` is given)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            change = await feed.subscribe(workflow_id, after)
            assert change is not None, "the feed's visibility query failed"
            if change.closed or after is None:
                return change
            after = change.at


async def test_a_tasks_ask_and_its_close_each_wake_its_reader(make_extension, task_queue: str) -> None:
    extension = make_extension()
    mcp = server_with(extension)
    mcp.tool(name="asker", task=True)(_asker)
    async with Client(mcp) as client:
        temporal = extension.client
        assert temporal is not None
        feed = ChangeFeed(TemporalVisibility(temporal, task_queue), await _read_clock(temporal),
                          interval=timedelta(milliseconds=100), lag=timedelta(seconds=3))
        try:
            task = await call_tool_task(client, "asker", {})
            workflow_id = anonymous_workflow_id(task.task_id)
            asked = await _next_change(feed, workflow_id)
            assert not asked.closed
            description = await task_handle(extension, task.task_id).describe()
            assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "input_required"
            assert description.typed_search_attributes.get(CHANGED_AT_ATTRIBUTE) == asked.at

            key = next(iter((await status_becomes(task, "input_required")).input_requests or {}))
            await tasks_update(client, task.task_id, {key: accept("Ada")})
            assert (await _next_change(feed, workflow_id, after=asked.at)).closed
            assert feed.last_mentioned(workflow_id) is not None
        finally:
            await feed.close()


async def test_rows_of_other_workflow_types_task_queues_and_namespaces_are_not_listed(
    make_extension, temporal_server: DevServer, task_queue: str
) -> None:
    namespace = f"other-{task_queue}"
    elsewhere = await TemporalClient.connect(temporal_server.address, namespace=namespace)
    await elsewhere.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
    )
    await ensure_search_attributes(elsewhere, temporal_server.address, namespace)
    extension = make_extension()
    mcp = server_with(extension)
    mcp.tool(name="asker", task=True)(_asker)
    async with Client(mcp) as client:
        temporal = extension.client
        assert temporal is not None
        since = (await _read_clock(temporal)).now() - timedelta(seconds=1)
        stamped = TypedSearchAttributes([SearchAttributePair(CHANGED_AT_ATTRIBUTE, datetime.now(timezone.utc))])
        others = [(temporal, "NotAnMcpTask", task_queue), (temporal, WORKFLOW_NAME, f"{task_queue}-other"),
                  (elsewhere, WORKFLOW_NAME, task_queue)]
        for where, workflow, queue in others:
            other = await where.start_workflow(workflow, id=f"other-{uuid.uuid4().hex}", task_queue=queue,
                                               search_attributes=stamped)
            await other.terminate()
        task = await call_tool_task(client, "asker", {})
        await status_becomes(task, "input_required")
        visibility = TemporalVisibility(temporal, task_queue)
        async with asyncio.timeout(DEADLINE):
            while not (listed := await visibility.changed_since(since)):
                await asyncio.sleep(0.1)
        assert {change.workflow_id for change in listed} == {anonymous_workflow_id(task.task_id)}


async def test_stamping_changes_adds_no_history_event(make_extension, monkeypatch: pytest.MonkeyPatch) -> None:
    histories = {}
    for changes in (False, True):
        async def indexed(*_: object, changes: bool = changes) -> Indexed:
            return Indexed(tasks=True, changes=changes)

        monkeypatch.setattr(_extension, "searchable", indexed)
        extension = make_extension()
        mcp = server_with(extension)
        mcp.tool(name="asker", task=True)(_asker)
        async with Client(mcp) as client:
            task = await call_tool_task(client, "asker", {})
            key = next(iter((await status_becomes(task, "input_required")).input_requests or {}))
            await tasks_update(client, task.task_id, {key: accept("Ada")})
            assert (await finished(task)).status == "completed"
            histories[changes] = (await task_handle(extension, task.task_id).fetch_history()).events

    assert [event.event_type for event in histories[True]] == [event.event_type for event in histories[False]]
    assert _upserted(histories[True]) == [["McpTaskChangedAt", "McpTaskStatus"]] * 2  # the ask, the round's end
    assert _upserted(histories[False]) == [["McpTaskStatus"]] * 2


async def test_a_namespace_without_the_change_attribute_still_serves_tasks_and_says_how_to_add_it(
    temporal_server: DevServer, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = f"unstamped-{task_queue}"
    admin = await TemporalClient.connect(temporal_server.address)
    await admin.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
    )
    await admin.operator_service.add_search_attributes(AddSearchAttributesRequest(  # taken, with another type
        namespace=namespace, search_attributes={"McpTaskChangedAt": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}
    ))
    extension = TemporalTasksExtension(address=temporal_server.address, namespace=namespace, task_queue=task_queue)
    mcp = server_with(extension)
    mcp.tool(name="asker", task=True)(_asker)
    with caplog.at_level(logging.WARNING, logger="fastmcp_temporal"):
        async with Client(mcp) as client:
            task = await call_tool_task(client, "asker", {})
            key = next(iter((await status_becomes(task, "input_required")).input_requests or {}))
            await tasks_update(client, task.task_id, {key: accept("Ada")})
            assert (await finished(task)).status == "completed"
            history = (await task_handle(extension, task.task_id).fetch_history()).events
    assert "Register McpTaskChangedAt as a Datetime search attribute" in caplog.text
    assert _upserted(history) == [["McpTaskStatus"]] * 2


def _upserted(history: list[HistoryEvent]) -> list[list[str]]:
    """The search attributes each upsert of a task's history sets, by name."""
    return [sorted(event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
            for event in history if event.event_type == UPSERT]


# --- against a stand-in visibility -------------------------------------------


@dataclass(frozen=True)
class _Written:
    change: Change
    listed_from: datetime
    """When visibility starts listing it (its lag after the change)."""


class _LaggingVisibility:
    """Lists each change from its own time after it happened, in shuffled order; may fail."""

    def __init__(self) -> None:
        self.written: list[_Written] = []
        self.queries = 0
        self.failing = False

    def write(self, workflow_id: str, lag: timedelta) -> Change:
        change = Change(workflow_id, _now(), closed=False)
        self.written.append(_Written(change, change.at + lag))
        return change

    async def changed_since(self, since: datetime) -> list[Change]:
        self.queries += 1
        if self.failing:
            raise RuntimeError("visibility is down")
        now = _now()
        listed = [w.change for w in self.written if w.listed_from <= now and w.change.at >= since]
        random.shuffle(listed)
        return listed


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _feed(source: _LaggingVisibility, lag: timedelta) -> ChangeFeed:
    clock = TemporalClock()
    clock.saw(_now())  # the stand-in's clock is this machine's
    return ChangeFeed(source, clock, interval=timedelta(milliseconds=20), lag=lag)


async def test_changes_listed_late_and_out_of_order_within_the_lag_are_never_missed() -> None:
    lag = timedelta(milliseconds=300)
    source = _LaggingVisibility()
    feed = _feed(source, lag)
    try:
        rounds = []
        for number in range(40):
            workflow_id = f"task-{number}"
            waiting = feed.subscribe(workflow_id)
            await asyncio.sleep(random.uniform(0, 0.03))
            rounds.append((waiting, source.write(workflow_id, lag * random.random())))
        async with asyncio.timeout(DEADLINE):
            for waiting, change in rounds:
                assert await waiting == change
    finally:
        await feed.close()


async def test_a_change_listed_later_than_the_lag_is_left_to_the_safety_reread() -> None:
    source = _LaggingVisibility()
    feed = _feed(source, timedelta(milliseconds=50))
    try:
        subscribed_at = monotonic()
        late = feed.subscribe("late")
        listed_from = source.write("late", timedelta(seconds=2)).at + timedelta(seconds=2)
        source.write("prompt", timedelta(0))
        async with asyncio.timeout(DEADLINE):
            while (mentioned := feed.last_mentioned("prompt")) is None:
                await asyncio.sleep(0.02)
            while _now() < listed_from:
                await asyncio.sleep(0.05)
            queried = source.queries
            while source.queries < queried + 5:  # queries that could list it: it fell out of their window
                await asyncio.sleep(0.02)
        assert not late.done()
        assert mentioned > subscribed_at
        assert feed.last_mentioned("late") is None  # so the reader's safety re-read finds it
        late.cancel()
    finally:
        await feed.close()


async def test_a_failing_visibility_tells_readers_to_reread_and_the_feed_stops_when_nobody_waits() -> None:
    source = _LaggingVisibility()
    source.failing = True
    feed = _feed(source, timedelta(milliseconds=50))
    try:
        async with asyncio.timeout(DEADLINE):
            assert await feed.subscribe("task") is None
            assert feed.covering_since() is None
            source.failing = False
            change = source.write("task", timedelta(0))
            assert await feed.subscribe("task") == change
            assert feed.covering_since() is not None
            while feed.covering_since() is not None:  # nobody waits: the feed stops
                await asyncio.sleep(0.05)
        stopped = source.queries
        await asyncio.sleep(0.2)
        assert source.queries == stopped
    finally:
        await feed.close()
    assert await feed.subscribe("task") is None
