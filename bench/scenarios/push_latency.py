"""How fast a pushed status reaches a listening client: the tool's return -> `notifications/tasks`.

    .venv/bin/python -m bench run push_latency [--rounds 20] [--batch 50] [--watched-tasks N]
    .venv/bin/python -m bench run push_latency --progress

On the run's dev server (in memory), one FastMCP server with the extension and its embedded
worker, served over streamable HTTP on loopback; the Python `mcp` client calls a task
tool, opens `subscriptions/listen` for the task's id, answers the pushed ask with
`tasks/update`, and never sends `tasks/get`.
Measures to the matching `notifications/tasks` arriving at the client, on one machine's
clock, from the change in Temporal (`from_temporal`: the time of the history event that
records it, the ask's memo upsert or the close) and from the tool body's return
(`from_tool`: also the worker's and the workflow's turn): `--rounds` single tasks, one at a
time (one task on the server), then `--batch` tasks at once whose ends are spread over 5 s.
`--watched-tasks 1` lets the server long-poll one task's history at a time, so every other
listened task is followed through the change feed (one visibility query per
`change_feed_interval` for the tasks that changed), as a server past its long-poll cap
follows its tasks. Target, from the change in Temporal: p50 <= 0.3 s, p95 <= 1 s.

`--progress` measures a running leg's progress instead: from `ctx.report_progress` with a new
message (same process, same clock) to the first read that shows it or a later one, for a
client reading `tasks/get` as `fastmcp.Client` polls (from 20 ms, doubling up to the advertised
`pollIntervalMs`) and for one listening on `subscriptions/listen`; and the Temporal reads this
server makes for each task (its `describe()`s and history reads, counted around the SDK call,
by workflow id; the worker's own long polls for a leg's close are not reads of a task). All
at once, each leg `PROGRESS_LEG_S` long: legs reporting every second (a poller and a
listener each), legs reporting every 10 s (the same), chatty legs (10 messages a second,
three clients each: two pollers and a listener), legs silent for most of a minute and then reporting once (a poller and a
listener), silent legs read by one poller, and legs nobody reads. Targets: p95 <= 5 s; a
silent leg <= 1 read per task per 30 s, a chatty one <= 1 `describe()` per task per 2 s, an
unread one none.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any

import anyio
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import call_tool_task
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp_types import (
    InputRequiredResult,
    NotificationParams,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.service import WorkflowService

from bench.bench_server import ask_ok
from bench.drivers import tasks_get, tasks_update
from bench.harness import dev_server, serving
from bench.metrics import percentiles_ms
from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id

QUESTION = "How fast does a pushed status, or a running leg's progress, reach a listening or polling client?"
QUICK = {"rounds": 3, "batch": 5}
SPREAD = 5.0
PROGRESS_LEG_S = 120.0
# Reads are counted over each leg's life, and apart from this age on, past a new task's first reads.
STEADY_FROM_S = 60.0
# A message sent this close to its leg's end may be read first in the task's close: not sampled.
_UNSAMPLED_TAIL_S = 10.0
temporal: TemporalClient
returned: dict[tuple[str, str], float] = {}  # (key, "ask" | "close") -> when the body returned
reported: dict[str, dict[int, float]] = {}  # a `reports` leg's key -> its message number -> when reported


class _Params(NotificationParams):
    model_config = ConfigDict(extra="allow")


class Arrivals(ClientExtension):
    identifier = "com.example/push-bench"

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], float] = {}  # (task id, status) -> first arrival
        self.asks: dict[str, list[str]] = {}  # task id -> the keys of its pushed ask

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=_Params, handler=self._arrived)]

    async def _arrived(self, params: _Params) -> None:
        extra = params.model_extra or {}
        self.at.setdefault((extra["taskId"], extra["status"]), time.time())
        if extra["status"] == "input_required":
            self.asks[extra["taskId"]] = list(extra["inputRequests"])


async def asks_then_sleeps(ctx: Context, key: str, delay: float) -> str | InputRequiredResult:
    """Asks at once; once answered, sleeps `delay` and returns."""
    if ctx.input_responses is None:
        returned[(key, "ask")] = time.time()
        return ask_ok("go?")
    await anyio.sleep(delay)
    returned[(key, "close")] = time.time()
    return "done"


async def listen(client: Client, task_id: str) -> None:
    notifications = SubscriptionFilter.model_validate({"taskIds": [task_id]})
    request = SubscriptionsListenRequest(params=SubscriptionsListenRequestParams(notifications=notifications))
    await client.session.send_request(request, SubscriptionsListenResult)


async def one_task(client: Client, arrivals: Arrivals, key: str, delay: float) -> dict[str, float]:
    """The ask's and the close's push latency for one task, from the tool and from Temporal."""
    task = await call_tool_task(client, "asks_then_sleeps", {"key": key, "delay": delay})
    async with anyio.create_task_group() as group:
        group.start_soon(listen, client, task.task_id)
        with anyio.fail_after(60):
            while (task.task_id, "input_required") not in arrivals.at:
                await anyio.sleep(0.005)
        asked = arrivals.at[(task.task_id, "input_required")]
        (go,) = arrivals.asks[task.task_id]
        await tasks_update(client, task.task_id, {go: {"action": "accept", "content": {}}})
        with anyio.fail_after(60):
            while (task.task_id, "completed") not in arrivals.at:
                await anyio.sleep(0.005)
        group.cancel_scope.cancel()
    closed = arrivals.at[(task.task_id, "completed")]
    ask_event, close_event = await change_times(task.task_id, returned[(key, "ask")])
    return {
        "ask_from_tool": asked - returned[(key, "ask")],
        "close_from_tool": closed - returned[(key, "close")],
        "ask_from_temporal": asked - ask_event,
        "close_from_temporal": closed - close_event,
    }


async def change_times(task_id: str, asked_at: float) -> tuple[float, float]:
    """When Temporal recorded the task's ask (its memo upsert) and its close."""
    handle = temporal.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task_id))
    events = (await handle.fetch_history()).events
    times = [
        (event.event_type, event.event_time.ToDatetime(tzinfo=timezone.utc).timestamp()) for event in events
    ]
    ask = min(
        t for kind, t in times if kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED and t >= asked_at
    )
    close = next(t for kind, t in times if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    return ask, close


async def reports(key: str, seconds: float, every: float, silent_first: float, ctx: Context) -> str:
    """Silent for `silent_first`, then reports `<key> <n>` every `every` seconds for `seconds` (silent: 0)."""
    await anyio.sleep(silent_first)
    sent = reported.setdefault(key, {})
    deadline = time.time() + seconds
    while (left := deadline - time.time()) > 0:
        if every:
            sent[len(sent) + 1] = time.time()
            await ctx.report_progress(len(sent), None, f"{key} {len(sent)}")
        await anyio.sleep(min(every or left, left))
    return "done"


class ServerReads:
    """This process's Temporal reads of each task (`describe()` and history), counted around the SDK
    call by workflow id; a leg's long poll for its close runs in its activity and is left out."""

    def __init__(self) -> None:
        self.by_workflow: dict[str, Counter[str]] = defaultdict(Counter)

    async def snapshot_after(self, seconds: float, into: dict[str, Counter[str]]) -> None:
        await anyio.sleep(seconds)
        into.update({workflow: Counter(counts) for workflow, counts in self.by_workflow.items()})

    @contextmanager
    def counting(self) -> Iterator[None]:
        originals = {name: getattr(WorkflowService, name) for name in _READS}

        def counted(name: str) -> Any:
            original = originals[name]

            async def call(service: WorkflowService, req: Any, *args: Any, **kwargs: Any) -> Any:
                if not activity.in_activity():
                    self.by_workflow[req.execution.workflow_id][_READS[name]] += 1
                return await original(service, req, *args, **kwargs)

            return call

        for name in _READS:
            setattr(WorkflowService, name, counted(name))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(WorkflowService, name, original)


_READS = {"describe_workflow_execution": "describe", "get_workflow_execution_history": "history"}


@dataclass
class Leg:
    """One `reports` task of a progress case, and what each of its readers saw: (when, message)."""

    case: str
    key: str
    arguments: dict[str, float]
    readers: list[str]
    task_id: str = ""
    seen: dict[str, list[tuple[float, str | None]]] = field(default_factory=dict)


PROGRESS_CASES: dict[str, tuple[int, dict[str, float], list[str]]] = {
    # case: (legs, the tool's arguments, readers per leg)
    "every_second": (3, {"every": 1.0}, ["poll", "listen"]),
    "every_10s": (3, {"every": 10.0}, ["poll", "listen"]),
    "chatty": (2, {"every": 0.1}, ["poll", "poll", "listen"]),
    "after_silence": (4, {"every": 15.0, "silent_first": 40.0}, ["poll", "listen"]),
    "silent": (2, {"every": 0.0}, ["poll"]),
    "unread": (2, {"every": 0.0}, []),
}


async def poll_like_fastmcp(url: str, task_id: str, seen: list[tuple[float, str | None]]) -> None:
    """`tasks/get` as `fastmcp.Client` polls: from 20 ms, doubling up to the advertised interval."""
    async with Client(StreamableHttpTransport(url)) as client:
        backoff = 0.02
        while True:
            status = await tasks_get(client, task_id)
            seen.append((time.time(), status.status_message))
            if status.status in ("completed", "failed", "cancelled"):
                return
            ceiling = (status.poll_interval_ms or 5000) / 1000
            delay, backoff = min(backoff, ceiling), min(backoff * 2, ceiling)
            await anyio.sleep(delay)


class Listened(ClientExtension):
    """The statuses one listening client is pushed for its task: (when, message)."""

    identifier = "com.example/push-bench-progress"

    def __init__(self, seen: list[tuple[float, str | None]]) -> None:
        self.seen = seen
        self.closed = anyio.Event()

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=_Params, handler=self._arrived)]

    async def _arrived(self, params: _Params) -> None:
        extra = params.model_extra or {}
        self.seen.append((time.time(), extra.get("statusMessage")))
        if extra["status"] in ("completed", "failed", "cancelled"):
            self.closed.set()


