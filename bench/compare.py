"""fastmcp-temporal against fastmcp-tasks and bare Temporal, in one run on one dev server.

    .venv/bin/python bench/compare.py [--quick] [--parked 10000] [--profile]

Starts one sqlite-WAL Temporal dev server (as the project's launcher does) and, when
`redis-server` is installed, one throwaway Redis; then one child process per engine:

- `tasks-memory`: fastmcp-tasks (FastMCP's own engine) on Docket `memory://`;
- `tasks-redis`: fastmcp-tasks on that Redis (skipped, with a note, without one);
- `bare`: a Temporal workflow running one activity, with the same worker settings,
  timeouts and heartbeat cadence as a fastmcp-temporal leg (`bench/bare_engine.py`);
- `temporal`: this project, worker in process; its trivial tool also runs as a
  `leg="local"` tool (end to end, burst and history measured apart).

MCP engines are driven through an unmodified `fastmcp.Client` (in-memory transport,
client and worker in the child); the bare engine through a `temporalio` client.
Rounds are interleaved across engines, so noise on a shared machine hits all alike.
Measured: end to end, submit, `tasks/get` (bare: `describe()`) on a running and on a
finished task, `tasks/cancel` until the tool body sees `CancelledError`, the
workflow's own duration in Temporal, throughput of a burst, Temporal RPCs, history
events and billable Actions per trivial task, and worker memory per parked task.
Writes `bench/results/compare.json` and `compare.png` (`pip install -e ".[bench]"`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from billing import billable_actions  # bench/ is the script's own folder on sys.path
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp_types import ElicitRequest, InputRequiredResult

RESULTS = Path(__file__).parent / "results"
ENGINES = ("tasks-memory", "tasks-redis", "bare", "temporal", "temporal-baseline")
LABELS = {
    "tasks-memory": "fastmcp-tasks (memory)",
    "tasks-redis": "fastmcp-tasks (Redis)",
    "bare": "bare Temporal",
    "temporal": "fastmcp-temporal",
    "temporal-baseline": "fastmcp-temporal (baseline)",
}


# --------------------------------------------------------------------------- child side


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _Metrics:
    """Temporal RPCs this process made, by operation, from the SDK's own metrics."""

    def __init__(self) -> None:
        from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

        self.buffer = MetricBuffer(1_000_000)
        self.runtime = Runtime(telemetry=TelemetryConfig(metrics=self.buffer))
        self.totals: collections.Counter[str] = collections.Counter()

    def snapshot(self) -> dict[str, int]:
        for update in self.buffer.retrieve_updates():
            if update.metric.name in ("temporal_request", "temporal_long_request"):
                self.totals[str(update.attributes.get("operation"))] += int(update.value)
        return dict(self.totals)


def _delta(after: dict[str, int], before: dict[str, int], per: int) -> dict[str, float]:
    return {
        k: round((v - before.get(k, 0)) / per, 2) for k, v in sorted(after.items()) if v != before.get(k, 0)
    }


async def _history_counts(client: Any, workflow_id: str) -> dict[str, Any]:
    from temporalio.api.enums.v1 import EventType

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds = collections.Counter(EventType.Name(event.event_type) for event in history.events)
    return {
        "events": len(history.events),
        "billable_events": billable_actions(history.events),
        "by_type": dict(kinds),
    }


async def _duration_ms(client: Any, workflow_id: str) -> float:
    description = await client.get_workflow_handle(workflow_id).describe()
    return (description.close_time - description.start_time).total_seconds() * 1000


