"""Following a task through the change feed, where a long poll of its history would cost more.

A long poll of a task's history is one of the namespace's capped long polls, and costs a
request per event and per long-poll period (`LONG_POLL_PERIOD`) whatever its reads. The
`ChangeFeed` follows any number of tasks at one visibility query per `change_feed_interval`,
so a server long-polls only as many tasks as cost less than the feed
(`long_polls_cheaper_than_the_feed`) and follows the rest through it (`_watches` decides).
Each change the feed lists is handed to the watch (`Watch.fed_change`), which says whether its
copy already shows it; what the feed cannot list is re-read for (`_feed_gaps`). When the feed
cannot tell (a failed query), the road ends: reads describe the task, and follow it anew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from fastmcp_temporal.server._feed import ChangeFeed
from fastmcp_temporal.server._quiet import LONG_POLL_PERIOD
from fastmcp_temporal.server._watch import Watch

# A task followed through the feed is checked this often for idleness (its watch then ends), and
# subscribed to again: a change the feed listed meanwhile is handed over then.
IDLE_CHECK = timedelta(seconds=15)


def long_polls_cheaper_than_the_feed(interval: timedelta) -> int:
    """How many tasks' long polls cost fewer requests than a feed queried every `interval`."""
    return int(LONG_POLL_PERIOD / interval)


async def follow_feed(feed: ChangeFeed, watch: Watch, after: datetime, changed: Callable[[], None]) -> None:
    """Call `changed` at each change of the watched task the feed lists that its copy does not show,
    until the task closes, nobody reads it any more, or the feed cannot tell.

    `after`: Temporal's time the watch's knowledge of the task dates from, taken before it was read.
    """
    loop = asyncio.get_running_loop()
    while True:
        next_change = feed.subscribe(watch.handle.id, after=after)
        try:
            done, _ = await asyncio.wait([next_change], timeout=IDLE_CHECK.total_seconds())
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