async def listen_until_closed(url: str, task_id: str, seen: list[tuple[float, str | None]]) -> None:
    listened = Listened(seen)
    async with Client(StreamableHttpTransport(url), extensions=[listened]) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(listen, client, task_id)
            await listened.closed.wait()
            group.cancel_scope.cancel()


def message_latencies(leg: Leg, reader: str) -> tuple[list[float], int]:
    """Per message (but the last `_UNSAMPLED_TAIL_S`'s): from its report to the first read showing it
    or a later one; and how many of them no read showed."""
    sent = reported.get(leg.key, {})
    if not sent:
        return [], 0
    shown = [
        (at, int(message.rsplit(" ", 1)[1]))
        for at, message in leg.seen[reader]
        if message and message.startswith(f"{leg.key} ")
    ]
    last = max(sent.values())
    latencies, unseen = [], 0
    for number, at in sent.items():
        if at > last - _UNSAMPLED_TAIL_S and number != 1:
            continue
        first = next((seen_at for seen_at, seen_number in shown if seen_number >= number), None)
        if first is None:
            unseen += 1
        else:
            latencies.append(first - at)
    return latencies, unseen


async def progress_study(url: str, reads: ServerReads) -> dict[str, Any]:
    """Every progress case at once; latencies by case and reader, Temporal reads per task."""
    legs = [
        Leg(case, f"{case}-{n}", {"seconds": PROGRESS_LEG_S, "silent_first": 0.0, **arguments}, readers)
        for case, (count, arguments, readers) in PROGRESS_CASES.items()
        for n in range(count)
    ]
    for leg in legs:
        if leg.case == "after_silence":  # one message each, at ages spread over 5 s
            leg.arguments["silent_first"] += 5 * int(leg.key.rsplit("-", 1)[1]) / 4
            leg.arguments["seconds"] = 15.0  # and stays open 15 s, so its message is read before its close
        leg.seen = {f"{reader}-{i}": [] for i, reader in enumerate(leg.readers)}
    async with Client(StreamableHttpTransport(url)) as submitter:
        for leg in legs:
            leg.task_id = (
                await call_tool_task(submitter, "reports", {"key": leg.key, **leg.arguments})
            ).task_id
        began = time.time()
        steady_from: dict[str, Counter[str]] = {}
        async with anyio.create_task_group() as group:
            group.start_soon(reads.snapshot_after, STEADY_FROM_S, steady_from)
            for leg in legs:
                for reader, seen in leg.seen.items():
                    read = poll_like_fastmcp if reader.startswith("poll") else listen_until_closed
                    group.start_soon(read, url, leg.task_id, seen)
            group.start_soon(anyio.sleep, PROGRESS_LEG_S + 2)  # the unread legs' run, unread
        elapsed = time.time() - began
    return {
        case: _case_figures(
            [leg for leg in legs if leg.case == case], reads.by_workflow, steady_from, elapsed
        )
        for case in PROGRESS_CASES
    }