class McpEngine:
    """fastmcp-tasks or fastmcp-temporal behind a FastMCP server and client in this process."""

    def __init__(self, kind: str, address: str, redis_url: str | None) -> None:
        self.kind, self.address, self.redis_url = kind, address, redis_url
        self.started: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.cancelled: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.cancelled_at: dict[str, float] = {}
        self.temporal: Any = None
        self.metrics: _Metrics | None = None
        self.parked_bodies = 0
        self.requests: collections.Counter[str] = collections.Counter()

    async def __aenter__(self) -> McpEngine:
        from fastmcp import Client

        mcp = FastMCP("bench", middleware=[_RequestCounter(self.requests)])
        if self.kind.startswith("temporal"):
            from temporalio.client import Client as TemporalClient

            from fastmcp_temporal import TemporalTasksExtension

            self.metrics = _Metrics()
            self.temporal = await TemporalClient.connect(self.address, runtime=self.metrics.runtime)
            mcp.add_extension(
                TemporalTasksExtension(client=self.temporal, task_queue=f"bench-{uuid.uuid4().hex[:8]}")
            )
        else:
            from fastmcp_tasks import TasksExtension

            url = "memory://" if self.kind == "tasks-memory" else self.redis_url
            mcp.add_extension(TasksExtension(url=url, name=f"bench-{uuid.uuid4().hex[:8]}"))

        add_trivial_tools(mcp)
        if self.kind == "temporal":
            from fastmcp_temporal import execution_policy

            @mcp.tool(task=True)
            @execution_policy(leg="local")
            async def trivial_local(n: int) -> int:
                return n

        @mcp.tool(task=True)
        async def hold(key: str) -> str:
            self.started[key].set()
            try:
                while True:
                    await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                self.cancelled_at[key] = time.perf_counter()
                self.cancelled[key].set()
                raise

        @mcp.tool(task=True)
        async def park() -> str | InputRequiredResult:
            self.parked_bodies += 1
            return ask_ok()

        self.client = Client(mcp)
        await self.client.__aenter__()
        await self.client.call_tool("trivial", {"n": 0})
        self.running = await self._submit("hold", {"key": "running"})
        await self.started["running"].wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.running.cancel()
        await self.client.__aexit__(None, None, None)

    async def _submit(self, tool: str, arguments: dict[str, Any]) -> Any:
        from fastmcp_tasks.client import call_tool_task

        return await call_tool_task(self.client, tool, arguments)

    def _workflow_id(self, task_id: str) -> str:
        return f"mcp-task/anon/{task_id}"

    async def round(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = collections.defaultdict(list)
        t0 = time.perf_counter()
        await self.client.call_tool("trivial", {"n": 1})
        out["end_to_end"].append(_ms(t0))
        if self.kind == "temporal":
            t0 = time.perf_counter()
            await self.client.call_tool("trivial_local", {"n": 1})
            out["end_to_end_local_leg"].append(_ms(t0))

        t0 = time.perf_counter()
        task = await self._submit("trivial", {"n": 1})
        out["submit"].append(_ms(t0))
        await task.result()
        if self.temporal is not None:
            out["workflow_duration"].append(
                await _duration_ms(self.temporal, self._workflow_id(task.task_id))
            )
        out["get_finished"] += await _timed_thrice(task.status)
        out["get_running"] += await _timed_thrice(self.running.status)
        # What a tools/call costs here before an engine does anything: the floor under submit.
        # (The floor under tasks/get is "tasks/get finished": answered without calling Temporal.)
        out["mcp_call_floor"] += await _timed_thrice(lambda: self.client.call_tool("no_task", {"n": 1}))

        key = uuid.uuid4().hex
        held = await self._submit("hold", {"key": key})
        await self.started[key].wait()
        await asyncio.sleep(0.3)
        t0 = time.perf_counter()
        await held.cancel()
        await asyncio.wait_for(self.cancelled[key].wait(), 30)
        out["cancel"].append((self.cancelled_at[key] - t0) * 1000)
        return out

    async def burst(self, n: int) -> dict[str, Any]:
        async with self._quiet():
            out = await self._burst(n)
            if self.kind == "temporal":
                out["local_leg_tasks_per_s"] = (await self._burst(n, "trivial_local"))["tasks_per_s"]
            return out

    @contextlib.asynccontextmanager
    async def _quiet(self) -> AsyncIterator[None]:
        """Stop the long-running task while counting, so its heartbeats are not billed to the burst."""
        await self.running.cancel()
        await asyncio.wait_for(self.cancelled["running"].wait(), 30)
        await self.running.wait(timeout=30)
        self.started.pop("running"), self.cancelled.pop("running")
        try:
            yield
        finally:
            self.running = await self._submit("hold", {"key": "running"})
            await self.started["running"].wait()

    async def _burst(self, n: int, tool: str = "trivial") -> dict[str, Any]:
        before = self.metrics.snapshot() if self.metrics else {}
        reads_before = self.requests["tasks/get"]
        t0 = time.perf_counter()
        await asyncio.gather(*(self.client.call_tool(tool, {"n": i}) for i in range(n)))
        elapsed = time.perf_counter() - t0
        out: dict[str, Any] = {
            "tasks_per_s": n / elapsed,
            "task_reads_per_task": round((self.requests["tasks/get"] - reads_before) / n, 1),
        }
        if self.metrics:
            out["rpcs_per_task"] = _delta(self.metrics.snapshot(), before, n)
        return out

    async def history(self) -> dict[str, Any]:
        if self.temporal is None:
            return {}
        task = await self._submit("trivial", {"n": 2})
        await task.result()
        counts = await _history_counts(self.temporal, self._workflow_id(task.task_id))
        if self.kind == "temporal":
            local = await self._submit("trivial_local", {"n": 2})
            await local.result()
            counts["local_leg"] = await _history_counts(self.temporal, self._workflow_id(local.task_id))
        return counts

    async def park(self, n: int) -> dict[str, Any]:
        before = await _settled_rss()
        limit = asyncio.Semaphore(50)

        async def one() -> Any:
            async with limit:
                for attempt in range(5):  # an overloaded dev server refuses now and then
                    try:
                        return await self._submit("park", {})
                    except Exception:
                        if attempt == 4:
                            raise
                        await asyncio.sleep(1 + attempt)

        ran = self.parked_bodies
        tasks = await asyncio.gather(*(one() for _ in range(n)))
        while self.parked_bodies - ran < n:
            await asyncio.sleep(0.5)
        pending = list(tasks)
        while pending:
            await asyncio.sleep(0.5)
            statuses = await asyncio.gather(
                *(_bounded(limit, t.status()) for t in pending), return_exceptions=True
            )
            # a task that failed instead of parking (an overloaded worker) is settled too
            pending = [t for t, s in zip(pending, statuses) if getattr(s, "status", "working") == "working"]
        after = await _settled_rss()
        return {
            "parked": n,
            "rss_before_mb": before,
            "rss_after_mb": after,
            "mb_per_1000": (after - before) * 1000 / n,
        }


def add_trivial_tools(mcp: FastMCP) -> None:
    """`trivial`, a task tool that returns its argument, and `no_task`, the same as a plain tool."""

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        return n

    @mcp.tool
    async def no_task(n: int) -> int:
        return n


class _RequestCounter(Middleware):
    """Counts the MCP requests the server answers, by method."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self.counts = counts

    async def on_request(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        self.counts[context.method or "?"] += 1
        return await call_next(context)


class BareEngine:
    """A plain temporalio client and worker: the floor any Temporal-backed engine stands on."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def __aenter__(self) -> BareEngine:
        from bare_engine import (
            WORKER_SETTINGS,
            BareActivities,
            BareHold,
            BareParked,
            BareTrivial,
            BareTrivialLocal,
        )
        from temporalio.client import Client
        from temporalio.worker import Worker

        self.metrics = _Metrics()
        self.client = await Client.connect(self.address, runtime=self.metrics.runtime)
        self.queue = f"bare-{uuid.uuid4().hex[:8]}"
        self.acts = BareActivities()
        self.worker = Worker(
            self.client,
            task_queue=self.queue,
            workflows=[BareTrivial, BareTrivialLocal, BareHold, BareParked],
            activities=[self.acts.trivial, self.acts.hold],
            **WORKER_SETTINGS,
        )
        self.run_task = asyncio.create_task(self.worker.run())
        await (await self._start_async("BareTrivial", 0)).result()  # warm up
        self.running = await self._start_async("BareHold", "running")
        await self._started("running")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.running.cancel()
        await self.worker.shutdown()
        await self.run_task

    async def _start_async(self, workflow: str, arg: Any) -> Any:
        return await self.client.start_workflow(
            workflow, arg, id=f"bare/{uuid.uuid4().hex}", task_queue=self.queue, request_eager_start=True
        )

    async def _started(self, key: str) -> None:
        self.acts.started.setdefault(key, asyncio.Event())
        await self.acts.started[key].wait()

    async def round(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = collections.defaultdict(list)
        t0 = time.perf_counter()
        await (await self._start_async("BareTrivial", 1)).result()
        out["end_to_end"].append(_ms(t0))
        t0 = time.perf_counter()
        await (await self._start_async("BareTrivialLocal", 1)).result()
        out["end_to_end_local_activity"].append(_ms(t0))

        t0 = time.perf_counter()
        handle = await self._start_async("BareTrivial", 1)
        out["submit"].append(_ms(t0))
        await handle.result()
        out["workflow_duration"].append(await _duration_ms(self.client, handle.id))
        out["get_finished"] += await _timed_thrice(handle.describe)
        out["get_running"] += await _timed_thrice(self.running.describe)

        key = uuid.uuid4().hex
        self.acts.cancelled.setdefault(key, asyncio.Event())
        held = await self._start_async("BareHold", key)
        await self._started(key)
        await asyncio.sleep(0.3)
        t0 = asyncio.get_running_loop().time()
        await held.cancel()
        await asyncio.wait_for(self.acts.cancelled[key].wait(), 30)
        out["cancel"].append((self.acts.cancelled_at[key] - t0) * 1000)
        return out

    async def burst(self, n: int) -> dict[str, Any]:
        await self.running.cancel()
        await asyncio.wait_for(self.acts.cancelled.setdefault("running", asyncio.Event()).wait(), 30)
        try:
            return await self._burst(n)
        finally:
            self.acts.started.pop("running"), self.acts.cancelled.pop("running")
            self.running = await self._start_async("BareHold", "running")
            await self._started("running")

    async def _burst(self, n: int) -> dict[str, Any]:
        before = self.metrics.snapshot()
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            await (await self._start_async("BareTrivial", i)).result()

        await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        return {"tasks_per_s": n / elapsed, "rpcs_per_task": _delta(self.metrics.snapshot(), before, n)}

    async def history(self) -> dict[str, Any]:
        handle = await self._start_async("BareTrivial", 2)
        await handle.result()
        local = await self._start_async("BareTrivialLocal", 2)
        await local.result()
        return {
            **await _history_counts(self.client, handle.id),
            "local_activity": await _history_counts(self.client, local.id),
        }

    async def park(self, n: int) -> dict[str, Any]:
        before = await _settled_rss()
        ran = self.acts.ran
        limit = asyncio.Semaphore(50)
        handles = await asyncio.gather(
            *(_bounded(limit, self._start_async("BareParked", i)) for i in range(n))
        )
        while self.acts.ran - ran < n:
            await asyncio.sleep(0.5)
        pending = list(handles)
        while pending:
            await asyncio.sleep(0.5)
            descriptions = await asyncio.gather(
                *(_bounded(limit, h.describe()) for h in pending), return_exceptions=True
            )
            pending = [h for h, d in zip(pending, descriptions) if isinstance(d, Exception) or not _parked(d)]
        after = await _settled_rss()
        return {
            "parked": n,
            "rss_before_mb": before,
            "rss_after_mb": after,
            "mb_per_1000": (after - before) * 1000 / n,
        }


async def _settled_rss() -> float:
    gc.collect()
    await asyncio.sleep(1)
    gc.collect()
    return _rss_mb()


def _parked(description: Any) -> bool:
    raw = description.raw_description
    return not raw.pending_activities and not raw.HasField("pending_workflow_task")


async def _bounded(limit: asyncio.Semaphore, awaitable: Any) -> Any:
    async with limit:
        return await awaitable


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


async def _timed_thrice(read: Callable[[], Awaitable[Any]]) -> list[float]:
    """Milliseconds of three reads in a row."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        await read()
        times.append(_ms(t0))
    return times


def ask_ok() -> InputRequiredResult:
    """A task tool's ask for one form elicitation with no fields."""
    request = ElicitRequest(
        method="elicitation/create",
        params={"mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {}}},
    )
    return InputRequiredResult(result_type="input_required", input_requests={"q": request})


async def child_main(kind: str, address: str, redis_url: str | None) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    engine = BareEngine(address) if kind == "bare" else McpEngine(kind, address, redis_url)
    async with engine:
        _reply({"ready": True, "pid": os.getpid(), "rss_mb": _rss_mb()})
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            op = command.pop("op")
            if op == "quit":
                _reply({})
                return
            _reply(await getattr(engine, op)(**command))


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(payload) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- parent side


class Child:
    def __init__(self, kind: str, process: asyncio.subprocess.Process) -> None:
        self.kind, self.process = kind, process

    @classmethod
    async def start(
        cls, kind: str, address: str, redis_url: str | None, log: Path, baseline: Path | None = None
    ) -> Child:
        args = [sys.executable, __file__, "--child", kind, "--address", address]
        if redis_url:
            args += ["--redis-url", redis_url]
        # Installed packages carry bytecode; without it a workflow sandbox (the bare
        # engine's, an older baseline's) recompiles its workflow module for every workflow.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        if baseline is not None:
            env["PYTHONPATH"] = str(baseline)
        process = await asyncio.create_subprocess_exec(
            *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("ab"), env=env
        )
        child = cls(kind, process)
        child.ready = await child._read()
        return child

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps({"op": op, **params}) + "\n").encode())
        await self.process.stdin.drain()
        return await self._read()

    async def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"engine {self.kind!r} exited; see bench/results/compare-children.log")
            if line.startswith(b"@@"):
                return json.loads(line[2:])

    async def stop(self) -> None:
        if self.process.returncode is None:
            try:
                await asyncio.wait_for(self.call("quit"), 30)
                await asyncio.wait_for(self.process.wait(), 30)
            except Exception:
                self.process.kill()
                await self.process.wait()


