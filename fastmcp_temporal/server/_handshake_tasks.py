"""The 2025-11-25 tasks (SEP-1686), for the clients that speak them: the same engine, that era's wire.

VS Code, Microsoft's Agent Framework and the TypeScript SDK's own tasks speak the tasks of the
2025-11-25 specification, not the 2026-07-28 extension. To every client that initializes on
2025-11-25, the server declares `capabilities.tasks` (`tools/call`, `tasks/cancel`, and
`tasks/list` where callers are identified): a client's own `tasks` capability says what it
receives as a task, not whether it calls tools as tasks, and the official tasks client
(`@modelcontextprotocol/ext-tasks`) declares none. Then:

- a `tools/call` with `params.task` starts the same workflow a 2026-07-28 task gets (same
  policy, caller snapshot, scope, TTL and encryption) and answers `CreateTaskResult` at once;
  a tool whose `execution.taskSupport` forbids it gets -32601, as does a `required` one called
  without `task`;
- `tasks/get` reads it as the 2026-07-28 method does (held reads, the change feed), shaped as
  that era's `Task`: a tool result with `isError` reads `failed`, as the 2025-11-25 spec says;
- `tasks/result` waits for the end, following the task's history while it waits (and telling
  each status it sees as `notifications/tasks/status` on its stream), and answers exactly what
  the `tools/call` would have answered (its result, stamped with the related-task `_meta`, or
  its JSON-RPC error). A task that asks is `input_required`: each question goes to
  the caller once, as a server-to-client request carrying the related-task `_meta`, on the open
  `tasks/result`, or on the session's own stream for a client that only polls `tasks/get` (as
  ext-tasks does); the answers reach the workflow as the one `submit_input` signal
  `tasks/update` sends;
- `tasks/list` lists the caller's own tasks of this era, a page at a time; `tasks/cancel`
  cancels the workflow, and refuses a task already ended with -32602.

The era is in the task id (`2025-11-25.` before the random part): a task created on one era is
not found by the other era's methods, and a caller's list is one visibility query by prefix.
mcp's runner shapes every 2025-11-25 `tools/call` result as a `CallToolResult`, so the answer
to a task-augmented call is put in place by a server middleware (`middleware`), the one tier
that sees the result after that shaping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, Protocol

from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, Notification
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal._fastmcp_private import CreateTaskResult, GetTaskResult
from fastmcp_temporal.server._backend import Backend, temporal_errors
from fastmcp_temporal.server._creation import StartedWorkflow, start_task
from fastmcp_temporal.server._push import TERMINAL_STATUSES, TaskReads, TaskStatusParams
from fastmcp_temporal.server._relay import carries, send_ask
from fastmcp_temporal.server._scope import (
    ANONYMOUS_SCOPE_TAG,
    HANDSHAKE_ERA,
    HANDSHAKE_TASK_ID_PREFIX,
    is_handshake_task,
    new_task_id,
    task_not_found,
    workflow_id,
)

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.tools.base import Tool
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.session import ServerSession

logger = logging.getLogger("fastmcp_temporal")

ERA = HANDSHAKE_ERA
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
LIST_PAGE_SIZE = 50
# How often a wait on a task re-reads it when nothing has signalled it (a change normally wakes it first).
_RECHECK = 5.0
_SETTLED = frozenset({"input_required", *TERMINAL_STATUSES})

# Set by the middleware for a task-augmented `tools/call`: where the interceptor puts its answer.
_CREATED: ContextVar[dict[str, Any] | None] = ContextVar("fastmcp_temporal_handshake_created", default=None)


class _TaskStatusNotification(Notification[TaskStatusParams, Literal["notifications/tasks/status"]]):
    method: Literal["notifications/tasks/status"] = "notifications/tasks/status"
    params: TaskStatusParams


class TaskReadsAndWrites(TaskReads, Protocol):
    """What this era needs of the task methods: what a listen stream reads, and the writes."""

    async def get(self, task_id: str) -> GetTaskResult: ...

    async def update(self, task_id: str, responses: dict[str, Any]) -> Any: ...

    async def cancel(self, task_id: str) -> Any: ...

    def watch(self, created: CreateTaskResult, started: StartedWorkflow) -> CreateTaskResult: ...


def creation_requested() -> bool:
    """This `tools/call` asks for a 2025-11-25 task."""
    return _CREATED.get() is not None


def task_of(answer: CreateTaskResult | GetTaskResult) -> dict[str, Any]:
    """A task's answer on the 2026-07-28 wire, as the 2025-11-25 `Task`."""
    status, message = answer.status, answer.status_message
    result, error = getattr(answer, "result", None), getattr(answer, "error", None)
    if status == "completed" and result is not None and result.get("isError"):
        status, message = "failed", message or _text_of(result)
    elif status == "failed" and error is not None:
        message = message or error.get("message")
    task = {
        "taskId": answer.task_id,
        "status": status,
        "statusMessage": message,
        "createdAt": answer.created_at,
        "lastUpdatedAt": answer.last_updated_at,
        "ttl": answer.ttl_ms,
        "pollInterval": answer.poll_interval_ms,
    }
    return {key: value for key, value in task.items() if value is not None or key == "ttl"}