def _case_figures(
    legs: list[Leg], reads: dict[str, Counter[str]], steady_from: dict[str, Counter[str]], elapsed: float
) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "legs": len(legs),
        "readers_per_leg": legs[0].readers,
        "arguments": legs[0].arguments,
    }
    for kind in ("poll", "listen"):
        latencies: list[float] = []
        unseen = 0
        for leg in legs:
            for reader in leg.seen:
                if reader.startswith(kind):
                    some, missed = message_latencies(leg, reader)
                    latencies += some
                    unseen += missed
        if latencies or unseen:
            figures[f"{kind}_latency_ms"] = {**percentiles_ms(latencies, 1), "unseen": unseen}
    for window, seconds, before in (
        ("whole_life", elapsed, {}),
        ("after_60s", elapsed - STEADY_FROM_S, steady_from),
    ):
        counts: Counter[str] = Counter()
        for leg in legs:
            workflow = workflow_id(ANONYMOUS_SCOPE_TAG, leg.task_id)
            counts.update(reads.get(workflow, Counter()))
            counts.subtract(before.get(workflow, Counter()))
        figures[f"reads_{window}"] = {
            "seconds": round(seconds),
            "per_task": {kind: counts[kind] / len(legs) for kind in _READS.values()},
            "describe_per_task_per_2s": round(counts["describe"] / len(legs) * 2 / seconds, 3),
            "reads_per_task_per_30s": round(sum(counts.values()) / len(legs) * 30 / seconds, 2),
        }
    return figures


