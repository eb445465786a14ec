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
  each change of status it sees as `notifications/tasks/status` on its stream), and answers
  exactly what the `tools/call` would have answered (its result, stamped with the related-task
  `_meta`, or its JSON-RPC error). A task that asks is `input_required`: its round of questions
  is this server's (`_asks_2025_11_25.Round`), not a request's, and goes to the caller as
  server-to-client requests carrying the related-task `_meta`, on one open `tasks/result` at a
  time, or on the GET stream of each session that polls `tasks/get` while it holds one (as
  ext-tasks does). A round is asked until it is answered or its task ends: when the stream
  asking it closes unanswered (a withdrawn request, a dropped connection: mcp tells nobody, so
  each asking checks its stream), a waiting or later `tasks/result` of the caller asks it; its
  answers reach the workflow once, as the one `submit_input` signal `tasks/update` sends;
- `tasks/list` lists the caller's own tasks of this era, a page at a time, each as its visibility
  row shows it; `tasks/cancel` reads the task once, cancels the workflow, and refuses a task
  already ended with -32602.

The era is in the task id (`2025-11-25.` before the random part): a task created on one era is
not found by the other era's methods, and a caller's list is one visibility query by prefix.
mcp's runner sieves every 2025-11-25 `tools/call` result through that era's `CallToolResult`,
so a task-augmented call answers a `CallToolResult` whose `_meta` carries the `CreateTaskResult`,
which a server middleware (`middleware`), the one tier that sees the result after that sieve,
answers in its place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from starlette.requests import Request
from temporalio.service import RPCError, RPCStatusCode

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import (
    CreateTaskResult,
    GetTaskResult,
    connection_of,
    holds_get_stream,
)
from fastmcp_temporal.server._asks_2025_11_25 import (
    RELATED_TASK_META,
    Round,
    ask_round,
    log_failed_asking,
    until,
    why_unaskable,
)
from fastmcp_temporal.server._backend import Backend, temporal_errors
from fastmcp_temporal.server._creation import StartedWorkflow, start_task
from fastmcp_temporal.server._plan import plan_task
from fastmcp_temporal.server._relay import carries
from fastmcp_temporal.server._scope import (
    ANONYMOUS_SCOPE_TAG,
    TASK_ID_PREFIX_2025_11_25,
    VERSION_2025_11_25,
    is_2025_11_25_task,
    new_task_id,
    task_not_found,
    workflow_id,
)
from fastmcp_temporal.server._status import SETTLED_STATUSES
from fastmcp_temporal.server._task_reads import TaskReads
from fastmcp_temporal.server._wire import status_notification

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.tools.base import Tool
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from temporalio.client import WorkflowExecution

LIST_PAGE_SIZE = 50
STATUS_METHOD = "notifications/tasks/status"
# Where a task-augmented call's `CallToolResult` carries its `CreateTaskResult` to the middleware.
_CREATED_META = "fastmcp-temporal/created-task"


class TaskReadsAndWrites(TaskReads, Protocol):
    """What this era needs of the task methods: what a listen stream reads, and the writes."""

    async def get(self, task_id: str) -> GetTaskResult: ...

    async def update(self, task_id: str, responses: dict[str, Any]) -> Any: ...

    async def cancel_unless_ended(self, task_id: str) -> tuple[GetTaskResult, bool]: ...

    async def listed(self, execution: WorkflowExecution) -> GetTaskResult | None: ...

    def watch(self, created: CreateTaskResult, started: StartedWorkflow) -> CreateTaskResult: ...


def asks_for_task(protocol_version: str | None, params: Mapping[str, Any] | None) -> bool:
    """A `tools/call` with `params` asks for a 2025-11-25 task (an older era's `task` is ignored, as the
    spec says of a receiver without tasks)."""
    return protocol_version == VERSION_2025_11_25 and (params or {}).get("task") is not None


def creation_requested(context: Context) -> bool:
    """The `tools/call` `context` serves asks for a 2025-11-25 task."""
    request = context.request_context
    params = _fastmcp_private.raw_request_params(context)
    return request is not None and asks_for_task(request.protocol_version, params)


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


