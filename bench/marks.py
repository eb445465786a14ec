"""When a benchmark tool body started and when it saw its cancel, told across processes.

The cancel latency the `compare` scenario reports ends when the tool body sees `CancelledError`,
and that body runs in whichever process hosts the engine's worker: the client's own in the
same-process shape, a worker process in production's. The body writes the moment (the
system-wide monotonic clock, so processes on one machine agree) into a file named after
the task's key; the driver waits for that file.

The `scale` scenario also needs each body run counted, across processes that may be killed mid-run:
`ran` appends one line per run to the process's own log, `runs` reads every log back, and
`mark` / `wait` / `released` carry any other named moment (an ask, a close, a release).
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from pathlib import Path

_POLL_S = 0.005


class Marks:
    """Start and cancel marks of keyed tool bodies, one file each in a shared folder."""

    def __init__(self, folder: Path) -> None:
        """Args:
        folder: a folder every process of one engine can read and write.
        """
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def started(self, key: str) -> None:
        """Record that the body for `key` runs.

        Args:
            key: the task's key, unique in the run.
        """
        self._write(key, "started")

    def cancelled(self, key: str) -> None:
        """Record that the body for `key` has seen its cancel, now.

        Args:
            key: the task's key, unique in the run.
        """
        self._write(key, "cancelled")

    def mark(self, key: str, event: str) -> None:
        """Record that `event` happened for `key`, now.

        Args:
            key: the task's key, unique in the run.
            event: a name for the moment (`asking`, `closing`, `release`).
        """
        self._write(key, event)

    def seen(self, key: str, event: str) -> float | None:
        """The monotonic time of `event` for `key`, or None if it has not happened.

        Args:
            key: the task's key.
            event: the moment's name.
        """
        path = self.folder / f"{key}.{event}"
        return float(path.read_text()) if path.exists() else None

    def ran(self, key: str, phase: str) -> None:
        """Append one body run of `key` in `phase` to this process's run log (one short write).

        Args:
            key: the task's key.
            phase: which run of the body (`leg`, `ask`, `answered`).
        """
        with (self.folder / f"runs-{os.getpid()}.log").open("a") as log:
            log.write(f"{key} {phase} {time.monotonic()!r}\n")

    def runs(self) -> dict[tuple[str, str], list[float]]:
        """When each (key, phase) body run started (monotonic), over every process's run log."""
        starts: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        for path in self.folder.glob("runs-*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3:  # a process killed mid-write leaves at most a torn last line
                    starts[(parts[0], parts[1])].append(float(parts[2]))
        return starts

    async def wait_started(self, key: str, timeout: float = 30) -> float:
        """The monotonic time the body for `key` started, once it has.

        Args:
            key: the task's key.
            timeout: seconds to wait before giving up.
        """
        return await self._wait(key, "started", timeout)

    async def wait_cancelled(self, key: str, timeout: float = 30) -> float:
        """The monotonic time the body for `key` saw its cancel, once it has.

        Args:
            key: the task's key.
            timeout: seconds to wait before giving up.
        """
        return await self._wait(key, "cancelled", timeout)

    def _write(self, key: str, event: str) -> None:
        now = time.monotonic()
        partial = self.folder / f".{key}.{event}.{os.getpid()}"
        partial.write_text(repr(now))
        partial.replace(self.folder / f"{key}.{event}")  # readers never see half a number

    async def _wait(self, key: str, event: str, timeout: float) -> float:
        path = self.folder / f"{key}.{event}"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} mark for {key!r} in {timeout} s; see the engine's log")
            await asyncio.sleep(_POLL_S)
        return float(path.read_text())
