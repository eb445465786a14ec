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
from dataclasses import dataclass, field


@dataclass(eq=False)
class Signalled:
    """The keys signalled to one follower since it last took them, and an event set while there are any."""

    keys: set[str] = field(default_factory=set)
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> set[str]:
        taken, self.keys = self.keys, set()
        self.event.clear()
        return taken


class TaskChanges:
    """Change signals by workflow id, delivered to the streams that follow those tasks.

    Any source of changes calls `changed`; a signal for a task nobody listens to costs a
    dictionary lookup.
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
