"""Following a task through the change feed, where a long poll of its history would cost more.

A long poll of a task's history is one of the namespace's capped long polls, and costs a
request per event and per long-poll period (`LONG_POLL_PERIOD`, 20 s) whatever its reads.
Where the namespace has `McpTaskChangedAt`, a server's `ChangeFeed` follows any number of
tasks at one visibility query per `change_feed_interval` while any is followed, so the cost
grows with the changes, not the tasks. A server so long-polls only as many tasks as cost
less than the feed (`long_polls_cheaper_than_the_feed`: 80 at the default 250 ms), and at
most `watched_tasks`; it follows the rest through the feed. Once the feed follows any task its
queries are paid whatever it follows, so a long poll beside it only adds its own requests: new
tasks are then fed too, and a long-polled one moves to the feed when its long poll next expires
(`_known.KnownTasks`), until the feed follows none.

The feed lists what a task stamps (an ask, the end of a round, a partial answer, a cancel,
a stamped progress message) and its close; `Watch.fed_change` decides whether the copy a
read would answer from already shows it. What it cannot list is left to re-reads
(`Watch.due`): a leg's start and unstamped progress, the TTL of a task no worker runs, and,
after `_watch.SAFETY_REREAD`, anything visibility listed later than `change_feed_lag`.
When the feed cannot tell (a failed query), the watch ends: reads describe the task, and
follow it anew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._quiet import LONG_POLL_PERIOD
from fastmcp_temporal.server._watch import Watch


def long_polls_cheaper_than_the_feed(interval: timedelta) -> int:
    """How many tasks' long polls cost fewer requests than a feed queried every `interval`."""
    return int(LONG_POLL_PERIOD / interval)


# A fed task nobody waits on is checked for idleness this often (its watch then ends).
_IDLE_CHECK = timedelta(seconds=15)


async def follow_feed(feed: ChangeFeed, watch: Watch, after: datetime, changed: Callable[[], None]) -> None:
    """Call `changed` at each change of the watched task the feed lists that its copy does not show,
    until the task closes, nobody reads it any more, or the feed cannot tell.

    `after`: Temporal's time the watch's knowledge of the task dates from, taken before it was read.
    """
    loop = asyncio.get_running_loop()
    while True:
        next_change = feed.subscribe(watch.handle.id, after=after)
        try:
            done, _ = await asyncio.wait([next_change], timeout=_IDLE_CHECK.total_seconds())
        finally:
            if not next_change.done():
                next_change.cancel()
        if not done:
            if watch.idle(loop.time()):
                return
            continue
        change = next_change.result()
        if change is None:
            return
        after = max(after, change.at)
        if watch.fed_change(change):
            changed()
        if change.closed:
            return
