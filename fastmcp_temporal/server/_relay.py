"""What a durable synchronous call relays to its caller while it waits.

The server that holds a `tools/call` open for a workflow (`_sync_calls.py`) follows the
call's history (one long poll of every event, whose close answers the call as
`handle.result()` would, without a second read: `_close.py`) and gives the caller what the
same tool gives inline:

- **Log messages and progress.** The leg puts the body's `ctx.log` messages and, when the
  caller sent a `progressToken`, its `ctx.report_progress` reports in its heartbeat details
  (`worker/_notices.py`). While a leg runs, the server describes the workflow every
  `DESCRIBE_EVERY` and sends what is new through the request's own `Context`, so a
  message honours the session's `logging/setLevel` as an inline one does; the leg's
  outcome (its `ActivityTaskCompleted` event) carries what its last heartbeat may have
  missed, relayed before the call answers. Notices come in order, each once; what a
  heartbeat window could not hold between two reads is counted in one warning.
- **Keep-alive.** A request with a `progressToken` that got no progress for
  `sync_call_keepalive` gets one: the tool's last message (or "still running") at a value
  just above the last one sent, so a client that resets its timeout on progress keeps
  waiting, and the token's values only grow.
- **A deadline.** `follow` may stop at `answer_after` (never while a question waits for the
  caller), leaving the workflow running, with the tool's last message in `status`.
- **Questions.** On a 2025-11-25-era connection that carries server-to-client requests (a
  stateful session whose client declared elicitation, sampling or roots), a tool's ask
  parks the workflow as a task's does. The server sees the park (the memo upsert event),
  sends each request to the caller on the open call, and delivers the answers as the one
  `submit_input` signal `tasks/update` sends (`_answers.submit_answers`). An invalid
  answer gets the -32602 `tasks/update` gives, a client's error is the call's error; each
  cancels the workflow. An ask the connection cannot carry (`CallerChannel.carried_asks`)
  never parks: the leg fails the workflow with the reason, and the call gets the inline
  call's refusal (one a worker of an earlier release parks gets it too, and is cancelled).
  The run's close withdraws the questions still open: whatever closes it ends the call.
  A caller that joins a rejoinable call reads its history from the start: it is asked only
  what the workflow still waits for, never a round answered before it joined.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

from fastmcp_temporal._fastmcp_private import result_type_for_method
from fastmcp_temporal.server._answers import invalid_answer, submit_answers, validated_answer
from fastmcp_temporal.server._backend import Backend
from fastmcp_temporal.server._close import is_close, next_run, result_of
from fastmcp_temporal.server._known import described
from fastmcp_temporal.workflows.models import INPUT_REQUESTS_MEMO, LegOutcome, TaskOutcome

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from mcp.server.session import ServerSession

logger = logging.getLogger("fastmcp_temporal")

DESCRIBE_EVERY = timedelta(seconds=1)
# The client capability each kind of ask needs, by its method.
_CAPABILITY_OF = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
_LEG_ENDS = frozenset(
    {
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
    }
)


class AskNotCarried(Exception):
    """The tool asked something this connection cannot carry: the call answers as inline."""

    def __init__(self, ask: mcp_types.InputRequiredResult) -> None:
        super().__init__("the connection cannot carry the tool's ask")
        self.ask = ask


@dataclass(frozen=True)
class CallerChannel:
    """What the caller's connection can be sent while the call waits."""

    progress: bool
    """The request carries a `progressToken`."""
    carried_asks: list[str] | None = None
    """The ask methods server-to-client requests carry to a 2025-11-25-era caller (a stateful session
    with the capability); None for a 2026-07-28 caller, who answers an ask by calling again (SEP-2322)."""

    @property
    def asks(self) -> bool:
        """An ask reaches the caller on the open call."""
        return bool(self.carried_asks)

    @classmethod
    def of(cls, context: Context) -> CallerChannel:
        request = context.request_context
        if request is None:
            return cls(progress=False)
        progress = (request.meta or {}).get("progressToken") is not None
        return cls(progress=progress, carried_asks=_carried_asks(request.session, request.protocol_version))


def _carried_asks(session: ServerSession, protocol_version: str) -> list[str] | None:
    """The ask methods a 2025-11-25-era caller's back-channel carries: those of its declared capabilities."""
    if protocol_version in MODERN_PROTOCOL_VERSIONS:
        return None
    if not session.can_send_request:
        return []
    return [method for method in _CAPABILITY_OF if carries(session, method)]


