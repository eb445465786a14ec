"""Start and stop one engine's processes in a deployment shape (the `compare` scenario's, and others').

- `same-process`: one driver process holds the MCP client, the server and the worker
  (or the bare client and worker);
- `production`: the driver is only the client; this project runs as an API server
  (`worker=False`, streamable HTTP on 127.0.0.1) plus a `fastmcp-temporal worker` process
  on the same server definition; bare Temporal as the driver's client plus a worker
  process; fastmcp-tasks on Redis as a server plus a Docket worker process
  (`python -m fastmcp_tasks.worker_cli worker`): a fastmcp-tasks server always runs a
  Docket worker of its own, so both execute tasks. fastmcp-tasks on `memory://` cannot
  share tasks across processes: its server process runs them with its embedded worker.
  `bare-mcp` (bare Temporal behind two plain MCP tools) runs as that MCP server plus the
  bare worker process; in the same-process shape its driver runs the bare worker.

Every process binds 127.0.0.1 only and is stopped (SIGTERM, then SIGKILL) with its engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import BENCH, REPO
from fastmcp_temporal.devserver import free_port

SHAPES = ("production", "same-process")
_STOP_TIMEOUT_S = 15
_START_TIMEOUT_S = 60


@dataclass
class Backends:
    """What every engine of a run shares: the Temporal dev server and, if installed, Redis."""

    temporal_address: str
    temporal_pids: list[int]
    redis_url: str | None
    redis_pids: list[int]


@dataclass
class Deployment:
    """One engine in one shape: its driver, its other processes, and their pids by role."""

    kind: str
    shape: str
    driver: Driver
    services: list[asyncio.subprocess.Process] = field(default_factory=list)
    pids: dict[str, list[int]] = field(default_factory=dict)

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Run `op` in the driver and return its answer.

        Args:
            op: a driver method (`round`, `burst`, `history`, `park`).
            params: its arguments; `burst` and `park` get the pids by role here.
        """
        if op in ("burst", "park"):
            params["pids"] = self.pids
        return await self.driver.call(op, **params)

    async def stop(self) -> None:
        """Stop the driver, then every other process, each within a bound."""
        await self.driver.stop()
        for process in self.services:
            await terminate(process)