def start_redis(state: Path) -> tuple[subprocess.Popen[bytes] | None, str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
    from fastmcp_temporal.devserver._server import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(state),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    import socket

    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    process.kill()
    return None, None


def _summary(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        return {
            "p50": samples[0] if samples else float("nan"),
            "p95": samples[0] if samples else float("nan"),
        }
    return {
        "p50": round(statistics.median(samples), 2),
        "p95": round(statistics.quantiles(samples, n=20, method="inclusive")[18], 2),
        "n": len(samples),
    }


async def parent_main(args: argparse.Namespace) -> dict[str, Any]:
    from fastmcp_temporal.devserver._server import start_dev_server

    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "compare-children.log"
    log.write_text("")
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as state:
        server = await asyncio.to_thread(start_dev_server, db_path=Path(state) / "temporal.db", ui=False)
        redis, redis_url = start_redis(Path(state))
        if redis is None:
            notes.append("tasks-redis skipped: no redis-server on PATH (apt-get install redis-server)")
        children: dict[str, Child] = {}
        try:
            for kind in args.engines:
                if (
                    kind == "tasks-redis"
                    and redis_url is None
                    or kind == "temporal-baseline"
                    and not args.baseline
                ):
                    continue
                baseline = args.baseline if kind == "temporal-baseline" else None
                children[kind] = await Child.start(kind, server.address, redis_url, log, baseline)
            return await _measure(args, children, notes)
        finally:
            for child in children.values():
                await child.stop()
            if redis is not None:
                redis.terminate()
                redis.wait(10)
            server.stop()


async def _measure(args: argparse.Namespace, children: dict[str, Child], notes: list[str]) -> dict[str, Any]:
    order = list(children)
    samples: dict[str, dict[str, list[float]]] = {k: collections.defaultdict(list) for k in order}
    bursts: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
    profile: dict[str, Any] = {}
    for pass_ in range(args.passes):
        for round_ in range(args.rounds):
            shift = (pass_ * args.rounds + round_) % len(order)
            for kind in order[shift:] + order[:shift]:
                for metric, values in (await children[kind].call("round")).items():
                    samples[kind][metric].extend(values)
            print(f"\rpass {pass_ + 1}/{args.passes} round {round_ + 1}/{args.rounds}", end="", flush=True)
        for kind in order[pass_ % len(order) :] + order[: pass_ % len(order)]:
            bursts[kind].append(await children[kind].call("burst", n=args.burst))
    print()
    if args.profile and "temporal" in children:  # an extra burst: py-spy slows the process it samples
        profile = await _profiled(children["temporal"], args.burst)
        del profile["burst"]
    history = {k: await children[k].call("history") for k in order if k.startswith(("bare", "temporal"))}
    parked = {}
    for kind in order if args.parked else ():
        print(f"parking {args.parked} tasks on {kind}", flush=True)
        parked[kind] = await children[kind].call("park", n=args.parked)
    report: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "passes": args.passes,
            "burst": args.burst,
            "parked": args.parked,
        },
        "notes": notes,
        "engines": {},
    }
    for kind in order:
        entry = {metric: _summary(values) for metric, values in samples[kind].items()}
        entry["throughput_tasks_per_s"] = round(statistics.median(b["tasks_per_s"] for b in bursts[kind]), 1)
        if "task_reads_per_task" in bursts[kind][-1]:
            entry["task_reads_per_task"] = statistics.median(b["task_reads_per_task"] for b in bursts[kind])
        if "local_leg_tasks_per_s" in bursts[kind][-1]:
            local_leg = statistics.median(b["local_leg_tasks_per_s"] for b in bursts[kind])
            entry["throughput_local_leg_tasks_per_s"] = round(local_leg, 1)
        if "rpcs_per_task" in bursts[kind][-1]:
            entry["temporal_rpcs_per_task"] = bursts[kind][-1]["rpcs_per_task"]
            heartbeats = bursts[kind][-1]["rpcs_per_task"].get("RecordActivityTaskHeartbeat", 0)
            entry["heartbeats_per_task"] = heartbeats
        if kind in history:
            entry["history"] = history[kind]
            entry["billable_actions_per_task"] = history[kind]["billable_events"] + entry.get(
                "heartbeats_per_task", 0
            )
        if kind in parked:
            entry["parked"] = parked[kind]
        report["engines"][kind] = entry
    report["ratios"] = _ratios(report["engines"])
    if profile:
        report["profile"] = profile
    return report


