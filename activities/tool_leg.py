"""`run_tool_leg`: the activity that runs one leg of a FastMCP tool.

It runs in a worker that has entered the server's lifespan, so the tool sees the
same `lifespan_context`, dependencies and `Context` API as in the reference engine.
Before the body runs it restores the submitting caller (token, headers, session)
from the task's snapshot; it heartbeats on its own so a cancelled task reaches the
body as `CancelledError` and a dead worker's leg is retried elsewhere. It returns
only JSON: a converted result, a protocol error, or the requests of an ask. The leg
of a synchronous call (`sync_calls="workflow"`) answers as FastMCP's inline call
does: errors become the same `isError` text, and an ask is the call's result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import mcp_types
from fastmcp.exceptions import FastMCPError
from fastmcp.tools.base import InputRequiredToolResult, Tool
from fastmcp.utilities.exceptions import get_http_status_code, is_timeout_error
from fastmcp_tasks.context import TaskContextSnapshot
from fastmcp_tasks.creation import registered_component_for_key
from fastmcp_tasks.encryption import SnapshotDecryptionError, snapshot_codec
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from temporalio import activity
from temporalio.common import RawValue

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._leg_context import RunningLeg, leg_scope
from fastmcp_temporal._payloads import keepable
from fastmcp_temporal._progress import LegProgress, progress_scope
from fastmcp_temporal._wire import (
    call_tool_result_json,
    decode_answers,
    error_result_json,
    input_required_json,
    serialize_requests,
)
from fastmcp_temporal.workflows.models import RUN_TOOL_LEG, LegInput, LegOutcome

if TYPE_CHECKING:
    from fastmcp import FastMCP

logger = logging.getLogger(__name__)

_MAX_HEARTBEAT_INTERVAL = timedelta(milliseconds=200)

_STATE_ONLY_ERROR = (
    "A background task returned a state-only InputRequiredResult (request_state "
    "with no input_requests). Tasks cannot continue without asking the client "
    "something; include at least one input request, or run the tool synchronously."
)


class SnapshotRestoreError(RuntimeError):
    """The caller's identity could not be restored and the task must not run without it."""


class ToolLegActivities:
    """Activities bound to the root server whose tools they run."""

    def __init__(self, server: FastMCP) -> None:
        self._server = server

    @activity.defn(name=RUN_TOOL_LEG)
    async def run_tool_leg(self, leg: LegInput) -> LegOutcome | RawValue:
        call = leg.call
        try:
            snapshot = _restore_snapshot(call.snapshot)
            component = await registered_component_for_key(self._server, call.component_key)
        except (MCPError, SnapshotRestoreError) as exc:
            return LegOutcome(error=_protocol_error(exc))
        owner = await _fastmcp_private.resolve_owning_server(snapshot) or self._server
        running = RunningLeg(
            task_id=call.task_id,
            server=owner,
            origin_request_id=snapshot.origin_request_id,
            client_extensions=frozenset(call.client_extensions),
            input_responses=decode_answers(leg.input_responses),
            request_state=leg.request_state,
        )
        with leg_scope(running), progress_scope(call.task_id, _previous_attempt()) as progress:
            async with _heartbeating(progress):
                outcome = await _run_component(component, owner, call.arguments, call.synchronous)
                return await keepable(outcome, call, activity.client().data_converter)


async def _run_component(
    component: Tool, owner: FastMCP, arguments: dict[str, Any], synchronous: bool
) -> LegOutcome:
    try:
        value = await component.run(arguments)
    except FastMCPError as exc:
        return LegOutcome(result=error_result_json(str(exc)))
    except MCPError as exc:
        if _is_own_timeout(component, exc):
            return LegOutcome(result=error_result_json(_masked_message(component, owner, exc)))
        logger.exception("Task tool %r raised a protocol error", component.name)
        if synchronous and exc.error.code != MISSING_REQUIRED_CLIENT_CAPABILITY:
            return LegOutcome(result=error_result_json(_inline_message(component, owner, exc)))
        return LegOutcome(error=_protocol_error(exc))
    except Exception as exc:
        logger.exception("Task tool %r raised", component.name)
        message = _inline_message(component, owner, exc) if synchronous else _masked_message(component, owner, exc)
        return LegOutcome(result=error_result_json(message))
    ask = _input_required(value)
    if ask is None:
        return LegOutcome(result=call_tool_result_json(component, value))
    if synchronous:  # the caller answers and calls again (SEP-2322), as with an inline call
        return LegOutcome(result=input_required_json(ask))
    if not ask.input_requests:
        return LegOutcome(result=error_result_json(_STATE_ONLY_ERROR))
    return LegOutcome(
        input_requests=serialize_requests(ask.input_requests),
        request_state=ask.request_state,
    )


