"""The state folder: where a persistent dev server's database lives, and which server holds it.

Why it exists: processes share one persistent server per state folder, so the folder
records that server (``dev-server.json``) and a file lock serialises checking that
record and starting a new server.

What it guarantees:

- The record is written atomically (readers never see half of it) and forgotten only
  while it still names the server being stopped.
- The folder is 0700 and every file the server or we write in it (sqlite database, log,
  state file, lock) is 0600: it holds task payloads, bearer tokens included when no
  encryption key is set.
- The lock picks ``fcntl`` or ``msvcrt`` at run time, so importing this module needs
  nothing POSIX-only.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "dev-server.json"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_LOCK_FILE = "dev-server.lock"


@dataclass(frozen=True)
class RecordedServer:
    """What a state file says: the server's process group leader, its owner, where it listens."""

    pid: int
    owner: int
    address: str
    ui_url: str | None


def default_state_dir() -> Path:
    """$FASTMCP_TEMPORAL_STATE_DIR, else $XDG_DATA_HOME or ~/.local/share, + /fastmcp-temporal."""
    explicit = os.environ.get("FASTMCP_TEMPORAL_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg_data = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg_data) if xdg_data else Path.home() / ".local" / "share"
    return base / "fastmcp-temporal"


def make_private(folder: Path, db_name: str) -> None:
    """Tighten files an older version (or another tool) left readable by others."""
    for existing in folder.glob(f"{db_name}*"):
        existing.chmod(PRIVATE_FILE)
    for name in ("temporal.log", STATE_FILE, _LOCK_FILE):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).chmod(PRIVATE_FILE)


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir`` (across processes) for the block."""
    _private_dir(state_dir)
    descriptor = os.open(state_dir / _LOCK_FILE, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        _lock(descriptor)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def read_record(state_file: Path) -> RecordedServer | None:
    """The server ``state_file`` names, or None if there is no such file or it cannot be read."""
    try:
        state = json.loads(state_file.read_text())
        pid, address, ui_url = int(state["pid"]), str(state["address"]), state.get("ui_url")
        owner = int(state.get("owner", pid))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return RecordedServer(pid=pid, owner=owner, address=address, ui_url=ui_url)


def record(state_file: Path, *, pid: int, address: str, ui_url: str | None) -> None:
    """Write ``state_file`` atomically, so readers never see half of it; this process is the owner."""
    state = {"pid": pid, "owner": os.getpid(), "address": address, "ui_url": ui_url}
    partial = state_file.with_suffix(".tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with open(descriptor, "w") as file:
        file.write(json.dumps(state) + "\n")
    os.replace(partial, state_file)


def forget(state_file: Path, pid: int) -> None:
    """Remove ``state_file`` if it still names ``pid`` (another server may have replaced it)."""
    try:
        recorded = json.loads(state_file.read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return
    if recorded == pid:
        state_file.unlink(missing_ok=True)


def _private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable by us only; tighten it if it exists,
    unless it is a shared folder such as /tmp (sticky bit), whose mode is not ours to change."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if not path.stat().st_mode & stat.S_ISVTX:
        path.chmod(PRIVATE_DIR)


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
