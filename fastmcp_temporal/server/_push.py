"""Push: a task's new status on the `subscriptions/listen` streams that asked for it.

A 2026-07-28 client opted in to the tasks extension may open a `subscriptions/listen`
stream naming task ids (`notifications.taskIds`, the tasks extension's filter key).
The stream is acknowledged with the ids that name a task of the caller's own scope (a
missing, expired or foreign id is left out, as `tasks/get` finds none of them), then
carries each such task's status as `notifications/tasks` (the wire of a `tasks/get`
answer): at once, then whenever a client could distinguish it from the last one sent, until
the task is terminal. The stream ends (its result) once every task it follows is.

A listened task is followed for every event of its history at once (not for its close
alone, as a new task is), so an ask and the close each wake its streams within
milliseconds through a change signal (`TaskChanges.changed`, keyed by workflow id: a
watch's long poll seeing an event that changes an answer, or a write through this server).
Unsignalled, a stream re-reads a task when this server's copy of it is due a re-read, as a
held `tasks/get` would while this server follows it (a running leg's progress adds no event:
`_watch.Watch.due`; such a read costs one `describe()` however many streams and reads share
it), else at the task's poll interval, as a polling client would. Its reads are the ones a
client's `tasks/get` makes, without holding, so a
listened task costs Temporal about what a polled one costs. No core change notification
(tools, prompts, resources) is honored: FastMCP publishes none on a listen stream.

One caller (`_scope.caller_key`: its token's identity, else its address) holds at most
`listen_streams_per_caller` streams at once, well below the server's `MAX_STREAMS`, so a caller
that opens streams without end is refused its own next one and never reaches the server's limit
alone: every other caller's listen is still served.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from fastmcp.server.dependencies import bind_request_context
from fastmcp.server.extensions import read_client_extension_settings
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    Notification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from fastmcp_temporal._fastmcp_private import GetTaskResult
from fastmcp_temporal.server._changes import Read
from fastmcp_temporal.server._scope import current_caller, is_2025_11_25_task
from fastmcp_temporal.server._status import TERMINAL_STATUSES
from fastmcp_temporal.server._task_reads import TaskReads
from fastmcp_temporal.server._watch import Shown, shown_of
from fastmcp_temporal.server._wire import status_notification

logger = logging.getLogger("fastmcp_temporal")

TASK_IDS_KEY = "taskIds"
TASK_STATUS_METHOD = "notifications/tasks"
# Open streams at once on one server, and tasks one stream follows (further ids are not honored).
MAX_STREAMS = 1024
MAX_TASKS_PER_STREAM = 256
PER_CALLER_SETTING = "FASTMCP_TEMPORAL_LISTEN_STREAMS_PER_CALLER"
# A stream re-reads a followed task at most this often, whatever its copy says.
_SHORTEST_REREAD = 0.25


class TaskPush:
    """Serves `subscriptions/listen` for task ids, while the extension runs (`methods_of`)."""

    def __init__(
        self, methods_of: Callable[[], TaskReads | None], recheck: Callable[[], float], per_caller: Callable[[], int]
    ) -> None:
        self._methods_of = methods_of
        self._recheck = recheck
        self._per_caller = per_caller
        self._open: Counter[str] = Counter()

    async def serve(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """Serve one listen stream: acknowledge, then push its tasks' statuses until all are terminal."""
        if ctx.request_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(INVALID_PARAMS, "subscriptions/listen requires protocol version 2026-07-28")
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        with bind_request_context(ctx):
            caller = current_caller()
            self._check_room(caller)
            self._open[caller] += 1
            try:
                await _Stream(ctx, meta, self._methods_of(), self._recheck()).run(_requested_task_ids(ctx, params))
            finally:
                self._open[caller] -= 1
                if not self._open[caller]:
                    del self._open[caller]
        return SubscriptionsListenResult(_meta=meta)

    def _check_room(self, caller: str) -> None:
        """Refuse a stream past the caller's limit, or, as a backstop, past the server's."""
        limit = self._per_caller()
        if self._open[caller] >= limit:
            raise MCPError(
                INTERNAL_ERROR,
                f"You have {limit:,} subscriptions/listen streams open on this server, its limit per caller "
                f"(listen_streams_per_caller); end one before opening another (one stream follows up to "
                f"{MAX_TASKS_PER_STREAM} tasks), or raise {PER_CALLER_SETTING} on the server.",
            )
        if self._open.total() >= MAX_STREAMS:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")


