"""Past `watched_tasks` long polls, a server follows its tasks through the change feed.

Proves, on a real Temporal server over the MCP wire, with a worker server and an API-only
server whose single long poll (`watched_tasks=1`) a first task holds: every later task the API
server reads is followed by one visibility query per interval for all of them
(`ListWorkflowExecutions`), with no long poll of its history; yet an ask, an answer through
the other server (a partial one too), the close, a cancel through the other server, and a
leg's stamped progress message each show at its reads, which are held until then (a read that
answered from its copy without the feed would repeat the old answer, and a watch subscribes to the
feed again only after every deadline, so the feed's wake-up alone shows them); and a parked task whose worker is gone is
still ended at its TTL by a read, although its TTL timer adds no stamp. Against a visibility
that lags as production's does (rows listed late and out of order), every change still
shows; one it never lists shows at the safety re-read.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server import _feed_gaps, _feed_road
from fastmcp_temporal.server._feed import Change, TemporalVisibility
from fastmcp_temporal.server._stalled import EXPIRED_REASON
from fastmcp_temporal.worker import _progress
from helpers.servers import reporting_once, server_with
from helpers.temporal import HistoryLongPolls, TemporalRequests, anonymous_workflow_id
from helpers.waits import DEADLINE, polled_until
from helpers.wire import (
    accept,
    ask,
    asking,
    only_key,
    parks,
    tasks_cancel,
    tasks_get,
    tasks_update,
    two_rounds,
)

pytestmark = pytest.mark.anyio

LIST = "ListWorkflowExecutions"
# Longer than any test: only an event, or the feed, can show what changed.
NEVER = timedelta(seconds=DEADLINE * 4)


@pytest.fixture(autouse=True)
def only_the_feeds_wake_up_shows_a_change_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fed watch subscribes to the feed again every `IDLE_CHECK` (15 s), which hands it a change the
    feed listed even had the feed not woken it, within a 30 s deadline: pushed past every deadline
    here, a change shows in time only because the feed wakes the watch that follows its task."""
    monkeypatch.setattr(_feed_road, "IDLE_CHECK", NEVER)


async def asks_two(ctx: Context) -> str | InputRequiredResult:
    """Asks "a" and "b" at once."""
    return ask("a", "b") if ctx.input_responses is None else "answered"


@dataclass
class Fed:
    """A client of the worker server, one of the API server, and what the API server asked of Temporal."""

    worker: Client
    api: Client
    requests: TemporalRequests
    long_polls: HistoryLongPolls


@asynccontextmanager
async def fed_servers(
    temporal_server: DevServer,
    task_queue: str,
    make_extension: Callable[..., TemporalTasksExtension],
    *tools: Callable[..., Any],
    **settings: Any,
) -> AsyncIterator[Fed]:
    """A worker server and an API-only server with one long poll, which a parked first task holds."""
    requests = TemporalRequests()
    client = await requests.connect(temporal_server.address)
    long_polls = HistoryLongPolls(client)
    api_extension = TemporalTasksExtension(
        client=client, task_queue=task_queue, worker=False, watched_tasks=1, progress_refresh=NEVER, **settings
    )
    worker: FastMCP = server_with(make_extension(progress_refresh=NEVER, **settings), parks, *tools, name="worker")
    api: FastMCP = server_with(api_extension, parks, *tools, name="api")
    async with Client(worker) as through_worker, Client(api) as through_api:
        holder = await call_tool_task(through_api, "parks")  # followed by the one long poll
        await _shows(through_api, holder.task_id, "input_required")
        yield Fed(through_worker, through_api, requests, long_polls)


async def _shows(
    client: Client, task_id: str, status: str, until: Callable[[ClientGetTaskResult], bool] = lambda _: True
) -> ClientGetTaskResult:
    """Read the task until a read shows `status` (and `until`)."""
    return await polled_until(partial(tasks_get, client, task_id), status, until)


