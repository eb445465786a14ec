"""Worker processes on `tests/fault_app.py` that a scenario can kill, and the attempt log they write.

`fault_workers(n)` starts the run's dev server and `n` `fastmcp-temporal worker tests/fault_app.py`
processes (heartbeat timeout 2 s, concurrency 20), and gives a `fastmcp.Client` of an API-only
server on the same app; the tool bodies log each start, step and cancel with its wall-clock time,
so a scenario can time from its own action to what a body saw. Everything started is stopped
when the block ends. The `recovery` and `cancel_latency` scenarios stand on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
from fastmcp import Client

from bench.harness import REPO, dev_server
from fastmcp_temporal.devserver import DevServer

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
    """Worker processes on fault_app on the run's dev server, and the attempt log they write.

    Starting the server and workers blocks: async callers run them in a thread.
    """

    def __init__(self, server: DevServer, workdir: Path) -> None:
        self.workdir = workdir
        self.log_dir = workdir / "attempts"
        self.log_dir.mkdir()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.server = server

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


@asynccontextmanager
async def fault_workers(workers: int) -> AsyncIterator[tuple[Harness, Client]]:
    """A harness with `workers` worker processes, and a client of an API-only server."""
    async with dev_server() as temporal:
        running = Harness(temporal.server, temporal.state)
        try:
            for _ in range(workers):
                await anyio.to_thread.run_sync(running.start_worker)
            api = fault_app.build_server(address=running.server.address, task_queue=TASK_QUEUE, worker=False)
            async with Client(api) as client:
                yield running, client
        finally:
            running.close()
