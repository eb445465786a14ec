"""What every scenario stands on: the Temporal dev server, and MCP servers served over HTTP.

A scenario asks for the dev server here rather than starting its own, so every run gets the same
one: sqlite WAL in a throwaway folder (as the project's launcher runs it), no UI, and, when the
scenario wants the server's own counts (Actions, requests by operation), its metrics port. An
MCP server is served over streamable HTTP in this process (`serving`) or as a process of its own
(`http_server_process`), for a `fastmcp.Client` over HTTP; the in-memory client needs neither. The
deployment shapes (same-process, production's API servers and workers) are in `deploy.py`, the
clients that drive them in `drivers.py`, the tool catalog in `bench_server.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastmcp import FastMCP
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer, find_temporal_binary, free_port, start_dev_server
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES

BENCH = Path(__file__).parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
_STARTUP_DEADLINE_S = 60.0


@dataclass
class Temporal:
    """A running dev server: where to reach it, where its metrics are (or None), its state folder."""

    server: DevServer
    metrics_url: str | None
    state: Path

    @property
    def address(self) -> str:
        return self.server.address


@contextlib.asynccontextmanager
async def dev_server(
    *, metrics: bool = False, dynamic_config: Mapping[str, str] | None = None, in_memory: bool = False
) -> AsyncIterator[Temporal]:
    """Start the run's dev server, and stop it when the scenario is done.

    Args:
        metrics: serve the server's own metrics (`metrics.dev_server_counts` reads them).
        dynamic_config: Temporal dynamic config values, e.g. a namespace's RPS limits.
        in_memory: no sqlite file (what the scenario measured before on an in-memory server).
    """
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        state = Path(folder)
        port = free_port() if metrics else None
        server = await asyncio.to_thread(
            start_dev_server,
            db_path=None if in_memory else state / "temporal.db",
            ui=False,
            dynamic_config=dynamic_config,
            metrics_port=port,
        )
        try:
            yield Temporal(server, f"http://127.0.0.1:{port}/metrics" if port else None, state)
        finally:
            server.stop()


@contextlib.contextmanager
def dev_server_with_metrics(namespaces: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """An in-memory dev server with a namespace of its own for each of `namespaces`, and its metrics on.

    Each measured shape in a namespace of its own: the server's counters by namespace are its own.
    Not ready when yielded: `await wait_ready(address)`.

    Yields:
        Its address and its metrics URL.
    """
    port, metrics = free_port(), free_port()
    command = [str(find_temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--metrics-port", str(metrics), "--log-level", "error"]
    for namespace in namespaces:
        command += ["--namespace", namespace]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_ready(address: str) -> None:
    """Return once a Temporal client connects to `address` (within 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            await TemporalClient.connect(address)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def task_server(name: str = "bench", **settings: Any) -> FastMCP:
    """A FastMCP server with the extension (and its worker) on a task queue of its own.

    Args:
        name: the server's name.
        settings: the extension's (`address` or `client`, limits, ...); a `task_queue` given wins.
    """
    mcp = FastMCP(name)
    mcp.add_extension(TemporalTasksExtension(**{"task_queue": f"bench-{uuid.uuid4().hex[:8]}", **settings}))
    return mcp


@contextlib.asynccontextmanager
async def serving(mcp: FastMCP) -> AsyncIterator[str]:
    """`mcp` over streamable HTTP in this process, on a free loopback port, until the block ends.

    Yields:
        Its MCP URL, for a `fastmcp.Client` over HTTP.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    web = uvicorn.Server(uvicorn.Config(mcp.http_app(), log_level="warning", lifespan="on"))
    served = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        web.should_exit = True
        await served
        sock.close()


def bench_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the repository's root on `PYTHONPATH`, to import `bench.*`."""
    result = dict(os.environ if env is None else env)
    result["PYTHONPATH"] = os.pathsep.join(p for p in (result.get("PYTHONPATH", ""), str(REPO)) if p)
    return result


@contextlib.contextmanager
def http_server_process(
    script: str, address: str, settings: Mapping[str, str], code: Path | str | None = None
) -> Iterator[tuple[int, str]]:
    """Run `script serve` as a process, wait until it answers HTTP, and stop it by PID after.

    Args:
        script: a scenario module whose `serve` argument runs its MCP server on `PORT`.
        address: the dev server, as `FASTMCP_TEMPORAL_ADDRESS` (a task queue of its own comes too).
        settings: more of the process's environment (`FASTMCP_TEMPORAL_*` settings).
        code: a folder holding another `fastmcp_temporal` package, put first on its path.

    Yields:
        The process's PID and its MCP URL.
    """
    port = free_port()
    env = bench_env() | dict(settings)
    env |= {"PORT": str(port), "FASTMCP_TEMPORAL_ADDRESS": address}
    env["FASTMCP_TEMPORAL_TASK_QUEUE"] = f"bench-{uuid.uuid4().hex[:8]}"
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(code), env["PYTHONPATH"]))
    process = subprocess.Popen([sys.executable, script, "serve"], env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + _STARTUP_DEADLINE_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"The server exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=1)
                break
            if time.monotonic() > deadline:
                raise TimeoutError("The server did not start")
            time.sleep(0.2)
        yield process.pid, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
