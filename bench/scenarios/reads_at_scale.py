"""Temporal requests per task while clients poll many long-running tasks.

    .venv/bin/python -m bench run reads_at_scale [--tasks 1000] [--window 60] [--servers 1]
        [--shape parked|leg|closed] [--modes describe watched quiet] [--long-poll-expiry SECONDS]
        [--warmup SECONDS] [--quiet-poll-interval SECONDS] [--watched-tasks N]

On the run's dev server (in memory), a worker server (FastMCP with the
extension, worker on) and `--servers` API-only servers, each on its own Temporal
client whose every request the SDK's metrics count. Holds `--tasks` tasks running:
parked on input (`parked`, the cheapest), or in a leg that waits (`leg`); or completed
(`closed`: answered from each server's cache of closes, re-checked for a new run one
poll interval after it was filled, then after 2, 4 ... intervals, at most a minute apart). Then, for
each mode, fresh API servers and in-memory `fastmcp.Client`s read every task with
`tasks/get`, each read of a task on the next API server in turn (a load balancer), the first
reads spread evenly over 5 s, each next one a task's last advertised `pollIntervalMs` after
the answer came (as `fastmcp.Client` waits once a task has run a while): a round per server,
or `--warmup` seconds, to warm up, then the window. Reports the API servers' Temporal
requests per second, per task per 30 s (by operation) and per read, reads per task per 30 s,
read latency, and the poll intervals the last reads advertised (how late a change could
reach a client). Requests and completed reads are counted between the same two instants.
In the window's middle half, `--probes` running tasks are cancelled, each at a random
moment, through the worker's server (another server than the readers'): it reports how
long each cancel took to show at its client (a held read may show it before the canceller
has its acknowledgement: 0), and every read begun after a cancel was
acknowledged that still showed the task running (`stale_reads`, which must be 0: a
change reaches the next poll). A client stops reading a task once it shows cancelled.

- `describe`: `watched_tasks=0` and `quiet_poll_interval=0`, a `describe()` per read every
  5 s: what every read of a task older than 30 s cost before reads were watched;
- `watched`: every task followed (`watched_tasks` is `--watched-tasks`, by default `--tasks`),
  by a long poll of its history while the server follows fewer than cost less than its change
  feed, else through the feed; `quiet_poll_interval=0`, the default;
- `quiet`: as `watched`, with `quiet_poll_interval` (`--quiet-poll-interval`, by default
  `QUIET_POLL_INTERVAL`, the setting's default until it became opt-in): a quiet task
  advertises a longer interval, and its watch is let go once its reads on a server come
  further apart than a long poll lasts;
- `long-poll`: the floor (the paired baseline), no MCP at all: one plain client waits on each task's next
  history event with back-to-back long polls, what following a task costs at the least.

`--long-poll-expiry` starts the dev server with `history.longPollExpirationInterval`
set (Temporal's default is 20 s: one request per task per 20 s per server).
Everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client as TemporalClient

from bench.bench_server import ask_ok
from bench.drivers import bounded, tasks_cancel, tasks_get
from bench.harness import dev_server
from bench.metrics import CallCounter, percentiles, percentiles_ms
from fastmcp_temporal import TemporalTasksExtension

QUESTION = (
    "How many Temporal requests per task do clients polling many long-running tasks cost, by read mode, "
    "beside the floor of one plain long poll per task?"
)
QUICK = {"tasks": 20, "window": 8.0, "probes": 2}
TASK_QUEUE = "reads-at-scale"
POLL_INTERVAL = 5.0  # the default pollIntervalMs
CLIENTS_PER_SERVER = 4
MODES = ("describe", "watched", "quiet", "long-poll")
QUIET_POLL_INTERVAL = 30.0  # `quiet` mode's quiet_poll_interval unless --quiet-poll-interval says otherwise
_release = asyncio.Event()
_started = Counter[str]()


async def park(ctx: Context) -> str | InputRequiredResult:
    """Parks on one question until answered."""
    _started["park"] += 1
    return ask_ok()


async def finish() -> str:
    """Returns at once."""
    _started["finish"] += 1
    return "done"


async def leg() -> str:
    """Runs until the bench ends."""
    _started["leg"] += 1
    await _release.wait()
    return "done"


def _server(name: str, extension: TemporalTasksExtension) -> FastMCP:
    server = FastMCP(name)
    server.add_extension(extension)
    server.tool(park, task=True)
    server.tool(leg, task=True)
    server.tool(finish, task=True)
    return server


def _requests_so_far(requests: CallCounter) -> Counter[str]:
    """The Temporal requests of the clients on `requests.runtime` so far, by operation."""
    return Counter(requests.snapshot())


async def start_tasks(client: Client, shape: str, n: int) -> list[str]:
    """Start `n` tasks of `shape` and wait until every one is parked, in its leg or completed."""
    limit = asyncio.Semaphore(50)
    tasks = await asyncio.gather(*(bounded(limit, call_tool_task(client, shape)) for _ in range(n)))
    ids = [task.task_id for task in tasks]
    settled = {"park": "input_required", "leg": "working", "finish": "completed"}[shape]
    while _started[shape] < n:
        await asyncio.sleep(0.5)
    pending = ids
    while pending:  # the ask shows once the workflow has upserted its memo
        reads = await asyncio.gather(*(bounded(limit, tasks_get(client, i)) for i in pending))
        pending = [i for i, read in zip(pending, reads) if read.status != settled]
        await asyncio.sleep(0.5)
    return ids


@dataclass
class Reads:
    """What the readers saw: reads completed; of the reads begun in the window, their latency and
    errors; each task's last advertised interval; and every read of a probe."""

    completed: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    advertised: list[float] = field(default_factory=list)
    probed: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)  # began, ended, status