class Tasks2025_11_25:
    """Serves the 2025-11-25 tasks while the extension runs (`methods_of`)."""

    def __init__(self, methods_of: Callable[[], TaskReadsAndWrites | None], lists: Callable[[], bool]) -> None:
        self._methods_of = methods_of
        self._lists = lists  # callers are identified (the server has auth): `tasks/list` is declared
        self._rounds: dict[str, Round] = {}  # the questions in flight, by task id

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Declare the tasks capability to every 2025-11-25 client; answer a task-augmented `tools/call`
        with the `CreateTaskResult` the interceptor created (`create`)."""
        if ctx.method == "initialize":
            return self._with_tasks_capability(await call_next(ctx))
        answered = await call_next(ctx)
        if ctx.method != "tools/call" or not asks_for_task(ctx.protocol_version, ctx.params):
            return answered
        created = (answered.get("_meta") or {}).get(_CREATED_META) if isinstance(answered, dict) else None
        return answered if created is None else created  # none: the call's own answer (bad arguments)

    def _with_tasks_capability(self, result: HandlerResult) -> HandlerResult:
        if not isinstance(result, dict) or result.get("protocolVersion") != VERSION_2025_11_25:
            return result
        tasks: dict[str, Any] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
        if self._lists():
            tasks["list"] = {}
        return {**result, "capabilities": {**result.get("capabilities", {}), "tasks": tasks}}

    async def create(
        self, backend_of: Callable[[], Backend], tool: Tool, arguments: dict[str, Any] | None, context: Context
    ) -> mcp_types.CallToolResult:
        """Start the task a task-augmented call asks for: its `CreateTaskResult`, in the `_meta` of the
        `CallToolResult` mcp lets through, for `middleware` to answer."""
        if not tool.task_config.supports_tasks():
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Tool {tool.name!r} does not run as a task (its execution.taskSupport is 'forbidden'): "
                "call it without `task`.",
            )
        with temporal_errors("start the task"):
            task_id = new_task_id(TASK_ID_PREFIX_2025_11_25)
            plan = await plan_task(context.fastmcp, tool)
            answer, started = await start_task(backend_of(), plan, arguments, context, task_id=task_id)
        methods = self._methods_of()
        created = {"task": task_of(answer if methods is None else methods.watch(answer, started))}
        return mcp_types.CallToolResult(content=[], _meta={_CREATED_META: created})

    # --- the task methods ----------------------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> dict[str, Any]:
        """The task; one that asks has its questions sent to the caller at once, on the session's GET
        stream while it holds one, for a client that polls and never calls `tasks/result` (the spec
        lets it)."""
        methods = self._methods(task_id)
        answer = await methods.get(task_id)
        requests = answer.input_requests or {}
        if requests and all(carries(ctx.session, str(request.get("method"))) for request in requests.values()):
            self._ask_on_session(ctx, methods, answer)
        return task_of(answer)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        """Cancel the task; one that has ended is refused with -32602, as the spec says."""
        answer, cancelled = await self._methods(task_id).cancel_unless_ended(task_id)
        if not cancelled:
            raise MCPError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status {answer.status!r}")
        return task_of(answer)

    async def result(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> dict[str, Any]:
        """What the `tools/call` would have answered, once the task has ended; its questions asked on the way."""
        methods = self._methods(task_id)
        told: list[tuple[str, str | None]] = []

        async def tell(answer: GetTaskResult) -> None:
            """`notifications/tasks/status` on this request's stream, for each change of status (or of
            its message) it has not told: never a read's time alone."""
            task = task_of(answer)
            if (change := (task["status"], task.get("statusMessage"))) != (told[-1] if told else None):
                told.append(change)
                notification = status_notification(STATUS_METHOD, task)
                await ctx.session.send_notification(notification, related_request_id=ctx.request_id)

        while (answer := await until(methods, task_id, SETTLED_STATUSES, tell)).status == "input_required":
            await self._asked_on_request(ctx, methods, answer)
        if answer.status == "cancelled":
            raise MCPError(INTERNAL_ERROR, f"Task {task_id} was cancelled before the tool finished: it has no result.")
        if answer.error is not None:
            raise MCPError(answer.error["code"], answer.error["message"], answer.error.get("data"))
        result = {key: value for key, value in (answer.result or {}).items() if key != "resultType"}
        return {**result, "_meta": {**(result.get("_meta") or {}), RELATED_TASK_META: {"taskId": task_id}}}

    async def _asked_on_request(
        self, ctx: ServerRequestContext[Any, Any], methods: TaskReadsAndWrites, answer: GetTaskResult
    ) -> None:
        """Returns once the questions of `answer` are answered or its task has ended. Meanwhile they are
        asked on this request's stream whenever no other open `tasks/result` nor GET stream of the
        caller's asks them: when that one is withdrawn or its connection closes unanswered, a waiting
        `tasks/result` asks them next."""
        requests = answer.input_requests or {}
        if (refusal := why_unaskable(ctx.session, answer.task_id, requests)) is not None:
            raise refusal
        round_ = self._round_of(answer.task_id, requests)
        round_.waiting += 1
        try:
            while not round_.over.is_set():
                if round_.carrier is None and not round_.on_sessions:
                    await self._carry(ctx, methods, round_)
                else:
                    await round_.changed()
        finally:
            round_.waiting -= 1
            round_.forget_if_idle()

    async def _carry(self, ctx: ServerRequestContext[Any, Any], methods: TaskReadsAndWrites, round_: Round) -> None:
        """Ask the round on this request's stream (the session's own for a request answered as JSON)
        until it is answered, its task ends, or this request's connection closes."""
        carrier = object()
        round_.carrier = carrier
        on = ctx.request_id if ctx.session.can_send_request else None
        request = ctx.request
        closed = request.is_disconnected if isinstance(request, Request) else None
        try:
            await ask_round(ctx.session, on, methods, round_, closed)
        finally:
            round_.release(carrier)

    def _ask_on_session(
        self, ctx: ServerRequestContext[Any, Any], methods: TaskReadsAndWrites, answer: GetTaskResult
    ) -> None:
        """Ask the questions of `answer` on the session's GET stream, once per session, unless an open
        `tasks/result` asks them or the session holds no GET stream (its next `tasks/result` is asked)."""
        request = ctx.request
        if holds_get_stream(request) is False:
            return
        round_ = self._round_of(answer.task_id, answer.input_requests or {})
        connection = id(connection_of(ctx.session))
        if round_.carrier is not None or connection in round_.on_sessions:
            return

        async def get_stream_closed() -> bool:
            return holds_get_stream(request) is False

        asking = asyncio.create_task(ask_round(ctx.session, None, methods, round_, get_stream_closed))
        round_.on_sessions[connection] = asking

        def ended(_: asyncio.Task[None]) -> None:
            if round_.on_sessions.get(connection) is asking:
                del round_.on_sessions[connection]
                round_.let_go()
            log_failed_asking(asking)

        asking.add_done_callback(ended)

    def _round_of(self, task_id: str, requests: dict[str, Any]) -> Round:
        """The task's round of questions in flight on this server; a new one when its questions changed."""
        round_ = self._rounds.get(task_id)
        if round_ is None or round_.over.is_set() or round_.requests != requests:
            if round_ is not None:
                round_.finish()  # answered elsewhere: its questions are asked no more
            round_ = self._rounds[task_id] = Round(task_id, requests, self._forget)
        return round_

    def _forget(self, round_: Round) -> None:
        if self._rounds.get(round_.task_id) is round_:
            del self._rounds[round_.task_id]

    async def list(self, backend: Backend, cursor: str | None) -> dict[str, Any]:
        """The caller's own 2025-11-25 tasks, a page at a time, each as its visibility row shows it."""
        scope = backend.caller_scope()
        if scope.tag == ANONYMOUS_SCOPE_TAG:
            raise MCPError(
                METHOD_NOT_FOUND,
                "tasks/list is served only to identified callers (a server with auth): anonymous callers would "
                "see each other's tasks. Read a task by its id with tasks/get.",
            )
        prefixes = [workflow_id(tag, TASK_ID_PREFIX_2025_11_25) for tag in scope.lookup_tags]
        query = " OR ".join(f"WorkflowId STARTS_WITH '{prefix}'" for prefix in prefixes)
        token = backend.page_token(scope, cursor)
        page = backend.client.list_workflows(query, page_size=LIST_PAGE_SIZE, next_page_token=token)
        try:
            await page.fetch_next_page()
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT:
                raise MCPError(INVALID_PARAMS, "Invalid cursor for tasks/list: pass a nextCursor it answered.") from None
            raise
        methods, rows = self._methods_of(), page.current_page or ()
        answers = [await methods.listed(execution) for execution in rows] if methods is not None else []
        listed: dict[str, Any] = {"tasks": [task_of(answer) for answer in answers if answer is not None]}
        if page.next_page_token:
            listed["nextCursor"] = backend.issue_cursor(scope, page.next_page_token)
        return listed

    def _methods(self, task_id: str) -> TaskReadsAndWrites:
        methods = self._methods_of()
        if methods is None or not is_2025_11_25_task(task_id):  # no task tools, or a 2026-07-28 task
            raise task_not_found(task_id)
        return methods




def _text_of(result: dict[str, Any]) -> str | None:
    texts = [block.get("text") for block in result.get("content") or () if block.get("type") == "text"]
    return "\n".join(text for text in texts if text) or None

