"""The `Context` and server a tool body sees while it runs as a Temporal activity.

Core FastMCP resolves `ctx: Context` and `get_server()` in a background task through
two process-global hooks. While an activity runs a leg, `running_leg` holds that
leg's identity; the hooks read it and fall back to whatever was installed before
(another tasks backend in the same process) outside our activities. The hooks are
refcounted so one server's shutdown never strands a sibling server's legs.
A durable call's leg gives its `Context` the notices its caller is relayed (`_notices`).

Before its body runs, a leg restores the submitting caller (token, headers, session) from
the task's snapshot (`restore_caller`), failing closed when the snapshot is encrypted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastmcp.server.context import Context
from fastmcp.server.dependencies import (
    set_background_context_factory,
    set_worker_server_resolver,
)

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import (
    SnapshotDecryptionError,
    TaskContext,
    TaskContextSnapshot,
    snapshot_codec,
)

if TYPE_CHECKING:
    from fastmcp import FastMCP

    from fastmcp_temporal.worker._notices import LegNotices

logger = logging.getLogger(__name__)


class SnapshotRestoreError(RuntimeError):
    """The caller's identity could not be restored and the task must not run without it."""


def restore_caller(encoded: str) -> TaskContextSnapshot:
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


@dataclass(frozen=True)
class RunningLeg:
    task_id: str
    server: FastMCP
    origin_request_id: str | None
    client_extensions: frozenset[str]
    input_responses: Any
    request_state: str | None
    notices: LegNotices | None = None


running_leg: ContextVar[RunningLeg | None] = ContextVar("fastmcp_temporal_leg", default=None)


@contextmanager
def leg_scope(leg: RunningLeg) -> Iterator[None]:
    token = running_leg.set(leg)
    try:
        yield
    finally:
        running_leg.reset(token)


async def _make_leg_context() -> Context | None:
    leg = running_leg.get()
    if leg is None:
        return await _call_previous_factory()
    ctx = TaskContext(
        fastmcp=leg.server,
        session=None,
        task_id=leg.task_id,
        origin_request_id=leg.origin_request_id,
    )
    ctx._client_extensions = leg.client_extensions
    ctx._notices = leg.notices
    await ctx.__aenter__()
    _fastmcp_private.set_pending_input(ctx, leg.input_responses, leg.request_state)
    return ctx


def _resolve_leg_server() -> FastMCP | None:
    leg = running_leg.get()
    if leg is not None:
        return leg.server
    return _previous_resolver() if _previous_resolver is not None else None


async def _call_previous_factory() -> Context | None:
    if _previous_factory is None:
        return None
    return await _previous_factory()


_holds = 0
_previous_factory: Any = None
_previous_resolver: Any = None


def install_hooks() -> None:
    global _holds, _previous_factory, _previous_resolver
    if _holds == 0:
        _previous_factory = _fastmcp_private.background_context_factory()
        _previous_resolver = _fastmcp_private.worker_server_resolver()
        set_background_context_factory(_make_leg_context)
        set_worker_server_resolver(_resolve_leg_server)
    _holds += 1


def release_hooks() -> None:
    global _holds
    _holds -= 1
    if _holds == 0:
        set_background_context_factory(_previous_factory)
        set_worker_server_resolver(_previous_resolver)
