"""Many tasks at once in production's shape: what reading them costs, and how they survive a kill -9.

    .venv/bin/python -m bench run scale [--tasks 10000] [--warmup 60] [--window 300] [--clients 2]
        [--reads-in-flight N] [--probes 10] [--progress 10] [--heartbeat-timeout 30]
    .venv/bin/python -m bench run scale --legs 1000 [--leg-seconds 120] [--sample 50] [--window 300]
    .venv/bin/python -m bench run scale --parked 10000 [--sample 50] [--probes 10] [--warmup 60]
        [--window 300]

On the run's dev server (sqlite; with `--legs`, its metrics port on), 2 API servers (`bench_server.py`,
`worker=False`) and 2 `fastmcp-temporal worker bench/bench_server.py` processes, each
counting its Temporal requests in its SDK metrics (`bench/deploy.py`, `bench/metrics.py`).
Submits `--tasks` tasks over streamable HTTP: half `scale_park` (parked on input), half
`scale_leg` (a leg that reports progress every `--progress` s until released). Legs run with
`heartbeat_timeout` `--heartbeat-timeout` (the SDK sends their heartbeats every 0.8 x it): a
deployment's choice at this size, since with the default (5 s) 5,000 legs heartbeat about 1,250
times a second (`--heartbeat-timeout 5` measures that). Then:

1. **Window**: `--clients` `fastmcp.Client`s per API server read every task with `tasks/get`,
   each read on the other server from the last (a load balancer), each task again after its
   advertised `pollIntervalMs`. A server holds a poll loop's read of a running task until it
   changes, up to `reread_hold` (5 s), and advertises 200 ms meanwhile, so a reader that keeps
   up has about one read in flight per task: `--reads-in-flight` of them at once (default one
   per task, at most `MAX_READS_IN_FLIGHT`; the rest wait), each client's HTTP pool keeping
   that many connections alive. How late reads went out after they were due is reported
   (`read_late_ms`, from the moment the interval ended: a busy event loop's lateness counts
   too), and so is the bench process's own CPU (`bench` in `cpu_cores_by_process`): above
   about one core, it is the readers that fall behind. `tasks_get_ms` includes the holds;
   beside it, the same reads as the API servers timed them (`bench_server.time_reads`): in the
   `tasks/get` handler (`tasks_get_ms_at_servers`), and from a POST's arrival to its response's
   last byte (`mcp_post_ms_at_servers`), with each server's event loop lag (`api_loop_lag_ms`).
   Whatever `tasks_get_ms` adds beyond `mcp_post_ms_at_servers` is the bench's own side (its
   HTTP client, its loop) and the wire: where that is seconds, `reach_s` measures the bench.
   After `--warmup` seconds (a quiet task's interval has grown to
   `quiet_poll_interval` a minute after its first read) it measures `--window`
   seconds: Temporal requests per second by process and operation, requests per task per
   30 s (all, and by kind: describe, history, list/visibility, signal, ... as
   `metrics.request_kind` names them), the API servers' requests per task per 30 s by the kind of
   task each names (`per_task_per_30s_by_task_kind`: `parked` per parked task, `leg` per leg,
   `shared`, naming no workflow, such as the change feed's visibility lists, per task of either
   kind; counted in each API server by `bench_server.count_by_workflow`, beside the SDK's
   per-operation counts in `api_requests_counted_vs_sdk`), CPU and RSS per process,
   `tasks/get` p50/p95. Halfway through, four sets of `--probes` legs change: released to ask,
   released to close, nudged to report progress, and cancelled with `tasks/cancel` (through
   whichever server the next client is on). Freshness, p50/p95/max: from the change (the tool
   body's ask, return or progress report; the cancel's acknowledgement) to the first poll that
   shows it (reads go on past the window until each has shown, for at most `PROBE_GRACE_S`;
   `n` counts those shown).
2. **Kill**: SIGKILL to every worker and API server, then starts them again; how long
   from the kill until every task reads back as it was, and until every leg runs again.
3. **Finish**: answers every ask and releases every leg; every task must complete with its
   own result (a cancelled probe: read as cancelled), and every body must have run once,
   except legs alive at the kill (twice).

**`--legs N`** runs another scenario on the same shape: N `scale_sleep` legs that wait
`--leg-seconds` (120) in silence, submitted over both API servers to workers at their default
`max_concurrent_activities`, with the extension's default `heartbeat_timeout` (5 s); the clients
read `--sample` (50) of them at their advertised interval until they complete. Once every leg
runs, until the first is due to end (at most `--window` s), it measures from the dev server's
own metrics (started with a metrics port) the billed Actions (`action`) and the frontend's
requests per second by operation, and the long polls it held, beside each process's SDK
requests, CPU and RSS. Then every task must complete with its own result, each body run once,
with no attempt timed out or retried in Temporal's histories and no starved-loop warning in
the workers' logs. Right after, on the same dev server, bare Temporal runs the same N: N
`BareSleep` workflows, each one activity waiting as long with the same heartbeat timeout
through the SDK's throttle, on 2 `bare_engine.py --sleepers` workers, measured alike: the
paired baseline, in the same run.

**`--parked N`** parks N `scale_park` tasks on input over both API servers (what a deployment
holding many tasks mostly holds), and reads only a `--sample` (50) of them with real
`fastmcp.Client`s while the rest sit unread. After `--warmup` s with nothing read (the servers
let go of the watches the submits' reads began), it measures up to a minute unread (`unread`),
then, once the sample has been read for a while, `--window` s with it read (`read`): each
process's Temporal requests per parked task per 30 s, all and by kind, and by kind of task
(`read`, `unread`, `shared`: the change feed's lists), the API servers' reads and CPU, and
each API server's CPU per `tasks/get` it served (`api_cpu_per_read`: in all, and beyond its
rate while nothing was read), the figure API servers are sized from. Halfway through,
`--probes` sampled tasks of each change are answered and ask again (`ask`), answered and close
(`close`), or cancelled with `tasks/cancel` (`cancel`); `reach_s` is p50/p95/max from the
change as Temporal's history times it (the memo naming the new ask, the close, the cancel
request) to the first read showing it. Then the kill and the finish as above: every task
completes with its own result (a cancelled probe reads as cancelled), each body run once.

Memory per 1,000 parked tasks per process is measured as the parked tasks are submitted.
(`bench/results/scale.json` holds a run with `--parked 10000` and every other default,
`scale-mixed.json` one with every default, `parked-N.json` and `legs-N.json` runs of those
modes.) Everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient

from bench.deploy import (
    Backends,
    engine_env,
    start_api_server,
    start_worker,
    terminate,
)
from bench.drivers import accept_every_ask, bounded_all, retried, tasks_cancel, tasks_get, tasks_update
from bench.harness import Temporal, dev_server
from bench.marks import Marks
from bench.metrics import (
    cpu_seconds,
    dev_server_counts,
    per_second,
    per_task_per_30s_by_kind,
    percentiles,
    percentiles_ms,
    process_tree,
    rss_mb,
    temporal_calls,
)
from fastmcp_temporal.devserver import DevServer
from fastmcp_temporal.server._scope import workflow_id

QUESTION = (
    "Many tasks at once in production's shape (mixed, parked, or waiting legs beside bare Temporal): "
    "what does reading them cost, how fresh are the reads, and how do they survive a kill -9?"
)
QUICK = {"tasks": 40, "warmup": 2.0, "window": 10.0, "probes": 1, "clients": 1}
SERVERS = WORKERS = 2
DEFAULT_POLL_S = 5.0  # what a read without pollIntervalMs waits
CONCURRENCY = 50  # submits and sweep reads in flight at once
# The window's reads in flight at once: one per task followed (a held read waits up to
# `reread_hold`, 5 s, so a client that follows the advertised 200 ms keeps about one in flight
# per task), at most this many.
MAX_READS_IN_FLIGHT = 5000
TERMINAL = ("completed", "failed", "cancelled")
# Each probe's change: the mark just before it (a cancel's: its acknowledgement, marked by the
# bench), and what a read shows once it has come.
PROBES = {
    "ask": ("asking", "input_required"),
    "close": ("closing", "completed"),
    "progress": ("progressing", "progressed"),
    "cancel": ("cancel-acknowledged", "cancelled"),
}
PROBE_GRACE_S = 120  # how long past the window reads go on for a probe whose change no read has shown
DEADLINE_S = 600  # for anything the bench waits on
# ... and more for each task submitted or finished: a 2-core machine busy with other work parked
# 10,000 tasks at about 9 a second, past `DEADLINE_S`.
DEADLINE_S_PER_TASK = 0.25
# `--legs`: the window ends this long before the first leg is due to end; the legs' default
# heartbeat_timeout (the extension's own default).
LEGS_MARGIN_S = 5.0
LEGS_HEARTBEAT_TIMEOUT_S = 5.0
# Longer than a run at 10,000 tasks (about 25 min on 2 cores): with the default 15 min the first
# parked tasks expired before the bench answered them.
TASK_TTL_S = 7200


@dataclass
class Task:
    """One submitted task: what it is, what it should read as, and when each status was first seen."""

    key: str
    tool: str
    then: str  # `park`, or what a probe does: `ask`, `close`, `progress`, `cancel` (or nothing)
    task_id: str = ""
    released: bool = False  # a probe the window let ask or close (a parked one: answered), or cancelled
    seen: dict[str, float] = field(default_factory=dict)  # by status, `progressed`, and `asks <keys>`
    first_ask: str = ""  # a parked probe's ask when it was answered, as `seen` names it

    @property
    def arguments(self) -> dict[str, Any]:
        """What the task's tool is called with (a parked `ask` probe asks again once answered)."""
        if self.tool == "scale_leg":
            return {"key": self.key, "then": self.then}
        return {"key": self.key} | ({"ask_again": True} if self.then == "ask" else {})

    @property
    def settled(self) -> str:
        """The status the task rests in while the bench holds it (a released probe: asked or closed)."""
        if self.then == "park" or (self.released and self.then == "ask"):
            return "input_required"
        if not self.released:
            return "input_required" if self.tool == "scale_park" else "working"
        return "cancelled" if self.then == "cancel" else "completed"

    @property
    def asks(self) -> bool:
        """Whether its body asks for input before it ends (parked, or an asking leg)."""
        return self.tool == "scale_park" or self.then == "ask"

    def ended_right(self, status: ClientGetTaskResult) -> bool:
        """Whether its final read is what it must end as: cancelled, or completed with its own result."""
        if self.then == "cancel":
            return status.status == "cancelled"
        return _text(status) == (f"answered:{self.key}" if self.asks else f"done:{self.key}")


