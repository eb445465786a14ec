"""Why a `tasks/get` of a running task may wait: a client's poll loop becomes a long poll.

A client waiting on a task polls `tasks/get`, and would see a change (its close, an ask, a
cancel, a new progress message) only at its next poll, up to one poll interval late: 5 s by
default, 60 s for a tool that asks for it. The spec lets a server choose when it answers, so
a read that would only repeat what this server last answered of the task, and that comes soon
after that answer (within the interval it advertised and `POLL_LOOP_SLACK`: a client in a
poll loop), waits until the task changes or the hold ends; the change then reaches the
client the moment this server learns of it. Any other read answers at once: the first read
of a state, the first read on a server, a read long after the last answer (an operator's
one-off status), a read after a write through this server, and every read of a closed task.

How long: the task's own poll interval, at most `reread_hold` (5 s) after a read's answer,
at most `read_hold` (1 s) after the creation's (the read the FastMCP client sends at once:
a short task's result comes on it, and a status read right after the creation stays quick).
The caps stay well below client request timeouts (the MCP Inspector's default is 10 s, the
TypeScript SDK's 60 s): a held read that outlasts one fails. At 5 s a default tool's held
read ends when its client would have polled anyway.

While reads are held, answers advertise `HELD_POLL_INTERVAL` (or the tool's own, when shorter)
and so does the creation's `CreateTaskResult`: the server paces the client by holding, so the
client should come straight back. A change that lands between two held reads then reaches a
client that waits the advertised interval (or the FastMCP client, which waits at most that)
within it, and one that lands during a hold at once. Only a task this server hears changes of
advertises it; any other keeps its own interval.

Where a change comes from (`_changes.TaskChanges`): this server's watch of the task (`_watches`:
a long poll of its history, or the visibility change feed) signals every change of an answer it
hears; a task it does not follow is answered at once, since nothing would end its hold but the cap.

One caller (`_scope.caller_key`) has at most `held_reads_per_caller` reads held at once
(`_held_reads.HeldReads`); its further reads are answered at once, with the task's own interval, as if
holds were off. A read is never refused for it: holding only spares a client polls, and a
client waiting on many tasks must not fail.
"""

from __future__ import annotations

from datetime import timedelta

from fastmcp_temporal.server._status import RUNNING_STATUSES

# What answers advertise while reads are held: the gap between two held reads, within which
# a change waits for the next one. The server paces the client by holding, so a shorter gap
# costs no read more: a close lands in it one time in a hundred at the default hold.
HELD_POLL_INTERVAL = timedelta(milliseconds=50)
# A read this long past the interval the last answer advertised is still part of a poll loop
# (a client's own latency, a busy server); later, it is a one-off read and answers at once.
POLL_LOOP_SLACK = timedelta(seconds=1)


def holdable(status: str) -> bool:
    """Whether a read answering `status` may wait for a change (a closed task's answer never changes)."""
    return status in RUNNING_STATUSES