class HandshakeTasks:
    """Serves the 2025-11-25 tasks while the extension runs (`methods_of`)."""

    def __init__(self, methods_of: Callable[[], TaskReadsAndWrites | None], lists: Callable[[], bool]) -> None:
        self._methods_of = methods_of
        self._lists = lists  # callers are identified (the server has auth): `tasks/list` is declared
        # The questions in flight by task id, and the request whose stream carries them (None: the session's).
        self._rounds: dict[str, tuple[asyncio.Task[None], Any]] = {}

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Declare the tasks capability to every 2025-11-25 client; answer a task-augmented `tools/call`
        with the task the interceptor created (`create`)."""
        params = ctx.params or {}
        if ctx.method == "initialize":
            return self._with_tasks_capability(await call_next(ctx))
        if not (ctx.method == "tools/call" and ctx.protocol_version == ERA and params.get("task") is not None):
            return await call_next(ctx)  # an older era's `task` is ignored, as the spec says of a receiver without tasks
        created: dict[str, Any] = {}
        token = _CREATED.set(created)
        try:
            answered = await call_next(ctx)
        finally:
            _CREATED.reset(token)
        return created or answered  # nothing created: the call's own answer (bad arguments, unknown tool)

    def _with_tasks_capability(self, result: HandlerResult) -> HandlerResult:
        if not isinstance(result, dict) or result.get("protocolVersion") != ERA:
            return result
        tasks: dict[str, Any] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
        if self._lists():
            tasks["list"] = {}
        return {**result, "capabilities": {**result.get("capabilities", {}), "tasks": tasks}}

    async def create(
        self, backend_of: Callable[[], Backend], tool: Tool, arguments: dict[str, Any] | None, context: Context
    ) -> ToolResult:
        """Start the task a task-augmented call asks for; its `CreateTaskResult` goes out in place of
        the placeholder returned here."""
        created = _CREATED.get()
        assert created is not None
        if not tool.task_config.supports_tasks():
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Tool {tool.name!r} does not run as a task (its execution.taskSupport is 'forbidden'): "
                "call it without `task`.",
            )
        with temporal_errors("start the task"):
            task_id = new_task_id(HANDSHAKE_TASK_ID_PREFIX)
            answer, started = await start_task(backend_of(), tool, arguments, context, task_id=task_id)
        methods = self._methods_of()
        created["task"] = task_of(answer if methods is None else methods.watch(answer, started))
        return ToolResult(content=[])

    # --- the task methods ----------------------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> dict[str, Any]:
        """The task; one that asks has its questions sent to the caller at once, on the session's own
        stream, for a client that polls and never calls `tasks/result` (the spec lets it)."""
        methods = self._methods(task_id)
        answer = await methods.get(task_id)
        requests = answer.input_requests or {}
        if requests and all(carries(ctx.session, str(request.get("method"))) for request in requests.values()):
            self._round(ctx.session, None, methods, answer)
        return task_of(answer)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        methods = self._methods(task_id)
        answer = await methods.answer_now(task_id)
        if answer.status in TERMINAL_STATUSES:
            raise MCPError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status {answer.status!r}")
        await methods.cancel(task_id)
        return task_of(await methods.answer_now(task_id))

    async def result(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> dict[str, Any]:
        """What the `tools/call` would have answered, once the task has ended; its questions asked on the way."""
        methods = self._methods(task_id)
        told: list[dict[str, Any]] = []

        async def tell(answer: GetTaskResult) -> None:
            """`notifications/tasks/status` on this request's stream, for each status it has not told."""
            if (task := task_of(answer)) != (told[-1] if told else None):
                told.append(task)
                status = _TaskStatusNotification(params=TaskStatusParams.model_validate(task))
                await ctx.session.send_notification(status, related_request_id=ctx.request_id)

        while (answer := await _until(methods, task_id, _SETTLED, tell)).status == "input_required":
            asking, on = self._round(ctx.session, ctx.request_id, methods, answer)
            # A round on this request's stream ends with it (a later read asks again); another's goes on.
            await (asking if on is not None and on == ctx.request_id else asyncio.shield(asking))
        if answer.status == "cancelled":
            raise MCPError(INTERNAL_ERROR, f"Task {task_id} was cancelled before the tool finished: it has no result.")
        if answer.error is not None:
            raise MCPError(answer.error["code"], answer.error["message"], answer.error.get("data"))
        result = {key: value for key, value in (answer.result or {}).items() if key != "resultType"}
        return {**result, "_meta": {**(result.get("_meta") or {}), RELATED_TASK_META: {"taskId": task_id}}}

    def _round(
        self, session: ServerSession, request_id: Any, methods: TaskReadsAndWrites, answer: GetTaskResult
    ) -> tuple[asyncio.Task[None], Any]:
        """The task's round of questions in flight on this server, and the request whose stream carries
        it: the one that is, else one asked now on the stream of `request_id` (None: the session's
        own). Each question is asked once however many reads see it, and none outlives the task."""
        task_id = answer.task_id
        if (round_ := self._rounds.get(task_id)) is None:
            on = request_id if session.can_send_request else None  # a request answered as JSON has no stream
            asking = asyncio.create_task(_asked_while_open(session, on, methods, task_id, answer.input_requests or {}))
            asking.add_done_callback(lambda _: self._rounds.pop(task_id, None))
            asking.add_done_callback(_log_failed_round)
            round_ = self._rounds[task_id] = (asking, on)
        return round_

    async def list(self, backend: Backend, cursor: str | None) -> dict[str, Any]:
        """The caller's own 2025-11-25 tasks, a page at a time."""
        scope = backend.caller_scope()
        if scope.tag == ANONYMOUS_SCOPE_TAG:
            raise MCPError(
                METHOD_NOT_FOUND,
                "tasks/list is served only to identified callers (a server with auth): anonymous callers would "
                "see each other's tasks. Read a task by its id with tasks/get.",
            )
        prefixes = [workflow_id(tag, HANDSHAKE_TASK_ID_PREFIX) for tag in scope.lookup_tags]
        query = " OR ".join(f"WorkflowId STARTS_WITH '{prefix}'" for prefix in prefixes)
        token = backend.page_token(scope, cursor)
        page = backend.client.list_workflows(query, page_size=LIST_PAGE_SIZE, next_page_token=token)
        try:
            await page.fetch_next_page()
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT:
                raise MCPError(INVALID_PARAMS, "Invalid cursor for tasks/list: pass a nextCursor it answered.") from None
            raise
        tasks = []
        for execution in page.current_page or ():
            with suppress(MCPError):  # expired meanwhile
                task_id = execution.id.rsplit("/", 1)[-1]
                tasks.append(task_of(await self._methods(task_id).answer_now(task_id)))
        listed: dict[str, Any] = {"tasks": tasks}
        if page.next_page_token:
            listed["nextCursor"] = backend.issue_cursor(scope, page.next_page_token)
        return listed

    def _methods(self, task_id: str) -> TaskReadsAndWrites:
        methods = self._methods_of()
        if methods is None or not is_handshake_task(task_id):  # no task tools, or a 2026-07-28 task
            raise task_not_found(task_id)
        return methods


