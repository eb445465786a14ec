"""A dev server's processes: started as one group under the watchdog, ended as one.

What it guarantees: a server we start runs in its own session under a watchdog
(``_watchdog``) that ends it when the owning process dies, however it dies (SIGTERM,
SIGKILL, a crash); ``terminate`` ends it and anything it spawned. A pid counts as alive
only if it names one running process, not a zombie, so a recorded server whose
watchdog or owner is gone is distinguished from a live one, and its leftovers are reaped.

Importing this module needs nothing POSIX-only; starting or signalling a group does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

WATCHDOG = Path(__file__).with_name("_watchdog.py")
_POLL_INTERVAL = 0.05
_ORPHAN_TIMEOUT = 15.0
_GROUP_EXIT_TIMEOUT = 2.0


def spawn(command: list[str], output: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``command`` under the watchdog, in a new session (so its group can be killed),
    writing to ``output``.

    The watchdog's stdin is a pipe only this process writes to (never, in fact): when
    this process dies, the pipe closes and the watchdog stops the server. The umask
    makes the files the server creates (sqlite database, WAL) readable by us only.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(WATCHDOG), *command],
        stdin=subprocess.PIPE,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        umask=0o077,
    )


def terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the group ``process`` leads, SIGKILL it after ``timeout``, and leave no child of it."""
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


def reap(pgid: int) -> None:
    """Wait for the watchdog leading ``pgid`` to stop its server and exit; kill the group if it
    takes longer than _ORPHAN_TIMEOUT."""
    deadline = time.monotonic() + _ORPHAN_TIMEOUT
    while pid_alive(pgid):
        if time.monotonic() >= deadline:
            kill_group(pgid)
            return
        time.sleep(_POLL_INTERVAL)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of ``pgid`` and wait (bounded) until none is left."""
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _GROUP_EXIT_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(_POLL_INTERVAL)


def pid_alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives would address process groups, not one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        pass
    return not _is_zombie(pid)


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _is_zombie(pid: int) -> bool:
    """A dead process its parent has not reaped yet (Linux; elsewhere assume not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