def _requested_task_ids(ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams) -> list[str]:
    """The task ids a listen request asks for (never a 2025-11-25 task's); none from a client not
    opted in to the tasks extension."""
    if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
        return []
    ids = (params.notifications.model_extra or {}).get(TASK_IDS_KEY)
    if not isinstance(ids, list):
        return []
    ours = (task_id for task_id in ids if isinstance(task_id, str) and not is_2025_11_25_task(task_id))
    unique = dict.fromkeys(ours)
    return list(unique)[:MAX_TASKS_PER_STREAM]


class _Stream:
    """One listen stream's tasks, what it last sent of each, and when each is next re-read unsignalled."""

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], meta: dict[str, Any], methods: TaskReads | None, recheck: float
    ) -> None:
        self._ctx = ctx
        self._meta = meta
        self._methods = methods
        self._recheck = recheck
        self._sent: dict[str, Shown] = {}
        self._reads: dict[str, Read] = {}

    async def run(self, requested: list[str]) -> None:
        methods = self._methods
        if methods is None or not requested:
            await self._acknowledge([])
            return
        keys = {methods.key_of(task_id): task_id for task_id in requested}
        # Follow before the first read, so a change between the two is not missed.
        with methods.changes.following(list(keys)) as signalled:
            for task_id in requested:
                await methods.follow_every_event(task_id)
            answers = await self._read(requested, drop_unreadable=True)
            await self._acknowledge(list(answers))
            live = await self._push(answers)
            while live and not methods.changes.closed.is_set():
                reads = {methods.key_of(task_id): self._reads[task_id] for task_id in live}
                changed, due = await methods.next_change(signalled, reads, float("inf"))
                answers = await self._read([task_id for task_id in live if methods.key_of(task_id) in changed | due])
                still_live = await self._push(answers)
                live = [task_id for task_id in live if task_id not in answers or task_id in still_live]

    async def _read(self, task_ids: list[str], *, drop_unreadable: bool = False) -> dict[str, GetTaskResult | None]:
        """Each task's answer now; a task no longer found is dropped, one Temporal failed to read is
        kept unread (None), unless `drop_unreadable`. Each is next re-read unsignalled when its copy
        is due (`KnownTasks.next_change`: as a held read would re-read it while this server hears it
        change, else after its poll interval, as a polling client would)."""
        assert self._methods is not None
        answers: dict[str, GetTaskResult | None] = {}
        for task_id in task_ids:
            try:
                answers[task_id] = answer = await self._methods.answer_now(task_id)
            except MCPError:
                continue  # not the caller's, or expired: never followed, or no longer
            except Exception:  # Temporal failed this read: the next recheck tries again
                logger.warning("A listen stream could not read task %s", task_id, exc_info=True)
                if drop_unreadable:
                    continue
                answers[task_id] = answer = None
            now = asyncio.get_running_loop().time()
            self._reads[task_id] = Read(now + _SHORTEST_REREAD, now + self._unheard_for(answer))
        return answers

    def _unheard_for(self, answer: GetTaskResult | None) -> float:
        """How long a task this server does not hear change goes unread: its poll interval, as a polling
        client would, and at least `read_recheck`."""
        if answer is None or answer.poll_interval_ms is None:
            return self._recheck
        return max(answer.poll_interval_ms / 1000, self._recheck)

    async def _push(self, answers: dict[str, GetTaskResult | None]) -> list[str]:
        """Send each answer a client could distinguish from the last one sent; the tasks still live."""
        live = []
        for task_id, answer in answers.items():
            if answer is None:
                live.append(task_id)
                continue
            if self._sent.get(task_id) != (shown := shown_of(answer)):
                await self._send(_status_notification(answer, self._meta))
                self._sent[task_id] = shown
            if answer.status not in TERMINAL_STATUSES:
                live.append(task_id)
        return live

    async def _acknowledge(self, task_ids: list[str]) -> None:
        honored = SubscriptionFilter.model_validate({TASK_IDS_KEY: task_ids})
        params = SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=self._meta)
        await self._send(SubscriptionsAcknowledgedNotification(params=params))

    async def _send(self, notification: Any) -> None:
        await self._ctx.session.send_notification(notification, related_request_id=self._ctx.request_id)


def _status_notification(answer: GetTaskResult, meta: dict[str, Any]) -> Notification[Any, str]:
    """`notifications/tasks`: the task as `tasks/get` answers it (without its result type), stamped."""
    fields = answer.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type"})
    return status_notification(TASK_STATUS_METHOD, {**fields, "_meta": meta})