def _restore_snapshot(encoded: str) -> TaskContextSnapshot:
    """Decode the caller's snapshot and apply it, failing closed when encryption is on.

    Every leg applies a snapshot, an empty one when the stored one is unreadable
    and unprotected, so nothing from an earlier task on this worker leaks in.
    """
    codec = snapshot_codec()
    try:
        snapshot = TaskContextSnapshot.from_json(codec.decode(encoded))
    except SnapshotDecryptionError as exc:
        raise SnapshotRestoreError(
            "The task's caller snapshot could not be decrypted; every server and worker "
            "on this task queue must share the same FASTMCP_TASKS_ENCRYPTION_KEY."
        ) from exc
    except Exception as exc:
        if codec.protected:
            raise SnapshotRestoreError(f"The task's caller snapshot is unreadable: {exc}") from exc
        logger.warning("Unreadable task snapshot; running the task anonymously", exc_info=True)
        snapshot = TaskContextSnapshot()
    _fastmcp_private.apply_snapshot(snapshot)
    return snapshot


@asynccontextmanager
async def _heartbeating(progress: LegProgress) -> AsyncIterator[None]:
    """Heartbeat the leg's progress until the body returns.

    Cancellation reaches an activity only through a heartbeat, so this beats far
    more often than the timeout needs; the worker throttles what it sends.
    """
    timeout = activity.info().heartbeat_timeout or timedelta(seconds=30)
    interval = min(timeout / 4, _MAX_HEARTBEAT_INTERVAL).total_seconds()

    async def beat() -> None:
        while True:
            activity.heartbeat(progress.details())
            await asyncio.sleep(interval)

    ticker = asyncio.create_task(beat())
    try:
        yield
    finally:
        ticker.cancel()


def _previous_attempt() -> dict[str, Any] | None:
    """What a crashed earlier attempt of this leg last heartbeated."""
    details = activity.info().heartbeat_details
    return details[0] if details and isinstance(details[0], dict) else None


def _input_required(value: Any) -> mcp_types.InputRequiredResult | None:
    if isinstance(value, InputRequiredToolResult):
        return value.input_required
    if isinstance(value, mcp_types.InputRequiredResult):
        return value
    return None


def _is_own_timeout(tool: Tool, exc: MCPError) -> bool:
    """FastMCP reports a tool's own `timeout=` as an MCPError; a sync call masks it as a tool error."""
    timeout = getattr(tool, "timeout", None)
    return timeout is not None and exc.error.message == f"Tool '{tool.name}' execution timed out after {timeout}s"


def _masked_message(tool: Tool, owner: FastMCP, exc: Exception) -> str:
    if _fastmcp_private.mask_error_details(owner):
        return f"Error calling tool {tool.name!r}"
    return f"Error calling tool {tool.name!r}: {exc}"


def _inline_message(tool: Tool, owner: FastMCP, exc: Exception) -> str:
    """FastMCP's text for an error out of an inline call: upstream 429s and timeouts say so, even masked."""
    if get_http_status_code(exc) == 429:
        return "Rate limited by upstream API, please retry later"
    if is_timeout_error(exc):
        return "Upstream request timed out, please retry"
    return _masked_message(tool, owner, exc)


def _protocol_error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, MCPError):
        return {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}
    return {"code": mcp_types.INTERNAL_ERROR, "message": str(exc)}