@dataclass
class Relay:
    """Follows one call's workflow for its caller: notices as they come, asks as they park it."""

    backend: Backend
    context: Context
    channel: CallerChannel
    input_bytes: int
    current_round_only: bool = False
    """Ask only what the workflow waits for now: a caller joining a call others started reads its
    history from the start, and a round answered before is not asked again (`_open_now`)."""
    run: WorkflowHandle[Any, Any] | None = None
    """The run followed last: the one whose close ends the call."""
    status: str | None = None
    """The message the tool reported last (its progress message), as far as this request saw."""
    _relayed: dict[str, int] = field(default_factory=dict)  # the last notice relayed, per stream
    _sending: asyncio.Lock = field(default_factory=asyncio.Lock)
    _progress_sent: tuple[float, float | None] | None = None  # the last progress and total sent
    _progress_at: float = field(default_factory=time.monotonic)
    _open_questions: int = 0
    _no_question: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(
        self, handle: WorkflowHandle[Any, TaskOutcome], answer_after: timedelta | None = None
    ) -> TaskOutcome | None:
        """Relay until the workflow closes (through any continue-as-new); then its outcome, read
        from the close event in hand as `handle.result()` would read it again (`_close`). None
        when `answer_after` passed first (with no question open): the workflow runs on."""
        following = anyio.CancelScope()
        keepalive = asyncio.create_task(self._keep_alive()) if self.channel.progress else None
        deadline = asyncio.create_task(self._stop_at(answer_after, following)) if answer_after else None
        try:
            with following:
                return await self._follow(handle)
            return None
        finally:
            await _stop(keepalive)
            await _stop(deadline)

    async def _follow(self, handle: WorkflowHandle[Any, TaskOutcome]) -> TaskOutcome:
        client = self.backend.client
        run = client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
        while True:
            self.run = run
            closed = await self._follow_run(run)
            if not is_close(closed):  # a history that ended before its close: Temporal sends none
                return await handle.result()
            if not (new_run := next_run(closed)):
                return await result_of(closed, client, handle.id, TaskOutcome)
            run = client.get_workflow_handle(handle.id, run_id=new_run)

    async def _follow_run(self, run: WorkflowHandle[Any, Any]) -> HistoryEvent | None:
        """Relay one run's events; its close event.

        A round's questions are asked beside the history, not in its way: the run's close
        ends the questions still open, and an ask that fails ends the following.
        """
        leg: asyncio.Task[None] | None = None
        last: HistoryEvent | None = None
        failed: list[Exception] = []
        try:
            async with anyio.create_task_group() as asking:
                async for event in run.fetch_history_events(wait_new_event=True, skip_archival=True):
                    last = event
                    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                        leg = asyncio.create_task(self._watch_leg(run))
                    elif event.event_type in _LEG_ENDS:
                        await _stop(leg)
                        leg = None
                        if event.HasField("activity_task_completed_event_attributes"):
                            await self._relay_outcome(event)
                    elif event.HasField("workflow_properties_modified_event_attributes"):
                        asking.start_soon(self._relay_ask_or_stop, run, event, asking.cancel_scope, failed)
                asking.cancel_scope.cancel()  # the run closed: nobody can answer its open questions
        finally:
            await _stop(leg)
        if failed:
            raise failed[0]
        return last

    async def _relay_ask_or_stop(
        self, run: WorkflowHandle[Any, Any], event: HistoryEvent, following: anyio.CancelScope, failed: list[Exception]
    ) -> None:
        """`_relay_ask`; an error it raises stops following the run, to be raised in its place."""
        try:
            await self._relay_ask(run, event)
        except Exception as exc:
            failed.append(exc)
            following.cancel()

    # --- notices -------------------------------------------------------------------------

    async def _watch_leg(self, run: WorkflowHandle[Any, Any]) -> None:
        """While the leg runs, relay what its heartbeats carry, read every `DESCRIBE_EVERY`."""
        converter = self.backend.client.data_converter
        while True:
            await asyncio.sleep(DESCRIBE_EVERY.total_seconds())
            try:
                description = await run.describe()
                for pending in description.raw_description.pending_activities:
                    if pending.heartbeat_details.payloads:
                        (details,) = await converter.decode(pending.heartbeat_details.payloads)
                        if isinstance(details, dict):
                            self.status = details.get("statusMessage") or self.status
                            await self._relay_notices(details.get("notices"))
            except Exception as exc:  # a read that failed: the next one, or the outcome, relays it
                logger.debug("Could not read the progress of call %s: %s", run.id, exc)

    async def _relay_outcome(self, event: HistoryEvent) -> None:
        """The notices the finished leg's last heartbeat may have missed."""
        payloads = event.activity_task_completed_event_attributes.result.payloads
        try:
            (outcome,) = await self.backend.client.data_converter.decode(payloads, [LegOutcome])
        except Exception as exc:  # unreadable here (its store is away): its late notices are lost
            logger.warning("Could not read the leg outcome of a durable call for its notices: %s", exc)
            return
        if isinstance(outcome, LegOutcome):
            await self._relay_notices(outcome.notices)

    async def _relay_notices(self, window: Any) -> None:
        """Send the notices of `window` not sent yet, in order (`worker/_notices.LegNotices.window`)."""
        if not isinstance(window, dict) or not isinstance(window.get("notices"), list):
            return
        stream = str(window.get("stream"))
        async with self._sending:
            last = self._relayed.get(stream, 0)
            fresh = [notice for notice in window["notices"] if notice[0] > last]
            if not fresh:
                return
            if (missed := fresh[0][0] - last - 1) > 0:
                await self.context.log(
                    f"{missed} log message(s) or progress report(s) of the tool were not relayed: it sent more "
                    "than a durable call relays between two reads (see the docs' Durable synchronous calls)",
                    "warning",
                    "fastmcp_temporal",
                )
            for seq, kind, data in fresh:
                self._relayed[stream] = seq
                await self._send(kind, data)

    async def _send(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "log":
            await self.context.log(data["message"], data["level"], data.get("logger"), data.get("extra"))
        elif kind == "progress":
            self.status = data.get("message") or self.status
            if self.channel.progress:
                await self._report(data["progress"], data.get("total"), data.get("message"))

    async def _report(self, progress: float, total: float | None, message: str | None) -> None:
        """Send a progress notification, its value above every one sent before on this token."""
        if self._progress_sent is not None:
            progress = max(progress, math.nextafter(self._progress_sent[0], math.inf))
        self._progress_sent = (progress, total)
        self._progress_at = time.monotonic()
        await self.context.report_progress(progress, total, message)

    async def _keep_alive(self) -> None:
        """A progress notification whenever none was sent for `sync_call_keepalive`."""
        period = self.backend.settings.sync_call_keepalive.total_seconds()
        while True:
            await asyncio.sleep(max(0.0, self._progress_at + period - time.monotonic()))
            async with self._sending:
                if time.monotonic() - self._progress_at < period:
                    continue  # the tool's own report came meanwhile
                progress, total = self._progress_sent or (0.0, None)
                value = math.nextafter(progress, math.inf) if self._progress_sent else progress
                try:
                    await self._report(value, total, self.status or "still running")
                except Exception as exc:  # the caller went away: the call's own answer fails too
                    logger.debug("Could not send a keep-alive to the caller: %s", exc)
                    return

    async def _stop_at(self, answer_after: timedelta, following: anyio.CancelScope) -> None:
        """Stop following at `answer_after`, or once the question open then is answered."""
        await asyncio.sleep(answer_after.total_seconds())
        while self._open_questions:
            await self._no_question.wait()
        following.cancel()

    # --- questions -------------------------------------------------------------------------

    async def _relay_ask(self, run: WorkflowHandle[Any, Any], event: HistoryEvent) -> None:
        """A park (the memo's `inputRequests` set): ask the caller, signal the answers."""
        fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
        if INPUT_REQUESTS_MEMO not in fields:
            return
        (requests,) = await self.backend.client.data_converter.decode([fields[INPUT_REQUESTS_MEMO]])
        if requests and self.current_round_only:
            requests = await _open_now(run, requests)
        if not requests:
            return  # the round was answered: the next leg runs
        self._open_questions += 1
        self._no_question.clear()
        try:
            answers = {key: await self._ask(key, request, requests) for key, request in requests.items()}
            await submit_answers(self.backend, run, answers, self.input_bytes)  # False: closed meanwhile
        finally:
            self._open_questions -= 1
            if not self._open_questions:
                self._no_question.set()

    async def _ask(self, key: str, request: dict[str, Any], requests: dict[str, Any]) -> dict[str, Any]:
        """Send one request to the caller on the open call; its answer, validated as `tasks/update` does."""
        session = self.context.session
        if not carries(session, str(request.get("method"))):
            raise AskNotCarried(_ask_of(requests))
        assert self.context.request_context is not None
        answer = await send_ask(session, self.context.request_context.request_id, key, request)
        return validated_answer(key, request, answer)


def per_request_session(session: ServerSession) -> bool:
    """Whether the session lives for one request only (a stateless server, `stateless_http=True`):
    it has no stream to ask on, and no later request of the caller belongs to it."""
    return not session.can_send_request and session.client_capabilities is None


def carries(session: ServerSession, method: str) -> bool:
    """Whether the caller declared the capability a server-to-client request of `method` needs."""
    needed = _CAPABILITY_OF.get(method)
    capabilities = session.client_capabilities
    return needed is not None and capabilities is not None and bool(getattr(capabilities, needed))


async def send_ask(session: ServerSession, request_id: Any, key: str, request: dict[str, Any]) -> dict[str, Any]:
    """Send the ask `key` to the caller as a server-to-client request on the open request `request_id`;
    its answer as the client sent it (-32602 when it is not an answer to `request` at all)."""
    metadata = ServerMessageMetadata(related_request_id=request_id)
    outgoing = mcp_types.server_request_adapter.validate_python(request)
    result_type = result_type_for_method(str(request.get("method")))
    try:
        answer = await session.send_request(outgoing, result_type, metadata=metadata)
    except ValidationError as exc:
        raise invalid_answer(key, request, exc) from None
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True)


async def _open_now(run: WorkflowHandle[Any, Any], requests: dict[str, Any]) -> dict[str, Any]:
    """Those of a round's `requests` the run still waits for: none of a round answered since."""
    _, memo = await described(run)
    open_now = memo.open_requests()
    return {key: request for key, request in requests.items() if key in open_now}


def _ask_of(requests: dict[str, Any]) -> mcp_types.InputRequiredResult:
    return mcp_types.InputRequiredResult.model_validate({"resultType": "input_required", "inputRequests": requests})


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