def _probe_report(reads: Reads, cancelled_at: dict[str, float]) -> dict[str, Any]:
    """How long each cancel took to reach its client's reads (the first answer showing it, of a read
    held across it or begun after it; 0 when it came before the canceller's acknowledgement), and
    the reads begun after it that missed it."""
    shown, stale = [], 0
    for task_id, acked in cancelled_at.items():
        after = [(began, ended, status) for began, ended, status in reads.probed[task_id] if began >= acked]
        stale += sum(status != "cancelled" for _, _, status in after)
        seen = [ended for _, ended, status in reads.probed[task_id] if status == "cancelled"]
        shown += [max(0.0, seen[0] - acked)] if seen else []
    return {
        "probes": len(cancelled_at),
        "probes_shown": len(shown),
        "stale_reads": stale,
        "cancel_shown_s": percentiles(shown),
    }


async def poll_reads(
    clients: list[list[Client]], ids: list[str], measured_from: float, until: float, reads: Reads
) -> None:
    """Read every task, the first reads spread evenly over `POLL_INTERVAL`, each next one the task's
    advertised `pollIntervalMs` after the answer, each read on the next server, until `until`, into
    `reads`. A slow answer so delays the next read, as it does a `fastmcp.Client`'s."""
    start = time.monotonic()

    async def reader(index: int, task_id: str) -> None:
        due = start + POLL_INTERVAL * index / len(ids)
        n, interval = index, POLL_INTERVAL
        while due < until:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            server = clients[n % len(clients)]
            began = time.monotonic()
            measured, cancelled = began >= measured_from, False
            try:
                read = await tasks_get(server[index % len(server)], task_id)
                interval = (read.poll_interval_ms or POLL_INTERVAL * 1000) / 1000
                if task_id in reads.probed:
                    reads.probed[task_id].append((began, time.monotonic(), read.status))
                    cancelled = read.status == "cancelled"
            except Exception:
                reads.errors += measured
            reads.completed += 1
            if measured:
                reads.latencies.append(time.monotonic() - began)
            if cancelled:
                return
            due = time.monotonic() + interval
            n += 1
        reads.advertised.append(interval)

    await asyncio.gather(*(reader(i, task_id) for i, task_id in enumerate(ids)))


