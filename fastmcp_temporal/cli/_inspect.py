"""What `tasks show` reads of one task from its history: legs, input rounds, answers, how it ended.

The history is the record: each leg is an activity scheduled, each round of input a
leg's outcome asking (or, for a run continued as new, the round it took over, in its
memo), each answer a signal, the end the closing event. A closing outcome that can be
read beats the published search attribute; a termination by a server (`server/_stalled.py`)
reads as the task's expiry or cancel, one by an operator as a failure with its reason.
Payloads encrypted with a key the command does not hold are left out, and said to be.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from fastmcp_temporal.cli._reading import UNREADABLE, FoundTask, decoded, field, row
from fastmcp_temporal.server._stalled import CANCELLED_REASON, EXPIRED_REASON
from fastmcp_temporal.workflows.models import INPUT_REQUESTS_MEMO, SUBMIT_INPUT_SIGNAL


async def inspect(client: Client, task: FoundTask, ui_url: str) -> dict[str, Any]:
    """The task as `tasks show` shows it: its row, then what its history holds, and its UI link."""
    shown = row(task.description)
    shown["status"] = task.status()
    history = await task.handle.fetch_history()
    legs, requests, answers, closing = 0, [], [], None
    readable = True
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attributes = event.workflow_execution_started_event_attributes
            started = await decoded(client, attributes.input.payloads[:1])  # the task, not its arguments
            legs = _legs_before_this_run(started)
            asks = attributes.memo.fields.get(INPUT_REQUESTS_MEMO)
            carried = await _open_round_requests(client, started, asks)
            readable &= carried is not UNREADABLE
            requests += carried if isinstance(carried, list) else []
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            legs += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            outcome = await decoded(client, event.activity_task_completed_event_attributes.result.payloads)
            readable &= outcome is not UNREADABLE
            for key, request in field(outcome, "input_requests").items():
                requests.append({"leg": legs, "key": key, "request": request})
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == SUBMIT_INPUT_SIGNAL:
                answered = await decoded(client, signal.input.payloads)
                readable &= answered is not UNREADABLE
                answers += [{"key": k, "answer": v} for k, v in field(answered, "answers").items()]
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            closing = await decoded(
                client, event.workflow_execution_completed_event_attributes.result.payloads
            )
            readable &= closing is not UNREADABLE
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            closing = _terminated(event.workflow_execution_terminated_event_attributes.reason)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            closing = {"error": {"code": -32603, "message": failure.message}}
    if isinstance(closing, dict):  # the outcome itself, when readable, beats the search attribute
        shown["status"] = next((status for status in ("expired", "cancelled") if closing.get(status)), None) or (
            "failed" if closing.get("error") else "completed"
        )
    shown.update(
        legs=legs,
        inputRequests=requests,
        answers=answers,
        result=field(closing, "result") or None,
        error=field(closing, "error") or None,
        readable=readable,
        uiUrl=f"{ui_url}/namespaces/{quote(client.namespace)}/workflows/"
        f"{quote(task.description.id, safe='')}/{task.description.run_id}/history",
    )
    return shown


def _terminated(reason: str) -> dict[str, Any]:
    """What a terminated task ended as: a server ended it (its TTL, or a cancel no worker ran), or an operator."""
    if reason == EXPIRED_REASON:
        return {"expired": True}
    if reason == CANCELLED_REASON:
        return {"cancelled": True}
    return {"error": {"code": -32603, "message": f"Terminated by an operator: {reason}"}}


def _legs_before_this_run(task_input: Any) -> int:
    """Legs earlier runs of a continued-as-new task ran (its input names the next leg, or the
    leg whose round of input it took over)."""
    open_round = field(task_input, "open_round")
    if open_round:
        return int(open_round.get("leg", 0))
    resume = field(task_input, "resume")
    return int(resume.get("leg", 1)) - 1 if resume else 0


async def _open_round_requests(client: Client, task_input: Any, asks: Payload | None) -> Any:
    """The open asks of the round a run took over from the previous one: in its memo, not its events."""
    open_round = field(task_input, "open_round")
    if not open_round or asks is None:
        return []
    open_asks = await decoded(client, [asks])
    if open_asks is UNREADABLE:
        return open_asks
    leg = open_round.get("leg")
    return [{"leg": leg, "key": key, "request": request} for key, request in (open_asks or {}).items()]
