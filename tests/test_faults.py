"""Durability with real processes and real `kill -9`: what Temporal buys over the reference.

Proves, with worker processes started by `fastmcp-temporal worker tests/fault_app.py`
and tasks driven through a real `fastmcp.Client`, that:

1. a worker killed mid-tool has its leg retried by another worker, which resumes from the
   tool's last checkpoint, while `tasks/get` keeps answering during the outage;
2. an MCP server process (HTTP, API + embedded worker) killed and restarted on the same
   port still answers for earlier task ids and finishes the task that was running;
3. a Temporal dev server (sqlite) killed and restarted mid-run loses no task: workers
   reconnect by themselves and every task completes;
4. 500 tasks over 3 worker processes, with workers killed and replaced along the way, all
   complete with the right result, with work done by several workers, and every tool body
   ran once, or again only because its worker was killed under it;
5. a tool that blocks its worker's event loop past the heartbeat timeout, while Temporal
   starts a retry on another worker, delivers its own result once and the retry is cancelled.

Executions are counted from the lines each tool body writes when it runs, not from what
the client receives.

Every process is started here and stopped by PID at teardown, failed test or not.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks.client import ToolTask, call_tool_task
from temporalio.client import Client as TemporalClient

import fault_app
from fastmcp_temporal.devserver import DevServer, free_port, start_dev_server
from helpers.processes import PROCESS_DEADLINE, AttemptLog, Processes, answering_client
from helpers.temporal import checkpoint_recorded, task_handle
from helpers.waits import eventually

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


# --- helpers -----------------------------------------------------------------


class RestartableTemporal:
    """A file-backed dev server that can be killed -9 and restarted on the same port and db."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.port = free_port()
        self.server: DevServer = self._start()

    @property
    def address(self) -> str:
        return self.server.address

    def _start(self) -> DevServer:
        return start_dev_server(db_path=self.db_path, port=self.port, ui=False)

    def kill_and_restart(self) -> None:
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.stop()  # reaps the dead process and anything left in its group
        self.server = self._start()


@pytest.fixture
def own_temporal(tmp_path: Path) -> Iterator[RestartableTemporal]:
    temporal = RestartableTemporal(tmp_path / "temporal" / "temporal.db")
    try:
        yield temporal
    finally:
        temporal.server.stop()


@asynccontextmanager
async def api_client(address: str, task_queue: str, **options: Any) -> AsyncIterator[Client]:
    """A client of an in-process, API-only twin of fault_app (it runs no tool itself)."""
    server = fault_app.build_server(address=address, task_queue=task_queue, worker=False, **options)
    async with Client(server) as client:
        yield client


# --- 1. a worker dies mid-tool -------------------------------------------------