async def cancel_tasks(client: Client, ids: list[str], earliest: float, latest: float) -> dict[str, float]:
    """Cancel each task through `client`'s server at a random moment between `earliest` and `latest`
    (so no cancel falls in step with the reads); when each cancel was acknowledged."""
    acked = {}

    async def cancel(task_id: str) -> None:
        await asyncio.sleep(max(0.0, random.uniform(earliest, latest) - time.monotonic()))
        await tasks_cancel(client, task_id)
        acked[task_id] = time.monotonic()

    await asyncio.gather(*(cancel(task_id) for task_id in ids))
    return acked


async def measure(
    address: str, mode: str, ids: list[str], probes: list[str], canceller: Client, args: argparse.Namespace
) -> dict[str, Any]:
    """Fresh API servers in `mode` read every task for a warm-up round, then for `args.window` seconds;
    `probes` are cancelled through `canceller` in the window's middle half."""
    requests = CallCounter()
    if mode == "long-poll":
        plain = await TemporalClient.connect(address, runtime=requests.runtime)
        return await _measure_long_polls(plain, requests, ids, args.window)
    watched = 0 if mode == "describe" else (args.watched_tasks or len(ids))
    quiet = _quiet_setting(mode, args)
    apis = []
    for i in range(args.servers):
        client = await TemporalClient.connect(address, runtime=requests.runtime)
        extension = TemporalTasksExtension(
            client=client, task_queue=TASK_QUEUE, worker=False, watched_tasks=watched, **quiet
        )
        apis.append(_server(f"api-{i}", extension))
    clients = [[Client(api) for _ in range(CLIENTS_PER_SERVER)] for api in apis]
    for row in clients:
        for client in row:
            await client.__aenter__()
    try:
        # every server reads every task once, or reads go on for --warmup; then the window, same schedule
        warmup = max(POLL_INTERVAL * args.servers, args.warmup)
        began = time.monotonic() + warmup
        reads = Reads(probed={task_id: [] for task_id in probes})
        reading = asyncio.ensure_future(poll_reads(clients, ids, began, began + args.window, reads))
        await asyncio.sleep(warmup)
        before, completed_before = _requests_so_far(requests), reads.completed
        failed_before = requests.failures.total()
        middle = (began + args.window / 4, began + args.window * 3 / 4)
        cancelling = asyncio.ensure_future(cancel_tasks(canceller, probes, *middle))
        await asyncio.sleep(args.window)
        used, completed = _requests_so_far(requests) - before, reads.completed - completed_before
        failed = requests.failures.total() - failed_before
        elapsed = time.monotonic() - began
        cancelled_at = await cancelling
        await reading
    finally:
        for row in clients:
            for client in row:
                await client.__aexit__(None, None, None)
    return {
        **_rates(mode, used, elapsed, len(ids)),
        "watched_tasks": watched,
        **quiet,
        "warmup_s": warmup,
        "reads_per_s": round(completed / elapsed, 2),
        "reads_per_task_per_30s": round(completed / elapsed * 30 / len(ids), 3),
        "requests_per_read": round(used.total() / completed, 3),
        "advertised_s": percentiles(reads.advertised),
        "read_errors": reads.errors,
        "failed_requests": failed,
        "read_ms": percentiles_ms(reads.latencies),
        **_probe_report(reads, cancelled_at),
    }


def _quiet_setting(mode: str, args: argparse.Namespace) -> dict[str, float]:
    """`quiet_poll_interval` for `mode`: off but in `quiet`, there `--quiet-poll-interval` or `QUIET_POLL_INTERVAL`."""
    if mode != "quiet":
        return {"quiet_poll_interval": 0}
    return {
        "quiet_poll_interval": QUIET_POLL_INTERVAL
        if args.quiet_poll_interval is None
        else args.quiet_poll_interval
    }


