"""Which tasks this server follows, by which road, and for how long.

A task is followed by a long poll of its history (`_long_poll_road`) while fewer are long-polled
than `watched_tasks` and than cost less than the change feed
(`_feed_road.long_polls_cheaper_than_the_feed`) and the feed follows none; else through the feed
(`_feed_road`), where the namespace stamps changes; else not at all, and reads describe it. Once
the feed follows any task, a long-polled one moves to it when its long poll next comes back empty.
Each long poll is one of the namespace's, which Temporal caps: a refusal pauses following new tasks
for `_REFUSED_PAUSE`. A watch ends at its task's close, when nobody reads it (`Watch.idle`), on an
error, or when let go; its end signals the task's readers, whom nothing tells of a change any more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._changes import Read, TaskChanges
from fastmcp_temporal.server._described import Known
from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._feed_road import follow_feed, long_polls_cheaper_than_the_feed
from fastmcp_temporal.server._long_poll_road import follow_history
from fastmcp_temporal.server._watch import Timing, Watch
from fastmcp_temporal.workflows.models import TaskOutcome

# Temporal refused a long poll (its cap on concurrent long polls per namespace): follow
# no new task for this long.
_REFUSED_PAUSE = timedelta(minutes=1)

# What is told of a watched run's completion event (to remember its answer).
Completed = Callable[[str, Watch, HistoryEvent], Awaitable[None]]


class Watches:
    """The watches of one running extension, keyed by workflow id, and the roads that feed them."""

    def __init__(
        self,
        client: Client,
        settings: TemporalTasksSettings,
        clock: TemporalClock,
        changes: TaskChanges,
        feed: ChangeFeed | None,
        completed: Completed,
    ) -> None:
        self._client = client
        self._settings = settings
        self._clock = clock  # Temporal's: every event a long poll reads moves it
        self._changes = changes  # signalled at each event that changes an answer, and at a watch's end
        self._feed = feed  # follows tasks past `_long_poll_cap` long polls, where changes are stamped
        self._completed = completed
        self._watches: dict[str, Watch] = {}
        self._long_polled = 0
        self._fed = 0  # watches followed through the feed now
        cheaper = settings.watched_tasks if feed is None else long_polls_cheaper_than_the_feed(feed.interval)
        self._long_poll_cap = min(settings.watched_tasks, cheaper)
        self._follow_after = 0.0  # loop time before which no new task is long-polled (see _REFUSED_PAUSE)

    def watch_of(self, key: str) -> Watch | None:
        return self._watches.get(key)

    def heard(self, key: str) -> Watch | None:
        """The watch through which this server hears the task change, which a read of it may be held on.

        A task this server does not follow is never held: nothing but its cap would end the hold.
        """
        watch = self._watches.get(key)
        return watch if watch is not None and watch.follow is not None and not watch.follow.done() else None

    def follow(
        self,
        key: str,
        handle: WorkflowHandle[Any, TaskOutcome],
        timing: Timing,
        run_id: str,
        *,
        close_only: bool,
    ) -> Watch | None:
        """Start following a task, by a long poll while the long polls have room and the feed follows
        none, else through the feed where there is one; None with `watched_tasks` 0, or with no road."""
        now = asyncio.get_running_loop().time()
        fed = self._long_polled >= self._long_poll_cap or self._fed > 0 or now < self._follow_after
        if not self._settings.watched_tasks or (fed and self._feed is None):
            return None
        watch = Watch(handle, timing, now, run_id, close_only=close_only and not fed, fed=fed)
        if fed:
            self._fed += 1
            follow = asyncio.create_task(self._follow_feed(key, watch))
        else:
            self._long_polled += 1
            follow = asyncio.create_task(self._follow_history(key, watch))
        if fed or close_only:
            watch.read_history.set()  # no history is read (before the close)
        watch.follow = follow
        self._watches[key] = watch
        follow.add_done_callback(lambda done: self._unwatch(key, done, watch))
        return watch

    def let_go(self, key: str, *, close_only: bool = False) -> asyncio.Task[None] | None:
        """Stop following the task (with `close_only`, only while its close alone is followed): its next
        read follows it anew. The ending follow, if any."""
        watch = self._watches.get(key)
        if watch is None or watch.follow is None or (close_only and not watch.close_only):
            return None
        watch.follow.cancel()
        return watch.follow

    async def close(self) -> None:
        """Stop every watch and the change feed (the server is stopping)."""
        for watch in list(self._watches.values()):
            if watch.follow is not None:
                watch.follow.cancel()
        if self._feed is not None:
            await self._feed.close()

    async def current(self, watch: Watch) -> Known | None:
        """What the watch knows of its task, while current (`Watch.current`); the read keeps the watch
        from going idle."""
        loop = asyncio.get_running_loop()
        watch.last_read = loop.time()
        await watch.first_page()
        return watch.current(loop.time(), self._progress_refresh, self._read_recheck)

    def due(self, key: str, read: Read) -> float:
        """When a reader's copy of the task is due a re-read: when this server's copy is, by the road it
        hears the task on (`Watch.due`), else at the reader's own `unheard_due`."""
        if (watch := self._watches.get(key)) is None:
            return read.unheard_due
        return max(watch.due(read.at, self._progress_refresh, self._read_recheck), read.at)

    @property
    def _read_recheck(self) -> float:
        return self._settings.read_recheck.total_seconds()

    @property
    def _progress_refresh(self) -> float:
        return self._settings.progress_refresh.total_seconds()

    async def _follow_history(self, key: str, watch: Watch) -> None:
        """Follow the task by a long poll until it ends, then through the feed if it moves there."""
        completed, changed = partial(self._completed, key, watch), partial(self._changes.changed, key)
        try:
            to_the_feed = await follow_history(
                self._client, self._clock, watch, completed, changed, self._feed_follows_any
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                self._follow_after = asyncio.get_running_loop().time() + _REFUSED_PAUSE.total_seconds()
            raise
        if to_the_feed:
            await self._to_the_feed(key, watch)

    def _feed_follows_any(self) -> bool:
        return self._fed > 0

    async def _to_the_feed(self, key: str, watch: Watch) -> None:
        """Follow a long-polled task through the feed from now on: while the feed follows any task,
        its queries cost the same however many it follows, and a long poll only adds its own."""
        self._long_polled -= 1
        self._fed += 1
        watch.to_the_feed(asyncio.get_running_loop().time(), self._clock.now())
        await self._follow_feed(key, watch)

    def _follow_feed(self, key: str, watch: Watch) -> Awaitable[None]:
        assert self._feed is not None  # only a server with a feed follows a task through it
        after = self._clock.now() - self._settings.change_feed_lag
        return follow_feed(self._feed, watch, after, partial(self._changes.changed, key))

    def _unwatch(self, key: str, follow: asyncio.Task[None], ended: Watch) -> None:
        if ended.fed:
            self._fed -= 1
        else:
            self._long_polled -= 1
        watch = self._watches.get(key)
        if watch is not None and watch.follow is follow:
            del self._watches[key]
            self._changes.changed(key)  # held reads look again and answer: nothing tells them of a change now
        if not follow.cancelled():
            follow.exception()  # a failed long poll only ends the watch; reads describe
