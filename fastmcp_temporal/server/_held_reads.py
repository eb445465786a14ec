"""The reads held now: each answers at its task's next change, when its copy is due a re-read, or at its end.

A held read (which ones, and for how long: `_holds`) re-reads the task at each change signalled
for it and when what its watch knows is due a re-read (`NextChange`), and answers once the answer
differs from what the last one showed: a closed task's from the closed-answer cache, an ask or a
cancel from a re-read. A progress re-read ends it, so each read costs at most one `describe()` for
progress; so does its watch's end, since nothing would tell it of a change any more. One caller
has at most `held_reads_per_caller` reads held at once; past that its reads answer at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from fastmcp_temporal._fastmcp_private import GetTaskResult
from fastmcp_temporal.server._changes import Read, Signalled, TaskChanges
from fastmcp_temporal.server._closed_answers import ClosedAnswer, ClosedAnswers
from fastmcp_temporal.server._holds import holdable
from fastmcp_temporal.server._watch import Shown, Watch, shown_of
from fastmcp_temporal.server._watches import Watches

# The task's answer now (`True`: from a `describe()`, even where what the watch knows would answer).
Reread = Callable[[bool], Awaitable[GetTaskResult]]
# `KnownTasks.next_change`: the tasks signalled, and those due a re-read, once any is.
NextChange = Callable[[Signalled, dict[str, Read], float], Awaitable[tuple[set[str], set[str]]]]


class HeldReads:
    """The reads held now, by caller, against the limit of each, and the loop each waits in."""

    def __init__(
        self,
        per_caller: int,
        watches: Watches,
        changes: TaskChanges,
        closed: ClosedAnswers,
        next_change: NextChange,
    ) -> None:
        self._per_caller = per_caller
        self._held: Counter[str] = Counter()
        self._watches = watches
        self._changes = changes
        self._closed = closed
        self._next_change = next_change

    @contextmanager
    def holding(self, caller: str) -> Iterator[bool]:
        """Whether a read of `caller` may be held (counted as held while in the block), or is past its
        limit."""
        if self._held[caller] >= self._per_caller:
            yield False
            return
        self._held[caller] += 1
        try:
            yield True
        finally:
            self._held[caller] -= 1
            if not self._held[caller]:
                del self._held[caller]

    async def answer(
        self, key: str, watch: Watch, deadline: float, closed_answer: ClosedAnswer, reread: Reread
    ) -> GetTaskResult:
        """The task's answer once it differs from what `watch` last showed, or at `deadline` (loop time)."""
        loop, shown = asyncio.get_running_loop(), watch.shown
        with self._changes.following([key]) as heard:
            # a task created here and not read yet answers what its creation did, until its first recheck
            answer = None if watch.known is None and watch.close_only else await reread(False)
            while (followed := self._watches.heard(key)) is not None and _repeats(answer, shown):
                changed, due = await self._next_change(heard, {key: Read(loop.time())}, deadline)
                if (cached := self._closed.cached(key)) is not None:
                    return closed_answer(cached)
                if not changed and not due:
                    break
                answer = await reread(not changed)  # unsignalled, the known copy is due a re-read
                if not changed and not followed.close_only:
                    break  # a progress re-read: answer it
        return answer if answer is not None else await reread(False)


def _repeats(answer: GetTaskResult | None, shown: Shown) -> bool:
    """Whether a held read's answer (None: the creation's, not read yet) is what the last answer showed."""
    return answer is None or (shown_of(answer) == shown and holdable(answer.status))