async def _ask(
    session: ServerSession, request_id: Any, methods: TaskReadsAndWrites, task_id: str, requests: dict[str, Any]
) -> None:
    """Send each question of the round to the caller (on the stream of `request_id`); deliver the answers."""
    related = {RELATED_TASK_META: {"taskId": task_id}}
    answers = {}
    for key, request in requests.items():
        if not carries(session, str(request.get("method"))):
            raise MCPError(
                INTERNAL_ERROR,
                f"Task {task_id} asks the caller ({request.get('method')}), which this client did not declare "
                "it can answer at initialize; declare the capability, or cancel the task with tasks/cancel.",
            )
        params = request.get("params") or {}
        stamped = {**request, "params": {**params, "_meta": {**(params.get("_meta") or {}), **related}}}
        answers[key] = await send_ask(session, request_id, key, stamped)
    await methods.update(task_id, answers)


async def _until(
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
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(signalled.event.wait(), timeout=_RECHECK)
            signalled.take()
    if tell is not None:
        await tell(answer)
    return answer


async def _asked_while_open(
    session: ServerSession, request_id: Any, methods: TaskReadsAndWrites, task_id: str, requests: dict[str, Any]
) -> None:
    """`_ask`, given up once the task has ended meanwhile (a cancel, its TTL, an operator): no
    question outlives its task."""
    asking = asyncio.ensure_future(_ask(session, request_id, methods, task_id, requests))
    ended = asyncio.ensure_future(_until(methods, task_id, TERMINAL_STATUSES))
    try:
        await asyncio.wait({asking, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (asking, ended):
            waiting.cancel()
        await asyncio.gather(asking, ended, return_exceptions=True)  # an expired task ends `ended` with not found
    if not asking.cancelled():
        asking.result()  # the answers were delivered, or the error that stopped them


def _log_failed_round(round_: asyncio.Task[None]) -> None:
    """A round failed (the caller answered badly, or left): the next read asks again. (A `tasks/result`
    waiting on it fails with the same error.)"""
    if not round_.cancelled() and (failure := round_.exception()) is not None:
        logger.info("A 2025-11-25 task's questions did not reach an answer: %s", failure)


def _text_of(result: dict[str, Any]) -> str | None:
    texts = [block.get("text") for block in result.get("content") or () if block.get("type") == "text"]
    return "\n".join(text for text in texts if text) or None