class Fleet:
    """The dev server, the API servers and the workers, with their pids and metrics by role."""

    def __init__(self, dev: DevServer, state: Path, args: argparse.Namespace) -> None:
        self.dev, self.state = dev, state
        backends = Backends(dev.address, process_tree(dev.pid), None, [])
        self.env = engine_env("temporal", backends, state, None) | {
            "BENCH_PROGRESS_S": str(args.progress),
            "FASTMCP_TEMPORAL_HEARTBEAT_TIMEOUT": str(args.heartbeat_timeout),
            "FASTMCP_TEMPORAL_TASK_TTL": str(TASK_TTL_S),
        }
        if not args.legs and not args.parked:  # every leg fits on one worker; `--legs` measures the default
            self.env["FASTMCP_TEMPORAL_MAX_CONCURRENT_ACTIVITIES"] = str(args.tasks // 2 + 10)
        self.marks = Marks(Path(self.env["BENCH_MARKS"]))
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.metrics: dict[str, str] = {}
        self.bench_urls: dict[str, str] = {}  # each API server's /bench endpoints (bench_server.py)
        self.urls: list[str] = []
        self.starts = 0

    async def start(self) -> None:
        """Start every worker and API server at once (as a restarted deployment does); return once all serve."""
        self.starts += 1
        await asyncio.gather(*(self._worker(i) for i in range(WORKERS)))
        self.urls = list(await asyncio.gather(*(self._api_server(i) for i in range(SERVERS))))

    async def _worker(self, i: int) -> None:
        log = self.state / f"worker-{i}-{self.starts}.log"
        worker, metrics = await start_worker("temporal", self.env, log)
        self._add(f"worker-{i}", worker, metrics)
        await _wait_polling(log, worker)

    async def _api_server(self, i: int) -> str:
        port_file, log = (self.state / f"api-{i}-{self.starts}.{suffix}" for suffix in ("port", "log"))
        env = self.env | {"BENCH_COUNT_BY_WORKFLOW": "1"}  # bench_server.count_by_workflow
        server, url, metrics = await start_api_server("temporal", env, port_file, log)
        self._add(f"api-{i}", server, metrics)
        self.bench_urls[f"api-{i}"] = url.removesuffix("/mcp") + "/bench"
        return url

    def _add(self, role: str, process: asyncio.subprocess.Process, metrics: str | None) -> None:
        self.processes[role] = process
        if metrics:
            self.metrics[role] = metrics

    def pids(self) -> dict[str, list[int]]:
        """Every process's pids by role, the dev server's whole tree included."""
        return {role: [p.pid] for role, p in self.processes.items()} | {
            "dev server": process_tree(self.dev.pid)
        }

    async def kill(self) -> float:
        """SIGKILL every worker and API server at once; the monotonic time of the kill."""
        killed_at = time.monotonic()
        for process in self.processes.values():
            os.kill(process.pid, signal.SIGKILL)
        for process in self.processes.values():
            await process.wait()
        return killed_at

    async def stop(self) -> None:
        """Stop whatever still runs (SIGTERM, then SIGKILL)."""
        for process in self.processes.values():
            await terminate(process)


async def _wait_polling(log: Path, worker: asyncio.subprocess.Process) -> None:
    """Return once the worker says it polls its task queue."""
    deadline = time.monotonic() + 60
    while "polling task queue" not in log.read_text(errors="replace"):
        if worker.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start:\n{log.read_text(errors='replace')}")
        await asyncio.sleep(0.1)


class Readers:
    """A few MCP clients per API server over streamable HTTP; each read goes to the next server."""

    def __init__(self, urls: list[str], per_server: int, in_flight: int) -> None:
        # Each client's HTTP pool holds every read the window may have in flight (one HTTP/1.1
        # connection each) and the writes beside them, all kept alive: httpx's default pool
        # (100, of which 20 kept alive) queued held reads behind each other and reconnected.
        factory = _pooled(in_flight + CONCURRENCY)
        self.clients = [
            [
                Client(StreamableHttpTransport(url, httpx_client_factory=factory), timeout=60)
                for _ in range(per_server)
            ]
            for url in urls
        ]
        self.in_flight = in_flight
        self.reads = 0
        self.stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Readers:
        for row in self.clients:
            for client in row:
                await self.stack.enter_async_context(client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):  # the servers may be dead: their sessions end anyway
            async with asyncio.timeout(15):  # in this task: the clients' cancel scopes were entered here
                await self.stack.aclose()

    def client(self) -> Client:
        """The next client, on the server after the last read's."""
        self.reads += 1
        row = self.clients[self.reads % len(self.clients)]
        return row[(self.reads // len(self.clients)) % len(row)]

    async def get(self, task_id: str) -> ClientGetTaskResult:
        """A raw `tasks/get` of `task_id` through the next client."""
        return await tasks_get(self.client(), task_id)

    async def cancel(self, task_id: str) -> None:
        """`tasks/cancel` of `task_id` through the next client."""
        await tasks_cancel(self.client(), task_id)

    async def answer(self, status: ClientGetTaskResult) -> None:
        """Accept every question the read `status` shows, through the next client."""
        await tasks_update(self.client(), status.task_id, accept_every_ask(status))


def _pooled(connections: int) -> Callable[..., httpx2.AsyncClient]:
    """An httpx client factory for `StreamableHttpTransport`: a pool of `connections`, all kept alive."""

    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        kwargs.setdefault("timeout", httpx2.Timeout(30.0, read=300.0))  # the MCP SDK's own default
        # An idle connection is dropped before uvicorn's 5 s keep-alive timeout drops it: at the
        # same 5 s (httpx's default), a reused connection the server had just closed failed its
        # request with ReadError, which ends the whole MCP session.
        limits = httpx2.Limits(
            max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0
        )
        return httpx2.AsyncClient(limits=limits, **kwargs)

    return factory


class Polling:
    """Every task read at its own advertised interval, until it closes or the polling stops."""

    def __init__(self, readers: Readers, tasks: list[Task]) -> None:
        self.readers, self.tasks = readers, tasks
        self.stop = asyncio.Event()
        self.latencies: list[float] | None = None  # a list while the window records
        self.lags: list[float] = []  # how late each recorded read went out after it was due
        # Reads in flight at once: what the clients' HTTP pools hold; the rest wait here.
        self.slots = asyncio.Semaphore(readers.in_flight)
        self.errors = 0
        self.first_error = ""
        self.followers: list[asyncio.Task[None]] = []

    def __enter__(self) -> Polling:
        spread = DEFAULT_POLL_S / len(self.tasks)
        self.followers = [asyncio.create_task(self._follow(t, i * spread)) for i, t in enumerate(self.tasks)]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()

    async def drain(self) -> None:
        """Stop polling and wait for every follower to finish its read."""
        self.stop.set()
        await asyncio.gather(*self.followers, return_exceptions=True)

    async def _follow(self, task: Task, offset: float) -> None:
        interval = offset
        while True:
            due = time.perf_counter() + interval  # a loop that cannot keep up wakes late, too
            if await _stopped(self.stop, interval):
                return
            async with self.slots:
                began = time.perf_counter()
                try:
                    status = await self.readers.get(task.task_id)
                except Exception as exc:
                    self.errors += 1
                    self.first_error = self.first_error or repr(exc)[:300]
                    interval = DEFAULT_POLL_S
                    continue
            if self.latencies is not None:
                self.latencies.append(time.perf_counter() - began)
                self.lags.append(began - due)
            task.seen.setdefault(status.status, time.monotonic())
            if "progressed" in (status.status_message or ""):
                task.seen.setdefault("progressed", time.monotonic())
            if status.input_requests:  # the server names each ask by its leg: a new ask, a new name
                task.seen.setdefault(_asks(status), time.monotonic())
            if status.status in TERMINAL:
                return
            interval = (status.poll_interval_ms or DEFAULT_POLL_S * 1000) / 1000


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` unless `stop` is set first; whether it is set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def _all_succeed(work: list[Callable[[], Awaitable[Any]]], what: str) -> list[Any]:
    """Run every piece of `work`, `CONCURRENCY` at once; raise if any failed (`what` names them)."""
    results = await bounded_all(work, CONCURRENCY)
    if failures := [r for r in results if isinstance(r, Exception)]:
        raise RuntimeError(f"{len(failures)} {what} failed; the first: {failures[0]!r}")
    return results


async def submit(readers: Readers, marks: Marks, tasks: list[Task]) -> None:
    """Submit every task (an overloaded server refuses now and then: retried); return once each has settled."""

    async def one(task: Task) -> None:
        task.task_id = (
            await retried(lambda: call_tool_task(readers.client(), task.tool, task.arguments))
        ).task_id

    await _all_succeed([lambda t=t: one(t) for t in tasks], "submits")
    await settle(readers, tasks, _deadline(len(tasks)))
    legs = [t for t in tasks if t.tool == "scale_leg"]
    await _legs_running_since(marks, legs, 0.0)  # working before the leg starts, too


async def settle(readers: Readers, tasks: list[Task], deadline: float) -> None:
    """Read every task until each reads as it rests (`Task.settled`; completed for a closed probe)."""
    pending = tasks
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} tasks never settled; the first: {pending[0]}")
        reads = await bounded_all([lambda t=t: readers.get(t.task_id) for t in pending], CONCURRENCY)
        pending = [t for t, r in zip(pending, reads) if getattr(r, "status", None) != t.settled]
        if pending:
            await asyncio.sleep(1)


def _deadline(tasks: int) -> float:
    """The monotonic time by which `tasks` tasks submitted or finished at once must have settled."""
    return time.monotonic() + DEADLINE_S + tasks * DEADLINE_S_PER_TASK


async def settled_rss(pids: dict[str, list[int]]) -> dict[str, float]:
    """Resident MB per role, once the processes have had a moment to settle."""
    await asyncio.sleep(2)
    return {role: round(rss_mb(role_pids), 1) for role, role_pids in pids.items()}


def build_tasks(n: int, probes: int) -> tuple[list[Task], list[Task], list[Task]]:
    """Half parked, half legs; of the legs, `probes` of each of `PROBES` change mid-window."""
    parked = [Task(f"p{i}", "scale_park", "park") for i in range(n // 2)]
    thens = [then for then in PROBES for _ in range(probes)]
    legs = [Task(f"l{i}", "scale_leg", thens[i] if i < len(thens) else "") for i in range(n - n // 2)]
    return parked, legs, legs[: len(thens)]


async def window(
    fleet: Fleet, readers: Readers, tasks: list[Task], probes: list[Task], warmup: float, seconds: float
) -> dict:
    """Poll every task for `warmup` seconds, then measure `seconds`, releasing the probes halfway."""
    polling = Polling(readers, tasks)
    with polling:
        await asyncio.sleep(warmup)
        pids = fleet.pids() | {"bench": [os.getpid()]}  # the bench's own readers, too
        before = await Counts.take(pids, fleet.metrics, fleet.bench_urls)
        polling.latencies = []
        await asyncio.sleep(seconds / 2)
        await change(fleet.marks, readers, probes)
        await asyncio.sleep(before.at + seconds - time.monotonic())
        grown = await before.grown()
        latencies, polling.latencies = polling.latencies, None
        elapsed, calls, served = grown.elapsed, grown.calls, grown.served
        cpu = {role: seconds_used / elapsed for role, seconds_used in grown.cpu.items()}
        rss = await settled_rss(pids)
        await _until(lambda: _all_shown(probes), PROBE_GRACE_S)
        await polling.drain()
    return {
        "elapsed_s": round(elapsed, 1),
        "tasks_get_per_s": round(len(latencies) / elapsed, 1),
        "tasks_get_ms": percentiles_ms(latencies, 1),
        "read_late_ms": percentiles_ms(
            polling.lags, 1
        ),  # after its advertised interval: the clients' own backlog
        # The same reads as the API servers timed them (holds included): what tasks_get_ms adds
        # beyond these is the bench's side and the wire; and how late the servers' loops woke.
        "tasks_get_ms_at_servers": percentiles_ms([s for r in served.values() for s in r["tasks_get_s"]], 1),
        "mcp_post_ms_at_servers": percentiles_ms([s for r in served.values() for s in r["mcp_post_s"]], 1),
        "api_loop_lag_ms": {role: percentiles_ms(r["loop_lag_s"], 1) for role, r in served.items()},
        "read_errors": polling.errors,
        "first_read_error": polling.first_error,
        **_request_rates(calls, elapsed, len(tasks)),
        **_by_task_kind(grown.by_workflow, _task_kinds(tasks), elapsed, calls),
        "cpu_cores_by_process": {role: round(c, 3) for role, c in cpu.items()},
        "rss_mb_by_process": rss,
        "reach_s": _reach(fleet.marks, probes),
    }


async def _until(done: Callable[[], bool], seconds: float, every: float = 0.5) -> None:
    """Return once `done()` holds, checked every `every` s, or `seconds` from now."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(every)


def _all_shown(probes: list[Task]) -> bool:
    """Whether a read has shown every probe's change."""
    return all(_shown(p) is not None for p in probes)


def _shown(probe: Task) -> float | None:
    """When a read first showed the probe's change (a parked probe's new ask: asks by other names)."""
    if probe.tool == "scale_park" and probe.then == "ask":
        asked = (
            moment
            for asks, moment in probe.seen.items()
            if asks.startswith("asks ") and asks != probe.first_ask
        )
        return min(asked, default=None)
    return probe.seen.get(PROBES[probe.then][1])


async def change(marks: Marks, readers: Readers, probes: list[Task]) -> None:
    """Release the asking and closing probes, nudge the progress ones, cancel the rest."""
    for probe in probes:
        probe.released = probe.then != "progress"  # a nudged leg runs on (and again after the kill)
        if probe.then != "cancel":  # a released cancel probe could close before its cancel lands
            marks.mark(probe.key, "nudge" if probe.then == "progress" else "release")

    async def cancel(probe: Task) -> None:
        await readers.cancel(probe.task_id)
        marks.mark(probe.key, "cancel-acknowledged")

    await _all_succeed([lambda p=p: cancel(p) for p in probes if p.then == "cancel"], "cancels")


@dataclass
class Grown:
    """What the fleet did between two instants (`Counts.take`, then `Counts.grown`)."""

    elapsed: float
    calls: dict[str, Counter[str]]  # Temporal requests by process, then operation (the SDK's metrics)
    by_workflow: dict[str, Counter[str]]  # the API servers' requests by the workflow each named
    served: dict[str, dict[str, Any]]  # each API server's `tasks/get` times and loop lags (`_read_times`)
    cpu: dict[str, float]  # CPU seconds by process


@dataclass
class Counts:
    """What a set of processes has counted up to one instant, to tell what they did from then on."""

    at: float
    pids: dict[str, list[int]]
    metrics: dict[str, str]  # each process's SDK metrics by role
    bench_urls: dict[str, str]  # each API server's /bench endpoints (none: no reads or workflows counted)
    calls: dict[str, Counter[str]]
    by_workflow: dict[str, Counter[str]]
    reads: dict[str, dict[str, Any]]
    cpu: dict[str, float]

    @classmethod
    async def take(
        cls, pids: dict[str, list[int]], metrics: dict[str, str], bench_urls: dict[str, str]
    ) -> Counts:
        """The counts now: Temporal requests by process and by workflow, reads served, CPU of `pids`."""
        calls = {role: Counter(await temporal_calls([endpoint])) for role, endpoint in metrics.items()}
        by_workflow, reads = await _calls_by_workflow(bench_urls), await _read_times(bench_urls, {})
        cpu = {role: cpu_seconds(p) for role, p in pids.items()}
        return cls(time.monotonic(), pids, metrics, bench_urls, calls, by_workflow, reads, cpu)

    async def grown(self) -> Grown:
        """What grew from these counts until now."""
        elapsed = time.monotonic() - self.at
        calls = {
            role: Counter(await temporal_calls([at])) - self.calls[role] for role, at in self.metrics.items()
        }
        served = await _read_times(self.bench_urls, self.reads)
        by_workflow = {
            workflow: ops - self.by_workflow.get(workflow, Counter())
            for workflow, ops in (await _calls_by_workflow(self.bench_urls)).items()
        }
        cpu = {role: cpu_seconds(p) - self.cpu[role] for role, p in self.pids.items()}
        return Grown(elapsed, calls, by_workflow, served, cpu)


async def _read_times(
    bench_urls: dict[str, str], since: dict[str, dict[str, int]]
) -> dict[str, dict[str, Any]]:
    """Each API server's `tasks/get` times (holds included) and event loop lags, in seconds, from the
    indices in `since` on (by role; none: from the start), with the indices reached."""
    times: dict[str, dict[str, Any]] = {}
    async with httpx2.AsyncClient(timeout=30) as http:
        for role, url in bench_urls.items():
            start = since.get(role, {})
            query = {
                key: start.get(n, 0)
                for key, n in (("from", "n"), ("lag_from", "lag_n"), ("http_from", "http_n"))
            }
            times[role] = (await http.get(f"{url}/read-times", params=query)).json()
    return times


async def _calls_by_workflow(bench_urls: dict[str, str]) -> dict[str, Counter[str]]:
    """The API servers' Temporal requests so far by the workflow each named ("" for none), then operation."""
    totals: dict[str, Counter[str]] = {}
    async with httpx2.AsyncClient(timeout=30) as http:
        for url in bench_urls.values():
            for workflow, ops in (await http.get(f"{url}/temporal-by-workflow")).json().items():
                totals.setdefault(workflow, Counter()).update(ops)
    return totals


def _task_kinds(tasks: list[Task]) -> dict[str, str]:
    """Each task's kind by its id, as `_by_task_kind` groups them: `parked` or `leg`."""
    return {t.task_id: "parked" if t.tool == "scale_park" else "leg" for t in tasks}


def _by_task_kind(
    by_workflow: dict[str, Counter[str]],
    kind_of: dict[str, str],
    elapsed: float,
    calls: dict[str, Counter[str]],
) -> dict[str, Any]:
    """The API servers' Temporal requests per task per 30 s by the kind of task each named.

    Per task of each kind in `kind_of` (task id: kind; `parked` and `leg`, the probes among
    them, or `read` and `unread`), and `shared` (requests naming no workflow: the change feed's
    visibility lists) and `other` (a workflow not in `kind_of`) per task of every kind; then
    the same counts' totals beside the SDK's metrics for the same processes, which count each
    retry and are read a moment apart.
    """
    groups: dict[str, Counter[str]] = {
        group: Counter() for group in [*dict.fromkeys(kind_of.values()), "shared", "other"]
    }
    for workflow, ops in by_workflow.items():
        groups["shared" if not workflow else kind_of.get(workflow.rsplit("/", 1)[-1], "other")].update(ops)
    sizes = Counter(kind_of.values()) | {"shared": len(kind_of), "other": len(kind_of)}
    counted = sum(groups.values(), Counter())
    sdk = sum((ops for role, ops in calls.items() if role.startswith("api")), Counter())
    return {
        "per_task_per_30s_by_task_kind": {
            group: per_task_per_30s_by_kind(ops, sizes[group], elapsed)
            for group, ops in groups.items()
            if ops
        },
        "per_task_per_30s_by_task_kind_total": {
            group: round(sum(ops.values()) * 30 / elapsed / sizes[group], 3)
            for group, ops in groups.items()
            if ops
        },
        "api_requests_counted_vs_sdk": {
            op: [counted[op], sdk[op]] for op in sorted(set(counted) | set(sdk)) if counted[op] or sdk[op]
        },
    }


def _request_rates(calls: dict[str, Counter[str]], elapsed: float, tasks: int) -> dict[str, Any]:
    """Temporal requests per second by process and operation, and per task per 30 s."""
    by_role = {role: per_second(ops, elapsed) for role, ops in calls.items()}
    total = sum(sum(ops.values()) for ops in calls.values()) / elapsed
    reads = sum(sum(ops.values()) for role, ops in calls.items() if role.startswith("api")) / elapsed
    api_servers = sum((ops for role, ops in calls.items() if role.startswith("api")), Counter())
    return {
        "temporal_requests_per_s": round(total, 1),
        "temporal_requests_per_s_by_process": by_role,
        "per_task_per_30s": round(total * 30 / tasks, 3),
        "per_task_per_30s_api_servers": round(reads * 30 / tasks, 3),
        "per_task_per_30s_by_kind": per_task_per_30s_by_kind(sum(calls.values(), Counter()), tasks, elapsed),
        "per_task_per_30s_by_kind_api_servers": per_task_per_30s_by_kind(api_servers, tasks, elapsed),
    }


def _reach(marks: Marks, probes: list[Task]) -> dict[str, Any]:
    """Freshness: from a probe's change to the first poll that showed it, in seconds, by change."""
    reach: dict[str, list[float]] = {then: [] for then in PROBES}
    for probe in probes:
        moment, shown = marks.seen(probe.key, PROBES[probe.then][0]), _shown(probe)
        if moment is not None and shown is not None:
            reach[probe.then].append(shown - moment)
    return {then: percentiles(values) for then, values in reach.items()}


async def kill_and_recover(
    fleet: Fleet, readers: Readers, tasks: list[Task]
) -> tuple[dict[str, Any], Readers, set[str]]:
    """Kill -9 every worker and API server, start them again, and time the recovery from the kill.

    Returns:
        The timings, readers on the new API servers, and the keys of the legs the kill cut short.
    """
    alive = [t for t in tasks if t.tool == "scale_leg" and not t.released]
    killed_at = await fleet.kill()
    await readers.__aexit__(None, None, None)
    await fleet.start()
    restarted = time.monotonic() - killed_at
    fresh = await Readers(fleet.urls, len(readers.clients[0]), readers.in_flight).__aenter__()
    await settle(fresh, tasks, time.monotonic() + DEADLINE_S)
    readable = time.monotonic() - killed_at
    running = await _legs_running_since(fleet.marks, alive, killed_at)
    return (
        {
            "restart_s": round(restarted, 1),
            "every_task_readable_s": round(readable, 1),
            "every_leg_running_s": round(running, 1),
            "legs_killed": len(alive),
        },
        fresh,
        {leg.key for leg in alive},
    )


async def _legs_running_since(marks: Marks, legs: list[Task], since: float) -> float:
    """Seconds from `since` until every one of `legs` has started a run after it."""
    keys = {leg.key for leg in legs}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        runs = marks.runs()
        starts = [max(runs.get((key, "leg"), [0.0])) for key in keys]
        if all(start > since for start in starts):
            return max(starts, default=since) - since
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(s <= since for s in starts)} legs never ran again")
        await asyncio.sleep(1)


async def finish(fleet: Fleet, readers: Readers, tasks: list[Task], killed: set[str]) -> dict[str, Any]:
    """Answer every ask, release every leg; check each result and how often each body ran."""
    began = time.monotonic()
    for task in tasks:
        fleet.marks.mark(task.key, "release")
    asking = [t for t in tasks if t.asks]
    deadline = _deadline(len(tasks))
    while asking:  # an asking leg asks once its release is seen
        reads = await bounded_all([lambda t=t: readers.get(t.task_id) for t in asking], CONCURRENCY)
        ready = [(t, r) for t, r in zip(asking, reads) if getattr(r, "status", None) == "input_required"]
        answers = await bounded_all([lambda r=r: readers.answer(r) for _, r in ready], CONCURRENCY)
        answered = {t.key for (t, _), a in zip(ready, answers) if not isinstance(a, Exception)}
        closed = {t.key for t, r in zip(asking, reads) if getattr(r, "status", None) in TERMINAL}
        asking = [t for t in asking if t.key not in answered | closed]  # a closed one shows as a wrong result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(asking)} tasks never asked")
        await asyncio.sleep(1)
    finals = await _finals(readers, tasks, deadline)
    wrong = [t.key for t, status in zip(tasks, finals) if not t.ended_right(status)]
    return {
        "all_completed_s": round(time.monotonic() - began, 1),
        "completed": sum(s.status == "completed" for s in finals),
        "cancelled": sum(s.status == "cancelled" for s in finals),
        "wrong_results": len(wrong),
        "wrong_result_keys": wrong[:10],
        **_body_runs(fleet.marks, tasks, killed),
    }


async def _finals(readers: Readers, tasks: list[Task], deadline: float) -> list[ClientGetTaskResult]:
    """Every task's read once it has closed."""
    finals: dict[str, ClientGetTaskResult] = {}
    while len(finals) < len(tasks):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(tasks) - len(finals)} tasks never closed")
        pending = [t for t in tasks if t.key not in finals]
        reads = await bounded_all([lambda t=t: readers.get(t.task_id) for t in pending], CONCURRENCY)
        finals |= {t.key: r for t, r in zip(pending, reads) if getattr(r, "status", None) in TERMINAL}
        await asyncio.sleep(1)
    return [finals[t.key] for t in tasks]


def _text(status: ClientGetTaskResult) -> str:
    content = (status.result or {}).get("content", [])
    return "".join(block.get("text", "") for block in content)


def _body_runs(marks: Marks, tasks: list[Task], killed: set[str]) -> dict[str, Any]:
    """Tasks whose bodies ran other than once per phase (twice for the leg of a task alive at the kill)."""
    runs = marks.runs()

    def expected(task: Task) -> Iterator[tuple[str, int]]:
        if task.tool == "scale_park":  # a parked probe asking again is answered twice, a cancelled one never
            yield "ask", 1
            yield "answered", {"ask": 2, "cancel": 0}.get(task.then, 1)
        else:
            yield "leg", 2 if task.key in killed else 1
            yield "answered", 1 if task.asks else 0

    off = [
        f"{task.key} {phase}: {len(runs.get((task.key, phase), []))} runs, expected {n}"
        for task in tasks
        for phase, n in expected(task)
        if len(runs.get((task.key, phase), [])) != n
    ]
    return {
        "body_runs": sum(len(v) for v in runs.values()),
        "body_runs_off": len(off),
        "body_runs_off_first": off[:10],
    }


async def run_mixed(args: argparse.Namespace, temporal: Temporal) -> dict[str, Any]:
    """Half parked, half legs: the window, the kill, the finish."""
    fleet = Fleet(temporal.server, temporal.state, args)
    try:
        await fleet.start()
        parked, legs, probes = build_tasks(args.tasks, args.probes)
        report: dict[str, Any] = {}
        in_flight = args.reads_in_flight or min(args.tasks, MAX_READS_IN_FLIGHT)
        readers = await Readers(fleet.urls, args.clients, in_flight).__aenter__()
        before = await settled_rss(fleet.pids())
        began = time.monotonic()
        await submit(readers, fleet.marks, parked)
        after = await settled_rss(fleet.pids())
        await submit(readers, fleet.marks, legs)
        report["submit_s"] = round(time.monotonic() - began, 1)
        report["mb_per_1000_parked_by_process"] = {
            role: round((after[role] - before[role]) * 1000 / len(parked), 1) for role in before
        }
        print(f"{args.tasks} tasks settled in {report['submit_s']} s", flush=True)
        report["window"] = await window(fleet, readers, parked + legs, probes, args.warmup, args.window)
        print(json.dumps(report["window"]), flush=True)
        report["recovery"], readers, killed = await kill_and_recover(fleet, readers, parked + legs)
        print(json.dumps(report["recovery"]), flush=True)
        report["finish"] = await finish(fleet, readers, parked + legs, killed)
        await readers.__aexit__(None, None, None)
        return report
    finally:
        await fleet.stop()


# --- `--parked N`: tasks parked on input, a sample of them read, the rest unread ---------------

# What a parked probe changes, as the event Temporal records the change with: a new ask (the memo
# naming it), the close, the cancel request (a task reads `cancelled` from then on).
PARKED_CHANGES = {
    "ask": EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    "close": EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    "cancel": EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
}
UNREAD_S = 60.0  # at most this long measured with no task read
SAMPLE_SETTLE_S = 20.0  # the sample's first reads start their servers' watches: not measured


def build_parked(n: int, sample: int, probes: int) -> tuple[list[Task], list[Task], list[Task]]:
    """`n` parked tasks, `sample` of them spread among the rest, of which `probes` of each change."""
    tasks = [Task(f"p{i}", "scale_park", "park") for i in range(n)]
    read = tasks[:: max(1, n // sample)][:sample]
    thens = [then for then in PARKED_CHANGES for _ in range(probes)]
    for task, then in zip(read, thens):
        task.then = then
    return tasks, read, read[: len(thens)]


async def run_parked(args: argparse.Namespace, temporal: Temporal) -> dict[str, Any]:
    """Park `--parked` tasks, measure them unread, then with a sample read; kill, recover, finish."""
    fleet = Fleet(temporal.server, temporal.state, args)
    report: dict[str, Any] = {}
    try:
        await fleet.start()
        tasks, sample, probes = build_parked(args.parked, args.sample, args.probes)
        readers = await Readers(fleet.urls, args.clients, len(sample)).__aenter__()
        before = await settled_rss(fleet.pids())
        began = time.monotonic()
        await submit(readers, fleet.marks, tasks)
        report["submit_s"] = round(time.monotonic() - began, 1)
        after = await settled_rss(fleet.pids())
        report["mb_per_1000_parked_by_process"] = {
            role: round((after[role] - before[role]) * 1000 / len(tasks), 1) for role in before
        }
        print(f"{len(tasks)} tasks parked in {report['submit_s']} s", flush=True)
        await asyncio.sleep(args.warmup)  # the servers let go of the watches their submits' reads began
        kinds = {t.task_id: "unread" for t in tasks} | {t.task_id: "read" for t in sample}
        report["unread"], unread = await parked_phase(fleet, kinds, min(UNREAD_S, args.window))
        print(json.dumps(report["unread"]), flush=True)
        report["read"] = await read_sample(fleet, readers, kinds, sample, probes, args.window, unread)
        print(json.dumps(report["read"]), flush=True)
        report["recovery"], readers, killed = await kill_and_recover(fleet, readers, tasks)
        print(json.dumps(report["recovery"]), flush=True)
        report["finish"] = await finish(fleet, readers, tasks, killed)
        await readers.__aexit__(None, None, None)
        return report
    finally:
        await fleet.stop()


async def parked_phase(
    fleet: Fleet, kinds: dict[str, str], seconds: float, midway: Callable[[], Awaitable[None]] | None = None
) -> tuple[dict[str, Any], Grown]:
    """Measure `seconds` (calling `midway` halfway): the fleet's Temporal requests per parked task per
    30 s, by kind of request and by kind of task (`kinds`), the API servers' reads, CPU by process."""
    before = await Counts.take(fleet.pids(), fleet.metrics, fleet.bench_urls)
    await asyncio.sleep(seconds / 2)
    if midway is not None:
        await midway()
    await asyncio.sleep(before.at + seconds - time.monotonic())
    grown = await before.grown()
    return {
        "elapsed_s": round(grown.elapsed, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "tasks_get_served_by_server": {role: len(r["tasks_get_s"]) for role, r in grown.served.items()},
        "tasks_get_ms_at_servers": percentiles_ms(
            [s for r in grown.served.values() for s in r["tasks_get_s"]], 1
        ),
        **_request_rates(grown.calls, grown.elapsed, len(kinds)),
        **_by_task_kind(grown.by_workflow, kinds, grown.elapsed, grown.calls),
        "cpu_cores_by_process": {role: round(c / grown.elapsed, 3) for role, c in grown.cpu.items()},
    }, grown


async def read_sample(
    fleet: Fleet,
    readers: Readers,
    kinds: dict[str, str],
    sample: list[Task],
    probes: list[Task],
    seconds: float,
    unread: Grown,
) -> dict[str, Any]:
    """Read `sample` at its advertised interval and measure `seconds`, its probes changed halfway;
    how soon each change reached the sample's reads, and each API server's CPU per read."""
    polling = Polling(readers, sample)
    with polling:
        await asyncio.sleep(SAMPLE_SETTLE_S)
        polling.latencies = []
        measured, grown = await parked_phase(fleet, kinds, seconds, lambda: change_parked(readers, probes))
        latencies, polling.latencies = polling.latencies, None
        await _until(lambda: _all_shown(probes), PROBE_GRACE_S)
        await polling.drain()
    return {
        **measured,
        "tasks_get_ms": percentiles_ms(latencies, 1),
        "read_errors": polling.errors,
        "first_read_error": polling.first_error,
        "api_cpu_per_read": _cpu_per_read(unread, grown),
        "reach_s": await _reach_in_temporal(fleet.dev.address, probes),
    }


async def change_parked(readers: Readers, probes: list[Task]) -> None:
    """Answer the asking probes (they ask again) and the closing ones, cancel the rest."""

    async def one(probe: Task) -> None:
        if probe.then == "cancel":
            await readers.cancel(probe.task_id)
        else:
            status = await readers.get(probe.task_id)
            probe.first_ask = _asks(status)
            await readers.answer(status)
        probe.released = True

    await _all_succeed([lambda p=p: one(p) for p in probes], "probes' changes")


def _asks(status: ClientGetTaskResult) -> str:
    """A read's asks, as `Task.seen` names them."""
    return "asks " + " ".join(sorted(status.input_requests or {}))


def _cpu_per_read(unread: Grown, read: Grown) -> dict[str, dict[str, Any]]:
    """Each API server's CPU per `tasks/get` it served: all it spent over its reads, and what it spent
    beyond its rate while nothing was read."""
    per_server: dict[str, dict[str, Any]] = {}
    for role, served in read.served.items():
        reads = len(served["tasks_get_s"]) or 1
        beyond = read.cpu[role] - unread.cpu[role] / unread.elapsed * read.elapsed
        per_server[role] = {
            "reads_per_s": round(len(served["tasks_get_s"]) / read.elapsed, 2),
            "cpu_ms_per_read": round(read.cpu[role] * 1000 / reads, 2),
            "cpu_ms_per_read_beyond_unread": round(beyond * 1000 / reads, 2),
        }
    return per_server


async def _reach_in_temporal(address: str, probes: list[Task]) -> dict[str, Any]:
    """Freshness: from each parked probe's change, as Temporal's history times it, to the first read
    that showed it, in seconds, by change."""
    client = await TemporalClient.connect(address)
    monotonic_minus_wall = time.monotonic() - time.time()  # Temporal's clock is this machine's
    reach: dict[str, list[float]] = {then: [] for then in PARKED_CHANGES}
    for probe in probes:
        history = await client.get_workflow_handle(workflow_id("anon", probe.task_id)).fetch_history()
        changes = [e.event_time for e in history.events if e.event_type == PARKED_CHANGES[probe.then]]
        if changes and (shown := _shown(probe)) is not None:
            changed = changes[-1].seconds + changes[-1].nanos / 1e9 + monotonic_minus_wall
            reach[probe.then].append(shown - changed)
    return {then: percentiles(values) for then, values in reach.items()}


# --- `--legs N`: waiting legs running at once, beside bare Temporal at the same N -------------


def build_sleepers(n: int, prefix: str) -> list[Task]:
    """`n` waiting legs (`scale_sleep`), none of which asks or is released."""
    return [Task(f"{prefix}{i}", "scale_sleep", "") for i in range(n)]


async def run_legs(args: argparse.Namespace, temporal: Temporal) -> dict[str, Any]:
    """This project's `--legs` waiting legs on the fleet, then bare Temporal's on the same dev server."""
    dev, state, server_metrics = temporal.server, temporal.state, str(temporal.metrics_url)
    fleet = Fleet(dev, state, args)
    report: dict[str, Any] = {}
    try:
        await fleet.start()
        report["ours"] = await ours_legs(fleet, args, server_metrics)
        print(json.dumps(report["ours"]), flush=True)
        await fleet.stop()
        report["bare"] = await bare_legs(dev, state, args, server_metrics)
        print(json.dumps(report["bare"]), flush=True)
    finally:
        await fleet.stop()
    report["ours_vs_bare"] = {
        key: round(report["ours"]["window"][key] / report["bare"]["window"][key], 2)
        for key in ("actions_per_s", "frontend_requests_per_s")
        if report["bare"]["window"][key]
    }
    return report


async def ours_legs(fleet: Fleet, args: argparse.Namespace, server_metrics: str) -> dict[str, Any]:
    """Submit the legs over the API servers, read a sample with real clients, measure while all run."""
    legs = build_sleepers(args.legs, "s")
    sample = legs[:: max(1, len(legs) // args.sample)][: args.sample]
    readers = await Readers(fleet.urls, args.clients, len(sample)).__aenter__()
    try:
        began = time.monotonic()

        async def one(task: Task) -> None:
            arguments = {"key": task.key, "seconds": args.leg_seconds}
            task.task_id = (await call_tool_task(readers.client(), task.tool, arguments)).task_id

        await _all_succeed([lambda t=t: one(t) for t in legs], "submits")
        submitted = time.monotonic() - began
        polling = Polling(readers, sample)
        with polling:
            pids = fleet.pids() | {"bench": [os.getpid()]}
            window = await legs_window(fleet.marks, legs, args, pids, fleet.metrics, server_metrics)
            slept = {(leg.key, "slept") for leg in legs}  # every leg's body ended, as the marks tell
            await _until(lambda: slept <= fleet.marks.runs().keys(), args.leg_seconds + DEADLINE_S, 1)
            finals = await _finals(readers, legs, time.monotonic() + DEADLINE_S)
            await _until(lambda: all("completed" in t.seen for t in sample), PROBE_GRACE_S)  # seen closing
            await polling.drain()
    finally:
        await readers.__aexit__(None, None, None)
    logs = [path.read_text(errors="replace") for path in fleet.state.glob("worker-*.log")]
    return {
        "submit_s": round(submitted, 1),
        "window": window,
        "completed": sum(
            f.status == "completed" and _text(f) == f"done:{t.key}" for t, f in zip(legs, finals)
        ),
        "sample_read": {
            "tasks": len(sample),
            "read_errors": polling.errors,
            "first_read_error": polling.first_error,
            "completed_seen": sum("completed" in t.seen for t in sample),
        },
        **_body_runs(fleet.marks, legs, set()),
        **await attempts_in_temporal(fleet.dev.address, fleet.env["FASTMCP_TEMPORAL_TASK_QUEUE"]),
        "worker_log_starved_warnings": sum(log.count("event loop is starved") for log in logs),
        "worker_log_gave_up": sum(log.count("Temporal gave up on the attempt") for log in logs),
        "worker_log_follow_failures": sum(log.count("could not follow its task") for log in logs),
    }


async def bare_legs(
    dev: DevServer, state: Path, args: argparse.Namespace, server_metrics: str
) -> dict[str, Any]:
    """The same legs as bare Temporal's: `BareSleep` workflows on 2 `bare_engine.py --sleepers` workers."""
    folder = state / "bare"
    (folder / "marks").mkdir(parents=True)
    env = engine_env("bare", Backends(dev.address, process_tree(dev.pid), None, []), folder, None)
    queue = env["FASTMCP_TEMPORAL_TASK_QUEUE"]
    workers: dict[str, asyncio.subprocess.Process] = {}
    metrics: dict[str, Any] = {}  # each worker's SDK metrics (the bare engine always serves them)
    try:
        for role in (f"worker-{i}" for i in range(WORKERS)):
            workers[role], metrics[role] = await start_worker(
                "bare", env, folder / f"{role}.log", "--sleepers"
            )
        client = await TemporalClient.connect(dev.address)
        legs = build_sleepers(args.legs, "b")
        began = time.monotonic()

        async def start(task: Task) -> Any:
            run = [task.key, args.leg_seconds, args.heartbeat_timeout]
            return await client.start_workflow("BareSleep", args=run, id=f"bare/{task.key}", task_queue=queue)

        handles = await _all_succeed([lambda t=t: start(t) for t in legs], "bare starts")
        submitted = time.monotonic() - began
        pids = {role: [p.pid] for role, p in workers.items()} | {"dev server": process_tree(dev.pid)}
        marks = Marks(folder / "marks")
        window = await legs_window(marks, legs, args, pids, metrics, server_metrics)
        results = await bounded_all([lambda h=h: h.result() for h in handles], CONCURRENCY)
    finally:
        for process in workers.values():
            await terminate(process)
    return {
        "submit_s": round(submitted, 1),
        "window": window,
        "completed": sum(r == f"done:{t.key}" for t, r in zip(legs, results)),
        **_body_runs(marks, legs, set()),
        **await attempts_in_temporal(dev.address, queue),
    }


async def legs_window(
    marks: Marks,
    legs: list[Task],
    args: argparse.Namespace,
    pids: dict[str, list[int]],
    sdk_metrics: dict[str, str],
    server_metrics: str,
) -> dict[str, Any]:
    """Once every leg runs, measure until the first is due to end (at most `--window` s): the dev
    server's billed Actions and requests by operation, each process's SDK requests, CPU and RSS."""
    deadline = time.monotonic() + DEADLINE_S
    while (running := _running(marks, legs)) < len(legs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {running} of {len(legs)} legs ever ran at once")
        await asyncio.sleep(1)
    first_start = min(min(marks.runs()[(leg.key, "leg")]) for leg in legs)
    seconds = min(args.window, first_start + args.leg_seconds - LEGS_MARGIN_S - time.monotonic())
    before = await dev_server_counts(server_metrics)
    counts = await Counts.take(pids, sdk_metrics, {})
    await asyncio.sleep(seconds / 2)
    middle = await dev_server_counts(server_metrics)
    await asyncio.sleep(counts.at + seconds - time.monotonic())
    grown = await counts.grown()
    elapsed = grown.elapsed
    after = await dev_server_counts(server_metrics)
    running_at_end = _running(marks, legs)

    def rate(kind: str) -> dict[str, float]:
        return per_second(Counter(after.get(kind, {})) - Counter(before.get(kind, {})), elapsed)

    requests = rate("requests")
    actions = rate("actions").get("all", 0.0)
    return {
        "legs_running_at_start": len(legs),
        "legs_running_at_end": running_at_end,
        "elapsed_s": round(elapsed, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "actions_per_s": actions,
        "actions_per_leg_per_30s": round(actions * 30 / len(legs), 3),
        "frontend_requests_per_s": round(sum(requests.values()), 1),
        "frontend_requests_per_leg_per_30s": round(sum(requests.values()) * 30 / len(legs), 3),
        "frontend_requests_per_s_by_operation": requests,
        "frontend_long_requests_in_flight_mid_window": middle.get("pending", {}),
        "frontend_resource_exhausted": rate("resource_exhausted"),
        "sdk_requests_per_s_by_process": {
            role: per_second(ops, elapsed) for role, ops in grown.calls.items()
        },
        "cpu_cores_by_process": {role: round(c / elapsed, 3) for role, c in grown.cpu.items()},
        "rss_mb_by_process": await settled_rss(pids),
    }


def _running(marks: Marks, legs: list[Task]) -> int:
    """How many of `legs` have started their body and not ended it."""
    runs = marks.runs()
    return sum(len(runs.get((leg.key, "leg"), [])) > len(runs.get((leg.key, "slept"), [])) for leg in legs)


async def attempts_in_temporal(address: str, task_queue: str) -> dict[str, int]:
    """Across the histories of every workflow on `task_queue`: attempts Temporal timed out, and
    attempts past the first it started."""
    client = await TemporalClient.connect(address)
    ids = [w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")]

    async def counted(workflow_id: str) -> tuple[int, int]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        timed_out = retried = 0
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                timed_out += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                retried += event.activity_task_started_event_attributes.attempt > 1
        return timed_out, retried

    counts = await bounded_all([lambda w=w: counted(w) for w in ids], CONCURRENCY)
    return {
        "workflows_in_temporal": len(ids),
        "activity_attempts_timed_out": sum(c[0] for c in counts if isinstance(c, tuple)),
        "activity_attempts_after_the_first": sum(c[1] for c in counts if isinstance(c, tuple)),
        "histories_unread": sum(not isinstance(c, tuple) for c in counts),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks", type=int, default=10_000, help="tasks held at once (half parked, half legs)"
    )
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds of polling before the window")
    parser.add_argument("--window", type=float, default=300.0, help="seconds of polling measured")
    parser.add_argument("--clients", type=int, default=2, help="fastmcp.Clients per API server")
    parser.add_argument(
        "--reads-in-flight",
        type=int,
        default=0,
        help=f"the window's reads in flight at once (default: one per task, at most {MAX_READS_IN_FLIGHT})",
    )
    parser.add_argument(
        "--probes",
        type=int,
        default=10,
        help="tasks that change mid-window, of each change: ask, close, progress (not --parked) and cancel",
    )
    parser.add_argument(
        "--progress", type=float, default=10.0, help="seconds between a leg's progress reports"
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=None,
        help="the legs' heartbeat_timeout, seconds (default: 30; with --legs, the extension's 5)",
    )
    parser.add_argument(
        "--legs", type=int, default=0, help="instead: this many waiting legs at once, then bare Temporal's"
    )
    parser.add_argument("--leg-seconds", type=float, default=120.0, help="with --legs: how long each waits")
    parser.add_argument(
        "--parked",
        type=int,
        default=0,
        help="instead: this many tasks parked on input, a sample of them read",
    )
    parser.add_argument(
        "--sample", type=int, default=50, help="with --legs or --parked: tasks the clients read"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.heartbeat_timeout is None:
        args.heartbeat_timeout = LEGS_HEARTBEAT_TIMEOUT_S if args.legs else 30.0
    scenario = run_legs if args.legs else run_parked if args.parked else run_mixed
    async with dev_server(metrics=bool(args.legs)) as temporal:
        return await scenario(args, temporal)
