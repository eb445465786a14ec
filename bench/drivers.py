"""The client side of the `compare` scenario: one driver process per engine, told what to do on stdin.

A driver runs rounds (latencies), bursts (throughput, and what each process of the engine
spent on them), histories and parking for one engine. In the same-process shape the
engine runs inside the driver (an in-memory MCP transport, or a temporalio worker); in
production's shape the driver is only the client, and the engine's API server and worker
are other processes, reached over streamable HTTP (MCP) or through Temporal (bare).
`bare-mcp` is bare Temporal behind two plain MCP tools: its driver is an MCP client, and
in the same-process shape it runs the bare worker too.
The parent names those processes by role (`server`, `worker`, `client`, …) with each
burst, and the driver reads their CPU time right before and after it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastmcp_tasks.client import call_tool_task  # before any client exists: see McpDriver
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    CancelTaskRequestParams,
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
    UpdateTaskRequest,
    UpdateTaskRequestParams,
)
from mcp_types import Result

from bench.billing import billable_actions
from bench.marks import Marks
from bench.metrics import cpu_seconds, rss_mb, temporal_calls

if TYPE_CHECKING:
    from fastmcp import Client

Pids = dict[str, list[int]]
"""Processes of one engine by role; a role may span several (a dev server and its watchdog)."""


class McpDriver:
    """fastmcp-tasks or fastmcp-temporal behind an unmodified `fastmcp.Client`.

    `fastmcp_tasks.client` is imported with this module: importing it registers the tasks
    extension every `fastmcp.Client` created afterwards offers. A client created before
    offers none, and the server then runs a task tool as a plain call in its own process.
    """

    def __init__(self, setup: dict[str, Any]) -> None:
        self.kind: str = setup["kind"]
        self.url: str | None = setup["url"]
        self.address: str = setup["address"]
        self.metrics: list[str] = setup["metrics"]
        self.marks = Marks(Path(setup["marks"]))
        self.temporal: Any = None
        # Each running task's last status read (see `_STATUS_READ_APART`).
        self.status_read_at: dict[int, float] = {}

    async def __aenter__(self) -> McpDriver:
        from fastmcp import Client

        if self.kind.startswith("temporal"):  # reads histories and durations; uncounted
            from temporalio.client import Client as TemporalClient

            self.temporal = await TemporalClient.connect(self.address)
        if self.url is None:
            from bench_server import mcp

            self.client = Client(mcp)
        else:
            self.client = Client(self.url)
        await self.client.__aenter__()
        await self._warm_up()
        return self

    async def _warm_up(self) -> None:
        await self.client.call_tool("trivial", {"n": 0})
        await self._start_running()

    async def __aexit__(self, *exc: object) -> None:
        for running in self.running:
            await running.cancel()
        await self.client.__aexit__(None, None, None)

    async def _start_running(self) -> None:
        self.running_keys = [f"running-{uuid.uuid4().hex}" for _ in range(_RUNNING_READS)]
        self.running = [await self._submit("hold", {"key": key}) for key in self.running_keys]
        for key in self.running_keys:
            await self.marks.wait_started(key)

    async def _submit(self, tool: str, arguments: dict[str, Any]) -> Any:
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
        out["get_finished"] += await _timed_each([task.status] * 3)
        out["get_running"] += await self._status_reads()
        # The floor under tasks/get is "tasks/get finished": answered without calling Temporal.
        await self._mcp_call_floor(out)

        out["cancel"].append(await _cancel_ms(self.marks, lambda key: self._submit("hold", {"key": key})))
        return out

    async def _status_reads(self) -> list[float]:
        """Read each running task not read in the last `_STATUS_READ_APART`; milliseconds of each read."""
        due = [
            n
            for n in range(len(self.running))
            if time.perf_counter() - self.status_read_at.get(n, -1e9) >= _STATUS_READ_APART
        ]
        times = await _timed_each([self.running[n].status for n in due])
        self.status_read_at.update(dict.fromkeys(due, time.perf_counter()))
        return times

    async def _mcp_call_floor(self, out: dict[str, list[float]]) -> None:
        """What a tools/call costs here before an engine does anything: the floor under submit."""
        out["mcp_call_floor"] += await _timed_each([lambda: self.client.call_tool("no_task", {"n": 1})] * 3)

    async def burst(self, n: int, pids: Pids) -> dict[str, Any]:
        async with self._quiet():
            out = await self._burst(n, pids)
            if self.kind == "temporal":
                out["local_leg_tasks_per_s"] = (await self._burst(n, pids, "trivial_local"))["tasks_per_s"]
            return out

    @contextlib.asynccontextmanager
    async def _quiet(self) -> AsyncIterator[None]:
        """Stop the long-running task while counting, so its heartbeats are not billed to the burst."""
        for running, key in zip(self.running, self.running_keys):
            await running.cancel()
            await self.marks.wait_cancelled(key)
            await running.wait(timeout=30)
        try:
            yield
        finally:
            await self._start_running()

    async def _burst(self, n: int, pids: Pids, tool: str = "trivial") -> dict[str, Any]:
        reads_before = await self._reads()
        async with costs(self.metrics, pids, n) as out:
            await asyncio.gather(*(self.client.call_tool(tool, {"n": i}) for i in range(n)))
        out["task_reads_per_task"] = round((await self._reads() - reads_before) / n, 1)
        return out

    async def _reads(self) -> int:
        """`tasks/get` requests the server has answered so far."""
        counts = (await self.client.call_tool("bench_requests", {})).structured_content or {}
        return int(counts.get("tasks/get", 0))

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

    async def park(self, n: int, pids: Pids) -> dict[str, Any]:
        before = await _settled_rss(pids)
        limit = asyncio.Semaphore(50)
        parking = (bounded(limit, retried(lambda: self._submit("park", {}))) for _ in range(n))
        pending = list(await asyncio.gather(*parking))
        while pending:
            await asyncio.sleep(0.5)
            statuses = await bounded_all([t.status for t in pending])
            # a task that failed instead of parking (an overloaded worker) is settled too
            pending = [t for t, s in zip(pending, statuses) if getattr(s, "status", "working") == "working"]
        return _parked_memory(n, before, await _settled_rss(pids))


class BareMcpDriver(McpDriver):
    """Bare Temporal behind two plain MCP tools, `bare_start` then `bare_result`: the MCP floor.

    The least any MCP tasks engine on Temporal could cost: bare Temporal plus one request
    to submit and one that returns the result. No task reads, cancels or parking here.
    """

    def __init__(self, setup: dict[str, Any]) -> None:
        super().__init__(setup)
        self.queue: str = setup["task_queue"]
        self.in_process_worker: bool = setup["worker"]
        self.running: list[Any] = []
        self.run_task: asyncio.Task[None] | None = None

    async def _warm_up(self) -> None:
        if self.in_process_worker:  # on the server's own client, as the bare engine shares one
            from bare_engine import bare_worker
            from bench_server import bare_client

            self.worker = bare_worker(await bare_client(), self.queue, self.marks)
            self.run_task = asyncio.create_task(self.worker.run())
        await self._run_trivial(0)

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__(*exc)
        if self.run_task is not None:
            await self.worker.shutdown()
            await self.run_task

    async def _start(self, n: int) -> str:
        return (await self.client.call_tool("bare_start", {"n": n})).data

    async def _result(self, workflow_id: str) -> None:
        await self.client.call_tool("bare_result", {"workflow_id": workflow_id})

    async def _run_trivial(self, n: int, status_read: bool = False) -> None:
        workflow_id = await self._start(n)
        if status_read:  # the FastMCP client's first tasks/get, sent at once, answered without Temporal
            await self.client.call_tool("bare_status", {})
        await self._result(workflow_id)

    async def round(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = collections.defaultdict(list)
        t0 = time.perf_counter()
        await self._run_trivial(1)
        out["end_to_end"].append(_ms(t0))

        t0 = time.perf_counter()
        workflow_id = await self._start(1)
        out["submit"].append(_ms(t0))
        await self._result(workflow_id)
        await self._mcp_call_floor(out)
        return out

    async def burst(self, n: int, pids: Pids) -> dict[str, Any]:
        async with costs(self.metrics, pids, n) as out:
            await asyncio.gather(*(self._run_trivial(i) for i in range(n)))
        async with costs(self.metrics, pids, n) as with_status_read:
            await asyncio.gather(*(self._run_trivial(i, status_read=True) for i in range(n)))
        out["status_read_tasks_per_s"] = with_status_read["tasks_per_s"]
        return out

    async def history(self) -> dict[str, Any]:
        return {}


class BareDriver:
    """A plain temporalio client (and, in the same-process shape, its worker): the floor."""

    def __init__(self, setup: dict[str, Any]) -> None:
        self.address: str = setup["address"]
        self.queue: str = setup["task_queue"]
        self.own_metrics: str = setup["own_metrics"]
        self.metrics: list[str] = setup["metrics"]
        self.marks = Marks(Path(setup["marks"]))
        self.in_process_worker: bool = setup["worker"]

    async def __aenter__(self) -> BareDriver:
        from bare_engine import bare_worker, metrics_runtime
        from temporalio.client import Client

        self.client = await Client.connect(self.address, runtime=metrics_runtime(self.own_metrics))
        self.run_task: asyncio.Task[None] | None = None
        if self.in_process_worker:
            self.worker = bare_worker(self.client, self.queue, self.marks)
            self.run_task = asyncio.create_task(self.worker.run())
        await (await self._start_async("BareTrivial", 0)).result()  # warm up
        await self._start_running()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for running in self.running:
            await running.cancel()
        if self.run_task is not None:
            await self.worker.shutdown()
            await self.run_task

    async def _start_running(self) -> None:
        self.running_keys = [f"running-{uuid.uuid4().hex}" for _ in range(_RUNNING_READS)]
        self.running = [await self._start_async("BareHold", key) for key in self.running_keys]
        for key in self.running_keys:
            await self.marks.wait_started(key)

    async def _start_async(self, workflow: str, arg: Any) -> Any:
        from bare_engine import start

        return await start(self.client, self.queue, workflow, arg)

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
        out["get_finished"] += await _timed_each([handle.describe] * 3)
        out["get_running"] += await _timed_each([running.describe for running in self.running])

        out["cancel"].append(await _cancel_ms(self.marks, lambda key: self._start_async("BareHold", key)))
        return out

    async def burst(self, n: int, pids: Pids) -> dict[str, Any]:
        for running, key in zip(self.running, self.running_keys):
            await running.cancel()
            await self.marks.wait_cancelled(key)
        try:
            async with costs(self.metrics, pids, n) as out:
                await asyncio.gather(*(self._run_trivial(i) for i in range(n)))
            return out
        finally:
            await self._start_running()

    async def _run_trivial(self, n: int) -> None:
        await (await self._start_async("BareTrivial", n)).result()

    async def history(self) -> dict[str, Any]:
        handle = await self._start_async("BareTrivial", 2)
        await handle.result()
        local = await self._start_async("BareTrivialLocal", 2)
        await local.result()
        return {
            **await _history_counts(self.client, handle.id),
            "local_activity": await _history_counts(self.client, local.id),
        }

    async def park(self, n: int, pids: Pids) -> dict[str, Any]:
        before = await _settled_rss(pids)
        limit = asyncio.Semaphore(50)
        pending = list(
            await asyncio.gather(*(bounded(limit, self._start_async("BareParked", i)) for i in range(n)))
        )
        while pending:
            await asyncio.sleep(0.5)
            descriptions = await bounded_all([h.describe for h in pending])
            pending = [h for h, d in zip(pending, descriptions) if isinstance(d, Exception) or not _parked(d)]
        return _parked_memory(n, before, await _settled_rss(pids))


async def _cancel_ms(marks: Marks, start_hold: Callable[[str], Awaitable[Any]]) -> float:
    """Milliseconds from asking a running hold to cancel until its body sees `CancelledError`."""
    key = uuid.uuid4().hex
    held = await start_hold(key)
    await marks.wait_started(key)
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    await held.cancel()
    return (await marks.wait_cancelled(key) - t0) * 1000


@contextlib.asynccontextmanager
async def costs(metrics: list[str], pids: Pids, n: int) -> AsyncIterator[dict[str, Any]]:
    """Throughput of the block, and per task: CPU ms of each process and Temporal calls.

    Metrics are scraped outside the timed and CPU-counted block.
    """
    out: dict[str, Any] = {}
    calls_before = await temporal_calls(metrics)
    cpu_before = {role: cpu_seconds(role_pids) for role, role_pids in pids.items()}
    t0 = time.perf_counter()
    yield out
    elapsed = time.perf_counter() - t0
    cpu_after = {role: cpu_seconds(role_pids) for role, role_pids in pids.items()}
    out["tasks_per_s"] = n / elapsed
    out["cpu_ms_per_task"] = {
        role: round((cpu_after[role] - cpu_before[role]) * 1000 / n, 2) for role in pids
    }
    if metrics:
        out["rpcs_per_task"] = _delta(await temporal_calls(metrics), calls_before, n)


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


async def _settled_rss(pids: Pids) -> dict[str, float]:
    """Resident MB per role once this process has collected its garbage and the rest settled."""
    gc.collect()
    await asyncio.sleep(1)
    gc.collect()
    return {role: rss_mb(role_pids) for role, role_pids in pids.items()}


def _parked_memory(n: int, before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    return {
        "parked": n,
        "rss_before_mb": before,
        "rss_after_mb": after,
        "mb_per_1000": {role: round((after[role] - before[role]) * 1000 / n, 1) for role in before},
    }


def _parked(description: Any) -> bool:
    raw = description.raw_description
    return not raw.pending_activities and not raw.HasField("pending_workflow_task")


async def bounded(limit: asyncio.Semaphore, awaitable: Any) -> Any:
    async with limit:
        return await awaitable


async def retried(call: Callable[[], Awaitable[Any]], attempts: int = 5) -> Any:
    """`call()`, made again 1, 2, ... s after it fails (an overloaded server refuses now and then)."""
    for attempt in range(attempts):
        try:
            return await call()
        except Exception:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(1 + attempt)


async def bounded_all(work: list[Callable[[], Awaitable[Any]]], at_once: int = 50) -> list[Any]:
    """Run every piece of `work`, `at_once` at a time; exceptions come back as results."""
    limit = asyncio.Semaphore(at_once)
    return await asyncio.gather(*(bounded(limit, piece()) for piece in work), return_exceptions=True)


async def tasks_get(client: Client, task_id: str) -> ClientGetTaskResult:
    """A raw `tasks/get` of `task_id` through `client` (one read, none of the client's own polling)."""
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, ClientGetTaskResult)


