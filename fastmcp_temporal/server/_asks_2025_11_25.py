"""The questions of a 2025-11-25 task (SEP-1686): asked until answered, answered once.

A task that asks is `input_required`, and that era's client answers its questions as
server-to-client requests. A round of questions is the server's (`Round`), not a request's: it
is asked on one open `tasks/result` at a time (its carrier), or on the GET stream of each
session that polls `tasks/get`, and the stream it is asked on may close unanswered at any time
(the client withdraws the request, its connection drops, its session crashes). mcp tells nobody
when a stream closes, so each asking checks its own (`_CONNECTION_CHECK`); when it closes, a
waiting or later `tasks/result` of the caller asks the round again. Whoever answers first, the
answers reach the workflow once, as the one `submit_input` signal `tasks/update` sends, even
when the request that got them is withdrawn meanwhile; no question outlives its task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from fastmcp_temporal.server._relay import carries, per_request_session, send_ask
from fastmcp_temporal.server._status import TERMINAL_STATUSES

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from fastmcp_temporal._fastmcp_private import GetTaskResult
    from fastmcp_temporal.server._tasks_2025_11_25 import TaskReadsAndWrites

logger = logging.getLogger("fastmcp_temporal")

RELATED_TASK_META = "io.modelcontextprotocol/related-task"
# How often a wait on a task re-reads it when nothing has signalled it (a change normally wakes it first).
_RECHECK = 5.0
# How often an asking checks that the stream it is on is still open.
_CONNECTION_CHECK = 0.5


class Round:
    """One task's round of questions on this server: asked on one open `tasks/result` at a time (its
    carrier), else on the own stream of each session that read it; answered once, whoever answers."""

    def __init__(self, task_id: str, requests: dict[str, Any], forget: Callable[[Round], None]) -> None:
        self.task_id = task_id
        self.requests = requests
        self._forget = forget  # the server's forgetting of the round, once it is over or idle
        self.carrier: object | None = None
        self.on_sessions: dict[int, asyncio.Task[None]] = {}  # by connection
        self.waiting = 0  # the `tasks/result` requests waiting on it
        self.over = asyncio.Event()  # answered, or its task has ended
        self._change = asyncio.Event()
        self._delivery: asyncio.Future[None] | None = None

    async def changed(self) -> None:
        """Returns at the round's next change: its carrier let go, or it is over."""
        await self._change.wait()

    def release(self, carrier: object) -> None:
        """The carrier's request is done asking; an answer it got is delivered first."""
        if (delivery := self._delivery) is not None and not delivery.done():
            delivery.add_done_callback(lambda _: self.release(carrier))
        elif self.carrier is carrier:
            self.carrier = None
            self.let_go()

    def let_go(self) -> None:
        """An asking ended: a waiting `tasks/result` may ask next; with none, the round is forgotten."""
        self._notify()
        self.forget_if_idle()

    async def deliver(self, methods: TaskReadsAndWrites, answers: dict[str, Any]) -> None:
        """The answers reach the workflow as one `submit_input`, once for the round, even when the
        request that got them is withdrawn meanwhile (an answer got twice is delivered once)."""
        if self._delivery is None:
            self._delivery = asyncio.ensure_future(self._update(methods, answers))
            self._delivery.add_done_callback(log_failed_asking)
        await asyncio.shield(self._delivery)

    async def _update(self, methods: TaskReadsAndWrites, answers: dict[str, Any]) -> None:
        try:
            await methods.update(self.task_id, answers)
        except BaseException:
            self._delivery = None  # not delivered: the next asking may
            raise
        self.finish()

    def finish(self) -> None:
        """Answered, or its task has ended: nobody is asked any more."""
        if self.over.is_set():
            return
        self.over.set()
        for asking in self.on_sessions.values():
            if asking is not asyncio.current_task():
                asking.cancel()
        self._forget(self)
        self._notify()

    def forget_if_idle(self) -> None:
        """Nobody asks or waits on the round any more: the next read starts it anew."""
        if self.carrier is None and not self.on_sessions and not self.waiting:
            self._forget(self)

    def _notify(self) -> None:
        self._change.set()
        self._change = asyncio.Event()