class Driver:
    """A `drivers.py` process, spoken to with one JSON line per command."""

    def __init__(self, kind: str, process: asyncio.subprocess.Process) -> None:
        self.kind, self.process = kind, process
        self.ready: dict[str, Any] = {}

    @classmethod
    async def start(cls, kind: str, setup: dict[str, Any], env: dict[str, str], log: Path) -> Driver:
        """Start a driver and wait until its engine answers.

        Args:
            kind: the engine.
            setup: what `drivers.child_main` needs.
            env: its environment.
            log: where its stderr goes.
        """
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(BENCH / "drivers.py"),
            json.dumps(setup),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
            env=env,
        )
        driver = cls(kind, process)
        try:
            driver.ready = await asyncio.wait_for(driver._read(), _START_TIMEOUT_S * 2)
        except BaseException:
            await terminate(process)
            raise
        return driver

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Send one command and read its answer."""
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
        """Ask the driver to quit; kill it if it does not within a bound."""
        if self.process.returncode is None:
            try:
                await asyncio.wait_for(self.call("quit"), 30)
                await asyncio.wait_for(self.process.wait(), 30)
            except Exception:
                await terminate(self.process)


async def deploy(
    kind: str, shape: str, backends: Backends, state: Path, log: Path, baseline: Path | None
) -> Deployment:
    """Start engine `kind` in `shape` and return once its driver has run a warm-up task.

    Args:
        kind: `tasks-memory`, `tasks-redis`, `bare`, `bare-mcp`, `temporal` or `temporal-baseline`.
        shape: `production` or `same-process`.
        backends: the run's Temporal dev server and Redis.
        state: a fresh folder for this engine's marks and port files.
        log: where every process's output goes.
        baseline: the folder of another checkout's `fastmcp_temporal`, for `temporal-baseline`.
    """
    state.mkdir(parents=True)
    env = engine_env(kind, backends, state, baseline if kind == "temporal-baseline" else None)
    setup: dict[str, Any] = {
        "kind": kind,
        "address": backends.temporal_address,
        "url": None,
        "marks": str(state / "marks"),
        "task_queue": env.get("FASTMCP_TEMPORAL_TASK_QUEUE", ""),
        "metrics": [],
        "own_metrics": "",
        "worker": shape == "same-process",
    }
    if kind == "bare":  # the bare client's own calls are part of the engine's
        setup["own_metrics"] = endpoint()
        setup["metrics"].append(setup["own_metrics"])
    elif _on_temporal(kind) and shape == "same-process":
        env["FASTMCP_TEMPORAL_METRICS_ADDRESS"] = endpoint()
        setup["metrics"].append(env["FASTMCP_TEMPORAL_METRICS_ADDRESS"])
    services: list[asyncio.subprocess.Process] = []
    pids: dict[str, list[int]] = {}
    try:
        if shape == "production":
            await _start_services(kind, env, setup, state, log, services, pids)
        driver = await Driver.start(kind, setup, env, log)
    except BaseException:
        for process in services:
            await terminate(process)
        raise
    pids["client" if shape == "production" else "engine"] = [driver.process.pid]
    if _on_temporal(kind):
        pids["Temporal dev server"] = backends.temporal_pids
    if kind == "tasks-redis":
        pids["Redis"] = backends.redis_pids
    return Deployment(kind, shape, driver, services, pids)


def engine_env(kind: str, backends: Backends, state: Path, baseline: Path | None) -> dict[str, str]:
    """The environment every process of engine `kind` runs with: its backend, queue and marks folder.

    Args:
        kind: the engine.
        backends: the run's Temporal dev server and Redis.
        state: the engine's folder (marks go in `state / "marks"`).
        baseline: another checkout's `fastmcp_temporal` to import first, or None.
    """
    # Installed packages carry bytecode; without it a workflow sandbox (the bare
    # engine's, an older baseline's) recompiles its workflow module for every workflow.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # A baseline's `fastmcp_temporal` comes first; the repository's root gives every process `bench.*`.
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (baseline, REPO) if p is not None)
    env |= {"BENCH_ENGINE": kind, "BENCH_MARKS": str(state / "marks"), "FASTMCP_SHOW_SERVER_BANNER": "false"}
    name = f"bench-{uuid.uuid4().hex[:8]}"
    if _on_temporal(kind):
        env |= {"FASTMCP_TEMPORAL_ADDRESS": backends.temporal_address, "FASTMCP_TEMPORAL_TASK_QUEUE": name}
    else:
        url = "memory://" if kind == "tasks-memory" else str(backends.redis_url)
        env |= {"FASTMCP_DOCKET_URL": url, "FASTMCP_DOCKET_NAME": name}
    return env


async def _start_services(
    kind: str,
    env: dict[str, str],
    setup: dict[str, Any],
    state: Path,
    log: Path,
    services: list[asyncio.subprocess.Process],
    pids: dict[str, list[int]],
) -> None:
    """Start production's API server and worker for `kind`, filling `setup`, `services`, `pids`."""
    if kind != "bare":
        server, url, metrics = await start_api_server(kind, env, state / "port", log)
        services.append(server)
        pids["server"] = [server.pid]
        setup["url"] = url
        setup["metrics"] += [metrics] if metrics else []
    if worker_command(kind, env) is not None:
        worker, metrics = await start_worker(kind, env, log)
        services.append(worker)
        pids["worker"] = [worker.pid]
        setup["metrics"] += [metrics] if metrics else []