async def test_asks_answers_the_close_and_a_cancel_show_through_the_feed_without_a_long_poll(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    async with fed_servers(temporal_server, task_queue, make_extension, two_rounds, reread_hold=timedelta(seconds=1)) as fed:
        task = await call_tool_task(fed.worker, "two_rounds")
        parked = await _shows(fed.api, task.task_id, "input_required", asking("first"))
        listed = fed.requests.count()[LIST]
        for _ in range(3):  # held until the task changes, or the hold ends: the feed is queried meanwhile
            assert asking("first")(await tasks_get(fed.api, task.task_id))
        assert fed.requests.count()[LIST] > listed
        assert fed.long_polls.in_flight(anonymous_workflow_id(task.task_id)) == 0

        await tasks_update(fed.worker, task.task_id, {only_key(parked): accept("1")})
        parked = await _shows(fed.api, task.task_id, "input_required", asking("second"))
        await tasks_update(fed.api, task.task_id, {only_key(parked): accept("2")})
        done = await _shows(fed.api, task.task_id, "completed")
        assert done.result is not None and done.result["structuredContent"] == {"result": "done"}

        cancelled = await call_tool_task(fed.worker, "parks")
        await _shows(fed.api, cancelled.task_id, "input_required")
        await tasks_cancel(fed.worker, cancelled.task_id)
        await _shows(fed.api, cancelled.task_id, "cancelled")
        assert fed.long_polls.in_flight(anonymous_workflow_id(cancelled.task_id)) == 0


async def test_a_partial_answer_through_the_other_server_shows_through_the_feed(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """An answer that leaves a question open publishes no status: the workflow stamps it alone."""
    async with fed_servers(temporal_server, task_queue, make_extension, asks_two) as fed:
        task = await call_tool_task(fed.worker, "asks_two")
        parked = await _shows(fed.api, task.task_id, "input_required", lambda read: len(read.input_requests or {}) == 2)
        (key_a,) = [key for key, request in (parked.input_requests or {}).items() if request["params"]["message"] == "a"]
        await tasks_update(fed.worker, task.task_id, {key_a: accept("1")})
        parked = await _shows(fed.api, task.task_id, "input_required", asking("b"))
        await tasks_update(fed.api, task.task_id, {only_key(parked): accept("2")})
        await _shows(fed.api, task.task_id, "completed")


async def test_a_stamped_progress_message_shows_through_the_feed(
    temporal_server: DevServer,
    task_queue: str,
    make_extension: Callable[..., TemporalTasksExtension],
) -> None:
    """A leg's first message once it has run `FIRST_MESSAGE_STAMP_AFTER` is stamped, and the feed
    lists the stamp: the API server's re-reads of the silent leg have stopped by then."""
    go, finish, started = anyio.Event(), anyio.Event(), anyio.Event()
    reports = reporting_once(go, finish, "after a silence", started)

    async with fed_servers(temporal_server, task_queue, make_extension, reports) as fed:
        task = await call_tool_task(fed.worker, "reports")
        with anyio.fail_after(DEADLINE):
            await started.wait()
        # three heartbeat windows (make_extension's 2 s heartbeat_timeout) past the first stamp's
        # threshold: a heartbeat a window past it has told the API server, which re-reads no more
        quiet = anyio.current_time() + _progress.FIRST_MESSAGE_STAMP_AFTER.total_seconds() + 3 * 1.6
        while anyio.current_time() < quiet:
            await _shows(fed.api, task.task_id, "working")
            await anyio.sleep(0.1)
        go.set()
        await _shows(fed.api, task.task_id, "working", lambda read: read.status_message == "after a silence")
        assert fed.long_polls.in_flight(anonymous_workflow_id(task.task_id)) == 0
        finish.set()
        await _shows(fed.api, task.task_id, "completed")


async def test_a_parked_task_whose_worker_is_gone_is_ended_at_its_ttl_by_a_fed_read(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    requests = TemporalRequests()
    client = await requests.connect(temporal_server.address)
    settings: dict[str, Any] = {"task_ttl": timedelta(seconds=3), "progress_refresh": NEVER}
    api = server_with(
        TemporalTasksExtension(client=client, task_queue=task_queue, worker=False, watched_tasks=1, **settings),
        parks,
        name="api",
    )
    async with Client(api) as through_api:
        async with Client(server_with(make_extension(**settings), parks, name="worker")) as through_worker:
            holder = await call_tool_task(through_api, "parks")
            await _shows(through_api, holder.task_id, "input_required")
            task = await call_tool_task(through_worker, "parks")
            await _shows(through_api, task.task_id, "input_required")
        # No worker now: the TTL timer fires with nobody to end the task, so a read ends it.
        with anyio.fail_after(DEADLINE):
            with pytest.raises(MCPError):
                while True:
                    await tasks_get(through_api, task.task_id)
                    await anyio.sleep(0.1)
    described = await client.get_workflow_handle(anonymous_workflow_id(task.task_id)).describe()
    assert described.status == WorkflowExecutionStatus.TERMINATED
    history = await client.get_workflow_handle(anonymous_workflow_id(task.task_id)).fetch_history()
    assert EXPIRED_REASON in str(history.events[-1].workflow_execution_terminated_event_attributes.reason)


# --- against a visibility that lags -----------------------------------------


class LateVisibility:
    """Temporal's visibility as a production cluster's may answer: a row is listed only once it is
    `late` old, and each page comes back shuffled; the rows of a task in `never` are not listed at
    all (a lag past any `change_feed_lag`). Counts the rows it kept back, by workflow id."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, late: timedelta) -> None:
        self.late = late
        self.never: set[str] = set()
        self.kept_back: Counter[str] = Counter()
        listed = TemporalVisibility.changed_since

        async def changed_since(source: TemporalVisibility, since: datetime) -> list[Change]:
            rows = [row for row in await listed(source, since) if self._lists(row)]
            random.shuffle(rows)
            return rows

        monkeypatch.setattr(TemporalVisibility, "changed_since", changed_since)

    def _lists(self, row: Change) -> bool:
        listed = row.workflow_id not in self.never and row.at <= datetime.now(timezone.utc) - self.late
        self.kept_back[row.workflow_id] += not listed
        return listed


async def test_changes_visibility_lists_late_and_out_of_order_still_show_at_reads(
    temporal_server: DevServer,
    task_queue: str,
    make_extension: Callable[..., TemporalTasksExtension],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row is listed half the feed's lag late (a slow Elasticsearch), out of order."""
    visibility = LateVisibility(monkeypatch, late=timedelta(seconds=1.5))
    async with fed_servers(
        temporal_server, task_queue, make_extension, two_rounds, change_feed_lag=timedelta(seconds=3)
    ) as fed:
        task = await call_tool_task(fed.worker, "two_rounds")
        parked = await _shows(fed.api, task.task_id, "input_required", asking("first"))
        await tasks_update(fed.worker, task.task_id, {only_key(parked): accept("1")})
        parked = await _shows(fed.api, task.task_id, "input_required", asking("second"))
        await tasks_update(fed.worker, task.task_id, {only_key(parked): accept("2")})
        await _shows(fed.api, task.task_id, "completed")

        cancelled = await call_tool_task(fed.worker, "parks")
        await _shows(fed.api, cancelled.task_id, "input_required")
        await tasks_cancel(fed.worker, cancelled.task_id)
        await _shows(fed.api, cancelled.task_id, "cancelled")
    for shown in (task, cancelled):
        workflow_id = anonymous_workflow_id(shown.task_id)
        assert visibility.kept_back[workflow_id] > 0
        assert fed.long_polls.in_flight(workflow_id) == 0


async def test_a_change_visibility_never_lists_shows_at_the_safety_reread(
    temporal_server: DevServer,
    task_queue: str,
    make_extension: Callable[..., TemporalTasksExtension],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parked task the feed stops listing: nothing else re-reads it (no leg, no TTL due), so only
    the safety re-read shows its answer and close; at its default 10 min this test would time out."""
    monkeypatch.setattr(_feed_gaps, "SAFETY_REREAD", timedelta(seconds=DEADLINE / 4))
    visibility = LateVisibility(monkeypatch, late=timedelta(0))
    async with fed_servers(temporal_server, task_queue, make_extension) as fed:
        task = await call_tool_task(fed.worker, "parks")
        parked = await _shows(fed.api, task.task_id, "input_required")
        workflow_id = anonymous_workflow_id(task.task_id)
        visibility.never.add(workflow_id)
        await tasks_update(fed.worker, task.task_id, {only_key(parked): accept("now")})
        done = await _shows(fed.api, task.task_id, "completed")
        assert done.result is not None and done.result["structuredContent"] == {"result": "answered"}
        assert visibility.kept_back[workflow_id] > 0  # visibility had the close; the feed never saw it
        assert fed.long_polls.in_flight(workflow_id) == 0


async def test_a_server_long_polls_only_as_many_tasks_as_cost_less_than_the_feed(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """At a 10 s feed interval two long polls (a request per 20 s each) cost what the feed does:
    the third task read is followed through the feed, although `watched_tasks` (500) has room."""
    requests = TemporalRequests()
    client = await requests.connect(temporal_server.address)
    long_polls = HistoryLongPolls(client)
    api = server_with(
        TemporalTasksExtension(
            client=client, task_queue=task_queue, worker=False, change_feed_interval=timedelta(seconds=10)
        ),
        parks,
        name="api",
    )
    async with Client(server_with(make_extension(), parks, name="worker")) as worker, Client(api) as through_api:
        tasks = [await call_tool_task(worker, "parks") for _ in range(3)]
        for task in tasks:
            await _shows(through_api, task.task_id, "input_required")
        polled = [long_polls.in_flight(anonymous_workflow_id(task.task_id)) for task in tasks]
        assert polled == [1, 1, 0]
        listed = requests.count()[LIST]
        with anyio.fail_after(DEADLINE):
            while requests.count()[LIST] == listed:  # held reads: the feed is queried meanwhile, every 10 s
                await tasks_get(through_api, tasks[2].task_id)


async def test_once_the_feed_follows_a_task_the_long_polled_ones_move_to_it_when_their_long_polls_expire(
    temporal_server: DevServer, task_queue: str, make_extension: Callable[..., TemporalTasksExtension]
) -> None:
    """While the feed follows any task its queries cost the same however many it follows, so a
    long poll beside it only adds a request per 20 s: at Temporal's expiry of their long polls
    the first two tasks move to the feed, and a cancel through the other server still shows."""
    requests = TemporalRequests()
    client = await requests.connect(temporal_server.address)
    long_polls = HistoryLongPolls(client)
    api = server_with(
        TemporalTasksExtension(
            client=client, task_queue=task_queue, worker=False, change_feed_interval=timedelta(seconds=10)
        ),
        parks,
        name="api",
    )
    async with Client(server_with(make_extension(), parks, name="worker")) as worker, Client(api) as through_api:
        tasks = [await call_tool_task(worker, "parks") for _ in range(3)]
        for task in tasks:
            await _shows(through_api, task.task_id, "input_required")
        ids = [anonymous_workflow_id(task.task_id) for task in tasks]
        assert [long_polls.in_flight(workflow_id) for workflow_id in ids] == [1, 1, 0]

        with anyio.fail_after(DEADLINE * 2):  # Temporal ends a long poll after 20 s
            while any(long_polls.in_flight(workflow_id) for workflow_id in ids):
                for task in tasks:  # read, so their watches stay
                    await tasks_get(through_api, task.task_id)

        await tasks_cancel(worker, tasks[0].task_id)
        await _shows(through_api, tasks[0].task_id, "cancelled")
        assert [long_polls.in_flight(workflow_id) for workflow_id in ids] == [0, 0, 0]
