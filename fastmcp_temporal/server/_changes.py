"""Change signals for tasks, by workflow id: where the sources of changes meet those who wait on them.

A source (a watch's road and its end, `_watches`; a write through this server, `_known`) calls
`TaskChanges.changed` when a task may answer differently; a held `tasks/get` (`_held_reads`), a
listen stream (`_push`) and a 2025-11-25 question's asking (`_asks_2025_11_25`) follow the tasks
they read, and each asks `_known.KnownTasks.next_change` when to read them again. The signal
carries no state, only "read this task again", so a late or repeated one costs a read and
nothing is lost by coalescing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple


class Read(NamedTuple):
    """A reader's copy of a task: when it was read (event-loop time; no re-read is due before), and
    when it is due a re-read while this server does not hear the task change (`KnownTasks.next_change`)."""

    at: float
    unheard_due: float = float("inf")


@dataclass(eq=False)
class Signalled:
    """The keys signalled to one follower since it last took them, and an event set while there are any."""

    keys: set[str] = field(default_factory=set)
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> set[str]:
        taken, self.keys = self.keys, set()
        self.event.clear()
        return taken

    async def wait(self, seconds: float) -> None:
        """Until a key is signalled (or the server stops), or `seconds` have passed. Not
        `asyncio.wait_for`, which before Python 3.12 can swallow a cancellation that comes as the
        event is set: the waiter goes on as if signalled, and whoever cancelled it to end it waits on it
        for ever."""
        waiting = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({waiting}, timeout=max(seconds, 0))
        finally:
            waiting.cancel()


class TaskChanges:
    """Change signals by workflow id, delivered to the reads held on those tasks and the streams
    that follow them.

    Any source of changes calls `changed`; a signal for a task nobody waits on costs two
    dictionary lookups. Entries live while someone waits, so the registry holds only the tasks
    read or listened to now.
    """

    def __init__(self) -> None:
        self._followers: dict[str, set[Signalled]] = {}
        self.closed = asyncio.Event()

    def changed(self, key: str) -> None:
        """The task under workflow id `key` may answer differently now."""
        for follower in self._followers.get(key, ()):
            follower.keys.add(key)
            follower.event.set()

    @contextmanager
    def following(self, keys: list[str]) -> Iterator[Signalled]:
        """What is signalled for any of `keys` while in the block; its event is also set when the
        server stops."""
        follower = Signalled()
        for key in keys:
            self._followers.setdefault(key, set()).add(follower)
        try:
            yield follower
        finally:
            for key in keys:
                followers = self._followers.get(key, set())
                followers.discard(follower)
                if not followers:
                    self._followers.pop(key, None)

    def close(self) -> None:
        """End every stream gracefully (the server is stopping)."""
        self.closed.set()
        for followers in self._followers.values():
            for follower in followers:
                follower.event.set()