async def start_api_server(
    kind: str, env: dict[str, str], port_file: Path, log: Path
) -> tuple[asyncio.subprocess.Process, str, str | None]:
    """Start `kind`'s API server (`bench_server.py`, no worker) and return once it listens.

    Args:
        kind: the engine, not `bare`.
        env: the engine's environment (`engine_env`).
        port_file: where the server writes its port (a fresh path per server).
        log: where its output goes.

    Returns:
        The process, its MCP URL, and where it serves its Temporal calls' metrics (None off Temporal).
    """
    server_env = dict(env)
    if kind.startswith("temporal"):
        server_env["FASTMCP_TEMPORAL_WORKER"] = "false"
    metrics = endpoint() if _on_temporal(kind) else None  # the API server's Temporal calls are the engine's
    if metrics:
        server_env["FASTMCP_TEMPORAL_METRICS_ADDRESS"] = metrics
    server = await spawn([str(BENCH / "bench_server.py"), "--port-file", str(port_file)], server_env, log)
    try:
        url = f"http://127.0.0.1:{await served_port(port_file, server)}/mcp"
    except BaseException:
        await terminate(server)
        raise
    return server, url, metrics


async def start_worker(
    kind: str, env: dict[str, str], log: Path, *options: str
) -> tuple[asyncio.subprocess.Process, str | None]:
    """Start `kind`'s worker process (see `worker_command`; `kind` must have one).

    Args:
        kind: the engine.
        env: the engine's environment (`engine_env`).
        log: where its output goes.
        options: more arguments to its command (`bare_engine.py --sleepers`).

    Returns:
        The process and where it serves its Temporal calls' metrics (None for Docket's worker).
    """
    command = worker_command(kind, env)
    assert command is not None, kind
    worker_env = dict(env)
    metrics = endpoint() if kind != "tasks-redis" else None
    if metrics:
        worker_env["FASTMCP_TEMPORAL_METRICS_ADDRESS"] = metrics
    return await spawn([*command, *options], worker_env, log), metrics


def worker_command(kind: str, env: dict[str, str]) -> list[str] | None:
    """The arguments to `python` that run `kind`'s worker process; None where it has none.

    A worker with Temporal calls to count serves them at `FASTMCP_TEMPORAL_METRICS_ADDRESS`.
    """
    server_file = str(BENCH / "bench_server.py")
    if kind.startswith("bare"):
        return [
            str(BENCH / "bare_engine.py"),
            *("--address", env["FASTMCP_TEMPORAL_ADDRESS"]),
            *("--task-queue", env["FASTMCP_TEMPORAL_TASK_QUEUE"]),
            *("--marks", env["BENCH_MARKS"]),
        ]
    if kind.startswith("temporal"):
        return ["-m", "fastmcp_temporal.cli", "worker", server_file]
    if kind == "tasks-redis":
        return ["-m", "fastmcp_tasks.worker_cli", "worker", server_file]
    return None  # memory:// reaches no other process


def _on_temporal(kind: str) -> bool:
    """Whether engine `kind` runs on the Temporal dev server (not on Docket)."""
    return kind.startswith(("bare", "temporal"))


def endpoint() -> str:
    """A free 127.0.0.1 `host:port` for a process's Prometheus metrics."""
    return f"127.0.0.1:{free_port()}"


async def spawn(arguments: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    """`python *arguments` with `env`, its output appended to `log`."""
    output = log.open("ab")
    return await asyncio.create_subprocess_exec(
        sys.executable, *arguments, stdin=subprocess.DEVNULL, stdout=output, stderr=output, env=env
    )


async def served_port(port_file: Path, server: asyncio.subprocess.Process) -> int:
    """The port the API server listens on, once it accepts connections."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.returncode is not None:
            raise RuntimeError(
                "the API server exited; see its log (compare: bench/results/compare-children.log)"
            )
        if port_file.exists():
            port = int(port_file.read_text())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return port
            except OSError:
                pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the API server did not listen within {_START_TIMEOUT_S} s")


async def terminate(process: asyncio.subprocess.Process) -> None:
    """SIGTERM `process`, then SIGKILL it if it has not exited within a bound."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), _STOP_TIMEOUT_S)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()


def start_redis(state: Path) -> tuple[subprocess.Popen[bytes] | None, str | None]:
    """A throwaway Redis without persistence on a free 127.0.0.1 port, if one is installed.

    Args:
        state: its working folder.
    """
    import shutil

    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
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
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    process.kill()
    return None, None
