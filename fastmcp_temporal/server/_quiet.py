"""How often a quiet task asks to be read, and whether following it is still worth a long poll.

An opt-in cost knob: off unless `quiet_poll_interval` is set, since held reads (`_holds`)
give a waiting client every change at once and cost a followed task nothing, where a longer
interval makes every change up to that much later. The spec lets a task's `pollIntervalMs`
change over its life, and clients honour it (the `fastmcp.Client` polls at most that
often). A running task whose answer (status, message, asks) has read the same on this
server for `quiet_poll_interval` advertises a longer interval, half as long as it has been
quiet, up to `quiet_poll_interval`; the first answer that differs, a write through this
server, or the close brings back the usual interval (the task's own, from its memo, or the
short one of held reads). An ask, a close or a cancel so reaches a
client one advertised interval later at worst: half the time the task had been quiet, at
most `quiet_poll_interval`.

A read `describe()`s a task unless its server follows it with a long poll, which Temporal
ends every `LONG_POLL_PERIOD`: past that gap between the reads a server gets of a quiet
task, a `describe()` per read costs that server less than the long poll, and is as fresh
(an ask, a close or a cancel through another server shows at the next read). So the watch
of such a task is let go (`Quiet.let_go`), freeing a `watched_tasks` slot for a younger,
interactive task, until its answer changes.

Each server decides alone, from the answers it gave: `QuietTasks` remembers, while
`quiet_poll_interval` is set, one small entry per running task it answered, at most
`quiet_tasks` of them (least recently read first out; a task forgotten starts again from
its own interval). Every decision is a
function of an entry and the time passed in, with no I/O (unit-tested in tests/test_known.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta

from fastmcp_temporal._fastmcp_private import GetTaskResult
from fastmcp_temporal.server._status import TERMINAL_STATUSES
from fastmcp_temporal.server._watch import shown_of

# Temporal answers a history long poll empty after this long (its default
# `history.longPollExpirationInterval`): what following a quiet task costs a server.
LONG_POLL_PERIOD = timedelta(seconds=20)


@dataclass(frozen=True, slots=True)
class Quiet:
    """What this server last answered of a running task, since when, and how its reads came."""

    shown: int  # the hash of what a caller can distinguish in the answer (`Shown`): a few bytes, not a copy
    since: float  # event-loop time this server first answered it
    answered_at: float  # when it last answered the task
    read_gap: float  # how long before that it had answered the task (inf: never)

    def interval(self, now: float, base: float, cap: float) -> float:
        """The poll interval to advertise at `now`, in seconds: the task's own (`base`) until it has
        been quiet for `cap`, then half as long as it has been quiet, at most `cap`."""
        quiet_for = now - self.since
        if cap <= base or quiet_for < cap:
            return base
        return min(cap, max(base, quiet_for / 2))

    def let_go(self, base: float, cap: float) -> bool:
        """Whether a `describe()` per read costs this server less than following the task: it is
        quiet, and the gap between the reads this server gets of it is longer than a long poll lasts."""
        quiet = self.interval(self.answered_at, base, cap) > base
        return quiet and self.read_gap >= LONG_POLL_PERIOD.total_seconds()


class QuietTasks:
    """The quiet of the running tasks one server answers, bounded; keyed by workflow id."""

    def __init__(self, cap: timedelta, entries: int) -> None:
        self._cap = cap.total_seconds()
        self._most = entries  # about 0.3 KB each with its key
        self._entries: OrderedDict[str, Quiet] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def quiet_after(self, key: str, answer: GetTaskResult, now: float) -> Quiet | None:
        """The task's quiet once `answer` is given at `now`, noted for the next (None: it has closed, or
        quiet is off: nothing is noted)."""
        if self._cap == 0:
            return None
        if answer.status in TERMINAL_STATUSES:
            self._entries.pop(key, None)
            return None
        before = self._entries.pop(key, None)
        seen = hash(shown_of(answer))
        if before is None:
            quiet = Quiet(seen, since=now, answered_at=now, read_gap=float("inf"))
        else:
            since = before.since if before.shown == seen else now
            quiet = Quiet(seen, since, answered_at=now, read_gap=now - before.answered_at)
        self._entries[key] = quiet
        while len(self._entries) > self._most:
            self._entries.popitem(last=False)
        return quiet

    def advertised(self, answer: GetTaskResult, quiet: Quiet | None, now: float) -> GetTaskResult:
        """`answer` with the poll interval its task's quiet earns (its own when none)."""
        if quiet is None or self._cap == 0 or not answer.poll_interval_ms:
            return answer
        base = answer.poll_interval_ms / 1000
        interval_ms = round(quiet.interval(now, base, self._cap) * 1000)
        if interval_ms == answer.poll_interval_ms:
            return answer
        return answer.model_copy(update={"poll_interval_ms": interval_ms})

    def let_go(self, key: str, base_ms: int) -> bool:
        """Whether this server should not follow the task (see `Quiet.let_go`)."""
        quiet = self._entries.get(key)
        return quiet is not None and self._cap > 0 and quiet.let_go(base_ms / 1000, self._cap)

    def forget(self, key: str) -> None:
        """A write through this server: the task is interactive, and asks for its own interval again."""
        self._entries.pop(key, None)
