"""Worker and server processes for the fault tests, and the log of what their tools ran.

`Processes` starts `fastmcp-temporal worker tests/fault_app.py` workers (or of another app) and
`python tests/fault_app.py` HTTP servers with their output in files, kills them with
SIGKILL on request and stops every one it started; `AttemptLog` reads the JSON lines
fault_app's tool bodies write, so executions are counted where they happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client

from helpers.waits import eventually

CLI = Path(sys.executable).parent / "fastmcp-temporal"
APP = Path(__file__).parents[1] / "fault_app.py"
PROCESS_DEADLINE = 60
"""Seconds a process gets to start, answer or finish: longer than an in-process wait's."""


class AttemptLog:
    """The events fault_app's tools append, one JSON line each, in one file per process."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def events(self, event: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:  # a line cut short by kill -9
                    continue
                if (event is None or entry["event"] == event) and (key is None or entry["key"] == key):
                    found.append(entry)
        return found

    def starts(self, key: str) -> list[dict[str, Any]]:
        return sorted(self.events("start", key), key=lambda e: e["t"])

    def progress(self, key: str) -> int:
        return max((e["done"] for e in self.events("step", key)), default=0)


class Processes:
    """Subprocesses of one test: workers and HTTP servers on fault_app, output in files."""

    def __init__(self, directory: Path, log_dir: Path) -> None:
        self.directory = directory
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[bytes]] = []
        self.outputs: dict[int, Path] = {}

    def _start(self, command: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        output = self.directory / f"{name}-{len(self.started)}.log"
        with output.open("wb") as sink:
            process = subprocess.Popen(
                command,
                env={**os.environ, "FAULT_LOG_DIR": str(self.log_dir), **env},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(process)
        self.outputs[process.pid] = output
        return process

    def worker(
        self,
        address: str,
        task_queue: str,
        concurrency: int = 20,
        *,
        app: Path = APP,
        env: dict[str, str] | None = None,
        options: Sequence[str] = (),
    ) -> subprocess.Popen[bytes]:
        """A `fastmcp-temporal worker` process on `app` (fault_app by default), with `env` added and
        the command's other `options`."""
        command = [str(CLI), "worker", str(app), "--address", address, "--task-queue", task_queue]
        return self._start([*command, "--concurrency", str(concurrency), *options], env or {}, "worker")

    def http_server(
        self,
        address: str,
        task_queue: str,
        port: int,
        release: Path | None = None,
        *,
        app: Path = APP,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """An HTTP server with an embedded worker on `app` (fault_app by default), with `env` added;
        `release` runs an unpacked earlier release's code."""
        env = {
            "FASTMCP_TEMPORAL_ADDRESS": address,
            "FASTMCP_TEMPORAL_TASK_QUEUE": task_queue,
            "PORT": str(port),
            **({"PYTHONPATH": str(release)} if release else {}),
            **(env or {}),
        }
        return self._start([sys.executable, str(app)], env, "server")

    def output(self, process: subprocess.Popen[bytes]) -> str:
        return self.outputs[process.pid].read_text(errors="replace")

    async def polling(self, *workers: subprocess.Popen[bytes]) -> None:
        """Wait until each worker says it polls its task queue."""
        for worker in workers:
            await eventually(
                lambda worker=worker: self.alive(worker) and "polling task queue" in self.output(worker),
                timeout=PROCESS_DEADLINE,
                what=f"worker {worker.pid} to poll",
            )

    def alive(self, process: subprocess.Popen[bytes]) -> bool:
        if process.poll() is not None:
            raise AssertionError(f"process {process.pid} exited early:\n{self.output(process)[-3000:]}")
        return True

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
        for process in self.started:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@asynccontextmanager
async def answering_client(
    url: str, server: subprocess.Popen[bytes], processes: Processes
) -> AsyncIterator[Client]:
    """A client of the HTTP server at `url`, once it answers."""

    async def answers() -> bool:
        processes.alive(server)
        try:
            async with Client(url, timeout=5) as probe:
                await probe.list_tools()
        except Exception:
            return False
        return True

    with anyio.fail_after(PROCESS_DEADLINE):
        while not await answers():
            await anyio.sleep(0.2)
    async with Client(url) as client:
        yield client