async def _profiled(child: Child, n: int) -> dict[str, Any]:
    """py-spy the fastmcp-temporal engine while it runs a burst; top frames by own and total time."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw = RESULTS / "profile-temporal.txt"
    pid = child.ready["pid"]
    recorder = await asyncio.create_subprocess_exec(
        spy,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "200",
        "-o",
        str(raw),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)
    burst = await child.call("burst", n=n)
    recorder.send_signal(2)
    await recorder.wait()
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    count = 0
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, weight = line.rpartition(" ")
        frames = stack.split(";")
        samples_ = int(weight)
        count += samples_
        own[_frame(frames[-1])] += samples_
        for frame in {_frame(f) for f in frames}:
            total[frame] += samples_
    top = lambda c: [(f, round(100 * n / max(count, 1), 1)) for f, n in c.most_common(25)]  # noqa: E731
    return {"burst": burst, "samples": count, "top_own_pct": top(own), "top_total_pct": top(total)}


def _frame(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, _line = where.rpartition(":")
    marker = "site-packages/"
    path = path.split(marker, 1)[1] if marker in path else path.rsplit("/", 2)[-1]
    return f"{name} ({path})"


def _ratios(engines: dict[str, Any]) -> dict[str, Any]:
    metrics = ("end_to_end", "submit", "get_running", "get_finished", "cancel")
    ratios: dict[str, Any] = {}
    for base in ("bare", "tasks-memory", "temporal-baseline"):
        if base not in engines or "temporal" not in engines:
            continue
        ours, ref = engines["temporal"], engines[base]
        entry = {f"{m}_p50": round(ours[m]["p50"] / ref[m]["p50"], 2) for m in metrics if m in ref}
        entry["throughput"] = round(ours["throughput_tasks_per_s"] / ref["throughput_tasks_per_s"], 2)
        if base == "bare":  # the lowest ratio a request through the MCP stack could reach
            entry["submit_floor_p50"] = _over(
                ref["submit"]["p50"] + ours["mcp_call_floor"]["p50"], ref["submit"]
            )
            entry["get_running_floor_p50"] = _over(
                ref["get_running"]["p50"] + ours["get_finished"]["p50"], ref["get_running"]
            )
        if base == "bare" and "end_to_end_local_leg" in ours:  # a leg="local" tool against the bare default
            local_p50 = ours["end_to_end_local_leg"]["p50"]
            entry["end_to_end_local_leg_p50"] = round(local_p50 / ref["end_to_end"]["p50"], 2)
            entry["throughput_local_leg"] = round(
                ours["throughput_local_leg_tasks_per_s"] / ref["throughput_tasks_per_s"], 2
            )
        ratios[f"temporal/{base}"] = entry
    if "history" in engines.get("bare", {}) and "history" in engines.get("temporal", {}):
        ratios["history_events_extra"] = (
            engines["temporal"]["history"]["events"] - engines["bare"]["history"]["events"]
        )
    return ratios


def _over(value: float, base: dict[str, float]) -> float:
    return round(value / base["p50"], 2)


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = list(report["engines"])
    labels = [LABELS[e] for e in engines]
    colors = {
        "tasks-memory": "#9ecae1",
        "tasks-redis": "#d62728",
        "bare": "#7f7f7f",
        "temporal": "#2ca02c",
        "temporal-baseline": "#98df8a",
    }
    panels = [
        ("end_to_end", "end to end, ms"),
        ("submit", "submit, ms"),
        ("get_running", "tasks/get (running), ms"),
        ("cancel", "cancel -> CancelledError, ms"),
        ("throughput_tasks_per_s", "throughput, tasks/s (higher is better)"),
        ("parked", "worker MB per 1,000 parked tasks"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    for ax, (metric, title) in zip(axes.flat, panels):
        heights, errors = [], []
        for engine in engines:
            value = report["engines"][engine].get(metric)
            if metric == "parked":
                heights.append(value["mb_per_1000"] if value else 0), errors.append(0)
            elif isinstance(value, dict):
                heights.append(value["p50"]), errors.append(value["p95"] - value["p50"])
            else:
                heights.append(value or 0), errors.append(0)
        spread = [[0] * len(errors), errors] if any(errors) else None
        ax.bar(range(len(engines)), heights, yerr=spread, color=[colors[e] for e in engines], capsize=3)
        ax.set_xticks(range(len(engines)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(
            title + ("" if metric in ("throughput_tasks_per_s", "parked") else " (p50, bar to p95)"),
            fontsize=9,
        )
    fig.suptitle(
        "fastmcp-temporal vs fastmcp-tasks vs bare Temporal, one run, one sqlite-WAL dev server", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(report: dict[str, Any]) -> None:
    engines = list(report["engines"])
    rows = [
        ("end to end", "end_to_end"),
        ("submit", "submit"),
        ("tasks/get running (bare: describe)", "get_running"),
        ("tasks/get finished", "get_finished"),
        ("cancel -> CancelledError", "cancel"),
        ("workflow duration in Temporal", "workflow_duration"),
        ("end to end, tool as a local activity", "end_to_end_local_activity"),
        ("end to end, `leg=\"local\"` tool", "end_to_end_local_leg"),
        ("MCP floor: a tools/call of a plain tool", "mcp_call_floor"),
    ]
    print("| p50 / p95 ms | " + " | ".join(LABELS[e] for e in engines) + " |")
    print("| --- |" + " --- |" * len(engines))
    for label, metric in rows:
        cells = []
        for e in engines:
            v = report["engines"][e].get(metric)
            cells.append(f"{v['p50']:.1f} / {v['p95']:.1f}" if v else "—")
        print(f"| {label} | " + " | ".join(cells) + " |")
    extra = [
        ("throughput (tasks/s)", lambda v: f"{v['throughput_tasks_per_s']:.0f}"),
        (
            "throughput, `leg=\"local\"` tool (tasks/s)",
            lambda v: "—" if (rate := v.get("throughput_local_leg_tasks_per_s")) is None else f"{rate:.0f}",
        ),
        (
            "MCP tasks/get requests per task (burst)",
            lambda v: "—" if (reads := v.get("task_reads_per_task")) is None else f"{reads:.1f}",
        ),
        ("history events per trivial task", lambda v: str(v["history"]["events"]) if "history" in v else "—"),
        (
            "history events, local activity / `leg=\"local\"` tool",
            lambda v: _local_events(v.get("history", {})),
        ),
        (
            "billable Actions per trivial task",
            lambda v: f"{v['billable_actions_per_task']:g}" if "history" in v else "—",
        ),
        (
            "Temporal RPCs per task (burst)",
            lambda v: (
                f"{sum(v['temporal_rpcs_per_task'].values()):.1f}" if "temporal_rpcs_per_task" in v else "—"
            ),
        ),
        (
            f"worker MB per 1,000 parked ({report['settings']['parked']} parked)",
            lambda v: f"{v['parked']['mb_per_1000']:.1f}" if "parked" in v else "—",
        ),
    ]
    for label, fmt in extra:
        print(f"| {label} | " + " | ".join(fmt(report["engines"][e]) for e in engines) + " |")
    print(json.dumps(report["ratios"], indent=1))
    for note in report["notes"]:
        print("note:", note)


def _local_events(history: dict[str, Any]) -> str:
    local = history.get("local_leg") or history.get("local_activity")
    return f"{local['events']} ({local['billable_events']} billable)" if local else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 pass x 10 rounds, burst 50, 200 parked")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument(
        "--parked", type=int, default=1000, help="tasks parked on input per engine (try 10000)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the fastmcp-temporal engine in an extra burst"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=ENGINES,
        default=list(ENGINES),
        help="run only these engines (default: all available)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run the fastmcp_temporal package found in this folder (e.g. an older checkout), for A/B",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "compare.json")
    parser.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child_main(args.child, args.address, args.redis_url))
        return
    if args.quick:
        args.passes, args.rounds, args.burst, args.parked = 1, 10, 50, min(args.parked, 200)
    report = asyncio.run(parent_main(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    try:
        chart(report, args.out.with_suffix(".png"))
    except ImportError:
        print('matplotlib missing: pip install -e ".[bench]" for the chart')
    print_table(report)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