def push_server(address: str, settings: dict[str, Any]) -> FastMCP:
    server = FastMCP("push-bench")
    server.add_extension(TemporalTasksExtension(address=address, task_queue="push-bench", **settings))
    server.tool(asks_then_sleeps, task=True)
    server.tool(reports, task=True)
    return server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument(
        "--watched-tasks", type=int, help="the setting: tasks past it are followed through the feed"
    )
    parser.add_argument("--progress", action="store_true", help="measure a running leg's progress instead")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    global temporal
    settings = {} if args.watched_tasks is None else {"watched_tasks": args.watched_tasks}
    async with dev_server(in_memory=True) as dev:
        temporal = await TemporalClient.connect(dev.address)
        if args.progress:
            reads = ServerReads()
            with reads.counting():
                async with serving(push_server(dev.address, settings)) as url:
                    return {"progress": await progress_study(url, reads)}
        async with serving(push_server(dev.address, settings)) as url:
            return await _pushes(url, args.rounds, args.batch)


async def _pushes(url: str, rounds: int, batch: int) -> dict[str, Any]:
    """`rounds` single tasks one at a time, then `batch` at once with their ends spread over `SPREAD`."""
    arrivals = Arrivals()
    async with Client(StreamableHttpTransport(url), extensions=[arrivals]) as client:
        single = [await one_task(client, arrivals, f"single-{n}", 0.5) for n in range(rounds)]
        spread: list[dict[str, float]] = []

        async def spread_one(n: int) -> None:
            spread.append(await one_task(client, arrivals, f"batch-{n}", 1 + SPREAD * n / batch))

        async with anyio.create_task_group() as group:
            for n in range(batch):
                group.start_soon(spread_one, n)
    return {
        name: {f"{measure}_ms": percentiles_ms([row[measure] for row in rows], 1) for measure in rows[0]}
        for name, rows in (("one_task", single), (f"{batch}_tasks", spread))
    }
