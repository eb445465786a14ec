"""How fast a killed worker's task recovers: kill -9 -> retried attempt starts -> task completes.

    .venv/bin/python bench/recovery.py [--rounds 10]

Starts its own file-backed dev server (sqlite, WAL) and two `fastmcp-temporal worker
tests/fault_app.py` processes (heartbeat timeout 2 s). Each round submits a resumable
`count` task through an API-only FastMCP server and `fastmcp.Client`, kills the worker
running it once the tool is near its end, and measures from the kill to the retried
attempt's first line in the tool body and to Temporal closing the workflow. The retried
attempt resumes from its checkpoint, so about 0.2 s of tool work remains after it starts.
The killed worker is replaced before the next round. Target: heartbeat timeout + 3 s.

Also the harness `bench/cancel_latency.py` uses. Everything started is stopped in `finally`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from fastmcp_temporal.devserver import start_dev_server
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id

REPO = Path(__file__).resolve().parent.parent
FAULT_APP = REPO / "tests" / "fault_app.py"
CLI = Path(sys.executable).parent / "fastmcp-temporal"
TASK_QUEUE = "bench"


def _load_fault_app() -> ModuleType:
    """tests/fault_app.py, the app the workers run, loaded from its file: no folder of the tests goes
    on sys.path, so none of their modules can shadow one of the benchmark's."""
    spec = importlib.util.spec_from_file_location("fault_app", FAULT_APP)
    assert spec is not None and spec.loader is not None, FAULT_APP
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fault_app = _load_fault_app()


class Harness:
    """A dev server, worker processes on fault_app, and the attempt log they write.

    Starting the server and workers blocks: async callers run them in a thread.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log_dir = workdir / "attempts"
        self.log_dir.mkdir()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.server = start_dev_server(db_path=workdir / "temporal.db", ui=False)

    def start_worker(self) -> subprocess.Popen[bytes]:
        output = self.workdir / f"worker-{len(self.workers)}.log"
        command = [str(CLI), "worker", str(FAULT_APP)]
        command += ["--address", self.server.address, "--task-queue", TASK_QUEUE, "--concurrency", "20"]
        with output.open("wb") as sink:
            worker = subprocess.Popen(
                command,
                env={**os.environ, "FAULT_LOG_DIR": str(self.log_dir)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.workers.append(worker)
        deadline = time.monotonic() + 60
        while "polling task queue" not in output.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{output.read_text(errors='replace')}")
            time.sleep(0.05)
        return worker

    def worker_with_pid(self, pid: int) -> subprocess.Popen[bytes]:
        return next(w for w in self.workers if w.pid == pid)

    @staticmethod
    def kill(worker: subprocess.Popen[bytes]) -> None:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()

    def events(self, event: str, key: str) -> list[dict[str, Any]]:
        found = []
        for path in self.log_dir.glob("*.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry["event"] == event and entry["key"] == key:
                    found.append(entry)
        return sorted(found, key=lambda e: e["t"])

    async def wait_for(self, event: str, key: str, count: int = 1, timeout: float = 60) -> list[dict]:
        with anyio.fail_after(timeout):
            while len(found := self.events(event, key)) < count:
                await anyio.sleep(0.01)
        return found

    def close(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in self.workers:
            try:
                worker.wait(5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        self.server.stop()


@asynccontextmanager
async def harness(workers: int) -> AsyncIterator[tuple[Harness, Client]]:
    """A harness with `workers` worker processes, and a client of an API-only server."""
    with tempfile.TemporaryDirectory(prefix="fastmcp-temporal-bench-") as workdir:
        running = await anyio.to_thread.run_sync(Harness, Path(workdir))
        try:
            for _ in range(workers):
                await anyio.to_thread.run_sync(running.start_worker)
            api = fault_app.build_server(address=running.server.address, task_queue=TASK_QUEUE, worker=False)
            async with Client(api) as client:
                yield running, client
        finally:
            running.close()


def report(name: str, seconds: list[float], target: str) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    p50 = statistics.median(ms)
    print(f"{name:<42} n={len(ms):<3} p50 {p50:7.0f} ms   p95 {p95:7.0f} ms   (target {target})")


async def main(rounds: int) -> None:
    to_retry, to_done = [], []
    async with harness(workers=2) as (bench, client):
        temporal = await TemporalClient.connect(bench.server.address)
        for round_ in range(rounds):
            key = f"round-{round_}"
            task = await call_tool_task(client, "count", {"key": key, "to": 30, "step": 0.1})
            with anyio.fail_after(60):
                while max((e["done"] for e in bench.events("step", key)), default=0) < 28:
                    await anyio.sleep(0.01)
            (first,) = bench.events("start", key)
            victim = bench.worker_with_pid(first["pid"])
            killed_at = time.time()
            bench.kill(victim)
            retry = (await bench.wait_for("start", key, count=2))[-1]
            final = await task.wait(timeout=60)
            assert final.status == "completed", final
            handle = temporal.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id))
            closed = (await handle.describe()).close_time
            assert closed is not None
            to_retry.append(retry["t"] - killed_at)
            to_done.append(closed.timestamp() - killed_at)
            print(
                f"round {round_}: retry +{to_retry[-1]:.2f}s (resumed from {retry['resumed_from']}), "
                f"completed +{to_done[-1]:.2f}s"
            )
            await anyio.to_thread.run_sync(bench.start_worker)
    hb = fault_app.HEARTBEAT_TIMEOUT.total_seconds()
    report("kill -> retried attempt starts", to_retry, f"<= {hb + 3:g} s")
    report("kill -> task completed", to_done, f"<= {hb + 3:g} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args().rounds)
