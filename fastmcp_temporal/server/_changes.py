"""Change signals for tasks, by workflow id: where the sources of changes meet those who wait on them.

A source (today a watch's long poll, `_known`) calls `TaskChanges.changed` when a task may
answer differently; a listen stream (`_push`) waits on the tasks it follows. The signal
carries no state, only "read this task again", so a late or repeated one costs a read and
nothing is lost by coalescing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class TaskChanges:
    """Change signals by workflow id, delivered to the streams that follow those tasks.

    Any source of changes calls `changed`; a signal for a task nobody listens to costs a
    dictionary lookup.
    """

    def __init__(self) -> None:
        self._wakes: dict[str, set[asyncio.Event]] = {}
        self.closed = asyncio.Event()

    def changed(self, key: str) -> None:
        """The task under workflow id `key` may answer differently now."""
        for wake in self._wakes.get(key, ()):
            wake.set()

    @contextmanager
    def following(self, keys: list[str]) -> Iterator[asyncio.Event]:
        """An event set by the next change signal for any of `keys`, or when the server stops."""
        wake = asyncio.Event()
        for key in keys:
            self._wakes.setdefault(key, set()).add(wake)
        try:
            yield wake
        finally:
            for key in keys:
                wakes = self._wakes.get(key, set())
                wakes.discard(wake)
                if not wakes:
                    self._wakes.pop(key, None)

    def close(self) -> None:
        """End every stream gracefully (the server is stopping)."""
        self.closed.set()
        for wakes in self._wakes.values():
            for wake in wakes:
                wake.set()