async def tasks_cancel(client: Client, task_id: str) -> None:
    """A raw `tasks/cancel` of `task_id` through `client`; returns once the server acknowledges it."""
    request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id))
    await client.session.send_request(request, Result)


async def tasks_update(client: Client, task_id: str, responses: dict[str, Any]) -> None:
    """A raw `tasks/update` of `task_id` through `client`, with `responses` by question."""
    params = UpdateTaskRequestParams(task_id=task_id, input_responses=responses)
    await client.session.send_request(UpdateTaskRequest(params=params), Result)


def accept_every_ask(status: ClientGetTaskResult) -> dict[str, Any]:
    """Responses accepting, empty, every question a read shows (the server names them, not the tool)."""
    return {key: {"action": "accept", "content": {}} for key in status.input_requests or {}}


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


# Running tasks read as status reads, not a client waiting on one task: a tasks/get soon after
# the server's last answer of the same task is a poll loop's and waits for a change (see
# `fastmcp_temporal.server._holds`), so the MCP driver reads each at most once per `_STATUS_READ_APART`.
_RUNNING_READS = 3
_STATUS_READ_APART = 2.0


async def _timed_each(reads: list[Callable[[], Awaitable[Any]]]) -> list[float]:
    """Milliseconds of each read, in a row."""
    times = []
    for read in reads:
        t0 = time.perf_counter()
        await read()
        times.append(_ms(t0))
    return times


async def child_main(setup: dict[str, Any]) -> None:
    """Drive one engine: announce readiness, then answer one JSON command per stdin line.

    Args:
        setup: the engine (`kind`), where it is, and where its processes report.
    """
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    drivers = {"bare": BareDriver, "bare-mcp": BareMcpDriver}
    driver = drivers.get(setup["kind"], McpDriver)(setup)
    async with driver:
        _reply({"ready": True, "pid": os.getpid()})
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            op = command.pop("op")
            if op == "quit":
                _reply({})
                return
            _reply(await getattr(driver, op)(**command))


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(payload) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":  # started by `deploy.Driver.start`, its setup as the one argument
    asyncio.run(child_main(json.loads(sys.argv[1])))