def why_unaskable(session: ServerSession, task_id: str, requests: dict[str, Any]) -> MCPError | None:
    """Why the caller of this request cannot be asked the questions, if it cannot."""
    asked = ", ".join(sorted({str(request.get("method")) for request in requests.values()}))
    if per_request_session(session):
        return MCPError(
            INTERNAL_ERROR,
            f"Task {task_id} asks the caller ({asked}), but this server is stateless (stateless_http=True): "
            "a request has no session, so there is no stream to ask on and nowhere for an answer to come back. "
            "Serve the tools that ask from a server with sessions (stateless_http=False), or cancel the task "
            "with tasks/cancel.",
        )
    for request in requests.values():
        if not carries(session, str(request.get("method"))):
            return MCPError(
                INTERNAL_ERROR,
                f"Task {task_id} asks the caller ({request.get('method')}), which this client did not declare "
                "it can answer at initialize; declare the capability, or cancel the task with tasks/cancel.",
            )
    return None


async def _ask(session: ServerSession, request_id: Any, task_id: str, requests: dict[str, Any]) -> dict[str, Any]:
    """Send each question of the round to the caller (on the stream of `request_id`); the answers."""
    related = {RELATED_TASK_META: {"taskId": task_id}}
    answers = {}
    for key, request in requests.items():
        params = request.get("params") or {}
        stamped = {**request, "params": {**params, "_meta": {**(params.get("_meta") or {}), **related}}}
        answers[key] = await send_ask(session, request_id, key, stamped)
    return answers


async def until(
    methods: TaskReadsAndWrites,
    task_id: str,
    statuses: frozenset[str],
    tell: Callable[[GetTaskResult], Awaitable[None]] | None = None,
) -> GetTaskResult:
    """The task's answer once its status is one of `statuses`, each answer read on the way `tell`-ed.
    Its every event is followed meanwhile, so a change wakes this at once; unsignalled, it is re-read
    every `_RECHECK`."""
    key = methods.key_of(task_id)
    with methods.changes.following([key]) as signalled:
        await methods.follow_every_event(task_id)
        while (answer := await methods.answer_now(task_id)).status not in statuses:
            if tell is not None:
                await tell(answer)
            if methods.changes.closed.is_set():
                raise MCPError(INTERNAL_ERROR, "The server is stopping: call tasks/result again on another.")
            await methods.next_change(signalled, {}, asyncio.get_running_loop().time() + _RECHECK)
    if tell is not None:
        await tell(answer)
    return answer


async def ask_round(
    session: ServerSession,
    request_id: Any,
    methods: TaskReadsAndWrites,
    round_: Round,
    closed: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Ask the round (on the stream of `request_id`, None: the session's own) and deliver its answers;
    given up once the round is answered elsewhere or its task has ended (a cancel, its TTL, an
    operator: no question outlives its task), or once `closed` says the stream it is on has closed."""
    contenders: dict[str, Awaitable[Any]] = {
        "asked": _ask(session, request_id, round_.task_id, round_.requests),
        "ended": until(methods, round_.task_id, TERMINAL_STATUSES),  # not found once expired: ended too
        "over": round_.over.wait(),
    }
    if closed is not None:
        contenders["gone"] = _until_true(closed)
    first, outcome = await _first(contenders)
    if first == "asked":
        await round_.deliver(methods, outcome.result())
    elif first == "ended":
        round_.finish()
    elif first == "gone":
        raise MCPError(INTERNAL_ERROR, "The stream that asked the task's question closed before it was answered.")


async def _first(contenders: dict[str, Awaitable[Any]]) -> tuple[str, asyncio.Future[Any]]:
    """The name of the contender done first (its future, to read), the others cancelled."""
    named = {asyncio.ensure_future(contender): name for name, contender in contenders.items()}
    try:
        done, _ = await asyncio.wait(named, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in named:
            waiting.cancel()
        await asyncio.gather(*named, return_exceptions=True)
    winner = next(future for future in named if future in done)  # in the order given: answers in hand first
    return named[winner], winner


async def _until_true(check: Callable[[], Awaitable[bool]]) -> None:
    """Returns once `check` holds, checked every `_CONNECTION_CHECK` (mcp tells nobody a stream closed)."""
    while not await check():
        await asyncio.sleep(_CONNECTION_CHECK)


def log_failed_asking(asking: asyncio.Future[None]) -> None:
    """An asking failed (the caller answered badly, or left): the next read asks again. (A `tasks/result`
    asking it fails with the same error.)"""
    if not asking.cancelled() and (failure := asking.exception()) is not None:
        logger.info("A 2025-11-25 task's questions did not reach an answer: %s", failure)