async def test_killed_worker_leg_resumes_on_another_worker_from_its_checkpoint(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    workers = [processes.worker(temporal_server.address, task_queue) for _ in range(2)]
    await processes.polling(*workers)
    async with api_client(temporal_server.address, task_queue) as client:
        task = await call_tool_task(client, "count", {"key": "job", "to": 16})
        await eventually(
            lambda: attempts.progress("job") >= 3,
            timeout=PROCESS_DEADLINE,
            what="the tool to checkpoint",
        )
        await checkpoint_recorded(task_handle(await TemporalClient.connect(temporal_server.address), task.task_id))
        (first,) = attempts.starts("job")
        victim = next(w for w in workers if w.pid == first["pid"])
        processes.kill(victim)

        answered_during_outage = []
        with anyio.fail_after(PROCESS_DEADLINE):
            while (current := await task.status()).status == "working":
                if len(attempts.starts("job")) == 1:
                    answered_during_outage.append(current.status)
                await anyio.sleep(0.1)
        assert current.status == "completed"
        assert answered_during_outage, "tasks/get was never answered while no attempt ran"
        assert (await task.result()).structured_content == {"key": "job", "counted": 16}

    killed_run, retry = attempts.starts("job")
    assert killed_run["pid"] == victim.pid
    assert retry["attempt"] >= 2
    assert retry["pid"] != victim.pid
    assert retry["resumed_from"] is not None and retry["resumed_from"] >= 1


# --- 2. the MCP server process dies ------------------------------------------


async def test_killed_mcp_server_restarted_on_its_port_keeps_its_tasks(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = processes.http_server(temporal_server.address, task_queue, port)
    async with answering_client(url, server, processes) as client:
        finished = await call_tool_task(client, "square", {"n": 7, "work": 0})
        assert (await finished.result()).data == 49
        running = await call_tool_task(client, "count", {"key": "running", "to": 16})
        await eventually(
            lambda: attempts.progress("running") >= 3,
            timeout=PROCESS_DEADLINE,
            what="the tool to checkpoint",
        )
        await checkpoint_recorded(task_handle(await TemporalClient.connect(temporal_server.address), running.task_id))

    processes.kill(server)
    restarted = processes.http_server(temporal_server.address, task_queue, port)
    async with answering_client(url, restarted, processes) as client:
        earlier = ToolTask(client, "square", finished.create_result)
        assert (await earlier.status()).status == "completed"
        assert (await earlier.result()).data == 49
        resumed = ToolTask(client, "count", running.create_result)
        with anyio.fail_after(PROCESS_DEADLINE):
            result = await resumed.result()
        assert result.structured_content == {"key": "running", "counted": 16}

    killed_run, retry = attempts.starts("running")
    assert killed_run["pid"] == server.pid
    assert retry["pid"] == restarted.pid
    assert retry["resumed_from"] is not None


# --- 3. Temporal itself dies --------------------------------------------------


async def test_temporal_killed_and_restarted_mid_run_loses_no_task(
    own_temporal: RestartableTemporal, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    workers = [processes.worker(own_temporal.address, task_queue) for _ in range(2)]
    await processes.polling(*workers)
    keys = [f"job-{i}" for i in range(8)]
    async with api_client(own_temporal.address, task_queue) as client:
        tasks = {key: await call_tool_task(client, "count", {"key": key, "to": 12}) for key in keys}
        await eventually(
            lambda: all(attempts.progress(key) >= 2 for key in keys),
            timeout=PROCESS_DEADLINE,
            what="every tool to run",
        )

        await anyio.to_thread.run_sync(own_temporal.kill_and_restart)

        with anyio.fail_after(PROCESS_DEADLINE):
            results = {key: (await task.result()).structured_content for key, task in tasks.items()}
            late = await call_tool_task(client, "square", {"n": 12, "work": 0})
            assert (await late.result()).data == 144
    assert results == {key: {"key": key, "counted": 12} for key in keys}
    assert all(w.poll() is None for w in workers), "a worker died instead of reconnecting"


# --- 4. scale, with workers dying ----------------------------------------------


@pytest.mark.alone
async def test_500_tasks_over_3_workers_with_kills_all_complete_once(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    total, kills = 500, 3
    chooser = random.Random(5)
    workers = [processes.worker(temporal_server.address, task_queue) for _ in range(3)]
    await processes.polling(*workers)
    killed: list[int] = []
    delivered: dict[str, list[tuple[int, Any]]] = {}

    async def kill_and_replace_workers() -> None:
        for round_ in range(1, kills + 1):
            threshold = round_ * total // (kills + 1)
            await eventually(
                lambda at_least=threshold: len(attempts.events("start")) >= at_least,
                timeout=150,
                what=f"{threshold} starts",
            )
            victim = chooser.choice(workers)
            processes.kill(victim)
            killed.append(victim.pid)
            workers[workers.index(victim)] = processes.worker(temporal_server.address, task_queue)

    # Under a burst of 500 on a shared 2-core machine a worker may start a leg seconds after
    # Temporal handed it over; a 2 s heartbeat timeout would then retry live legs elsewhere.
    # Only the kills may cause a second run here.
    async with api_client(temporal_server.address, task_queue, heartbeat_timeout=timedelta(seconds=10)) as client:
        submitted: dict[int, ToolTask] = {}
        limit = anyio.CapacityLimiter(40)

        async def submit(n: int) -> None:
            async with limit:
                submitted[n] = await call_tool_task(client, "square", {"n": n})

        async def collect(n: int, task: ToolTask) -> None:
            async with limit:
                result = await task.result()
            delivered.setdefault(task.task_id, []).append((n, result.data))

        with anyio.fail_after(150):
            async with anyio.create_task_group() as group:
                group.start_soon(kill_and_replace_workers)
                async with anyio.create_task_group() as submitting:
                    for n in range(total):
                        submitting.start_soon(submit, n)
                for n, task in submitted.items():
                    group.start_soon(collect, n, task)

    assert len(killed) == kills
    assert len(delivered) == total
    assert all(len(results) == 1 for results in delivered.values())
    assert sorted(r for (r,) in delivered.values()) == [(n, n * n) for n in range(total)]
    ran_on = {e["pid"] for e in attempts.events("start")}
    assert len(ran_on) > 1
    assert {int(e["key"]) for e in attempts.events("start")} == set(range(total))
    for n in range(total):
        runs = attempts.starts(str(n))
        rerun_after_a_live_run = [run for run in runs[:-1] if run["pid"] not in killed]
        assert not rerun_after_a_live_run, f"task {n}'s body ran again after a run on a live worker: {runs}"


# --- 5. a tool blocks its worker's event loop ------------------------------------


async def test_a_leg_blocked_past_its_heartbeat_timeout_delivers_its_own_result_once(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog
) -> None:
    # One slot per worker: while the first worker's loop is blocked, Temporal's retry of
    # the leg can only start on the second worker, which runs the body again.
    workers = [processes.worker(temporal_server.address, task_queue, concurrency=1) for _ in range(2)]
    await processes.polling(*workers)
    async with api_client(temporal_server.address, task_queue) as client:
        task = await call_tool_task(client, "stall", {"key": "stall", "seconds": 6})
        with anyio.fail_after(PROCESS_DEADLINE):
            result = await task.result()

    first, *retries = attempts.starts("stall")
    assert first["first"] is True
    assert result.structured_content == {"pid": first["pid"], "first": True}
    assert len(retries) <= 1, "the body ran more than once besides the blocked run"
    if retries:
        assert retries[0]["pid"] != first["pid"]
        await eventually(
            lambda: bool(attempts.events("cancelled", "stall")),
            timeout=PROCESS_DEADLINE,
            what="the retry to be cancelled",
        )
    assert [e["pid"] for e in attempts.events("finish", "stall")] == [first["pid"]]