async def _measure_long_polls(
    temporal: TemporalClient, requests: CallCounter, ids: list[str], window: float
) -> dict[str, Any]:
    """Back-to-back long polls of every task's history for `window` seconds, from one plain client."""
    polls = [_history_request(temporal.namespace, f"mcp-task/anon/{task_id}") for task_id in ids]
    for request in polls:  # the events so far come at once; the next request waits for a new one
        response = await temporal.workflow_service.get_workflow_execution_history(request)
        request.next_page_token = response.next_page_token
    before = _requests_so_far(requests)
    began = time.monotonic()

    async def follow(request: GetWorkflowExecutionHistoryRequest) -> None:
        while request.next_page_token:  # empty once the run has closed
            response = await temporal.workflow_service.get_workflow_execution_history(request)
            request.next_page_token = response.next_page_token

    following = [asyncio.create_task(follow(request)) for request in polls]
    await asyncio.sleep(window)
    used, elapsed = _requests_so_far(requests) - before, time.monotonic() - began
    for follower in following:
        follower.cancel()
    await asyncio.gather(*following, return_exceptions=True)
    return {**_rates("long-poll", used, elapsed, len(ids)), "reads_per_s": 0}


def _history_request(namespace: str, workflow_id: str) -> GetWorkflowExecutionHistoryRequest:
    return GetWorkflowExecutionHistoryRequest(
        namespace=namespace,
        execution=WorkflowExecution(workflow_id=workflow_id),
        wait_new_event=True,
        skip_archival=True,
    )


def _rates(mode: str, used: Counter[str], elapsed: float, tasks: int) -> dict[str, Any]:
    per_second = used.total() / elapsed
    return {
        "mode": mode,
        "temporal_requests_per_s": round(per_second, 2),
        "per_task_per_30s": round(per_second * 30 / tasks, 3),
        "per_task_per_30s_by_operation": {
            op: round(n / elapsed * 30 / tasks, 3) for op, n in sorted(used.items())
        },
    }


async def _run_on(address: str, args: argparse.Namespace) -> dict[str, Any]:
    shape = {"parked": "park", "leg": "leg", "closed": "finish"}[args.shape]
    worker = TemporalTasksExtension(
        address=address,
        task_queue=TASK_QUEUE,
        max_concurrent_activities=args.tasks + 10,
        max_cached_workflows=args.tasks + 10,
        watched_tasks=0,  # its long polls would count against the same cap as the API servers'
    )
    async with Client(_server("worker", worker)) as client:
        began = time.monotonic()
        ids = await start_tasks(client, shape, args.tasks)
        print(f"{len(ids)} tasks {args.shape} in {time.monotonic() - began:.0f} s", flush=True)
        results = []
        read = ids  # a client stops polling a task it saw cancelled: later modes skip earlier probes
        for mode in args.modes:
            probes = [] if mode == "long-poll" or args.shape == "closed" else read[: args.probes]
            result = await measure(address, mode, read, probes, client, args)
            read = read[len(probes) :]
            print(json.dumps(result), flush=True)
            results.append(result)
        _release.set()
    return {
        "poll_interval_s": POLL_INTERVAL,
        "long_poll_expiry_s": args.long_poll_expiry or 20,
        "modes": results,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=1_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured per mode")
    parser.add_argument("--servers", type=int, default=1, help="API servers the reads alternate between")
    parser.add_argument("--shape", choices=["parked", "leg", "closed"], default="parked")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--watched-tasks", type=int, default=None, help="each API server's watched_tasks (default: --tasks)"
    )
    parser.add_argument(
        "--long-poll-expiry", type=int, default=None, help="seconds; Temporal's default is 20"
    )
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds of reads before each window")
    parser.add_argument(
        "--quiet-poll-interval",
        type=float,
        default=None,
        help="seconds, in `quiet` mode (default: QUIET_POLL_INTERVAL)",
    )
    parser.add_argument(
        "--probes", type=int, default=20, help="running tasks cancelled in each mode's window"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    dynamic = (
        {"history.longPollExpirationInterval": f'"{args.long_poll_expiry}s"'} if args.long_poll_expiry else {}
    )
    async with dev_server(in_memory=True, dynamic_config=dynamic) as server:
        return await _run_on(server.address, args)
