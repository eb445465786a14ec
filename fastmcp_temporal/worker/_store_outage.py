"""A payload store that is away delays a tool leg; it never fails it early or loses its result.

A leg reads its stored input (`connection/_leg_inputs`) and stores a large outcome itself,
both while it heartbeats. When the store does not answer (refused or dropped connections,
a server error, a folder that is unmounted or unreadable), the leg retries with backoff
until it does: the tool's retry budget is not spent, Temporal sees a live worker, and a
body that finished runs no second time. Only the leg's own deadline, its
`start_to_close_timeout`, ends the wait, with an error that says what the store was doing,
for how long, and what to check. A store that answers with a refusal (a missing bucket,
denied access) or a payload it lost is not waited for.

While it waits, the leg's heartbeats say why (`LegProgress.wait_for_store`): `tasks/get`
shows it as the task's `statusMessage`, and `tasks list --stuck` lists the task with it,
so a store that is away, another cluster's or read-only is seen before the leg's deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fastmcp_temporal.connection._temporal_clock import worker_clock
from fastmcp_temporal.worker._progress import LegProgress

logger = logging.getLogger("fastmcp_temporal")

T = TypeVar("T")

STORE_UNREACHABLE = "PayloadStoreUnreachable"
_FIRST_RETRY = 0.25
_LONGEST_RETRY = 5.0
# The leg gives up this long (at most a fifth of the timeout) before its start_to_close_timeout, so
# its own error, not Temporal's timeout, says why it ended.
_DEADLINE_MARGIN = timedelta(seconds=2)
_TRANSIENT_S3_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling", "ThrottlingException"}
)


async def until_store_answers(step: Callable[[], Awaitable[T]], doing: str, progress: LegProgress | None) -> T:
    """Run `step` (which reads or writes the payload store) until the store answers it, saying why
    in the heartbeats of `progress` (none for a local attempt) while it waits.

    Raises a non-retryable `ApplicationError` naming the outage when the leg's deadline comes first.
    """
    deadline = _leg_deadline()
    loop = asyncio.get_running_loop()
    started, pause, failures = loop.time(), _FIRST_RETRY, 0
    while True:
        try:
            # A step that starts past the deadline (a body that used up its leg's time) still gets its try.
            bound = deadline - loop.time() if deadline is not None and deadline > loop.time() else None
            result = await asyncio.wait_for(step(), bound)
        except Exception as exc:  # a step cut short by the deadline raises TimeoutError, an OSError
            if not store_unreachable(exc):
                raise
            failures += 1
            if progress is not None:
                progress.wait_for_store(_waiting(doing, exc))
            if failures == 1:
                logger.warning("The payload store did not answer a leg %s; retrying: %s", doing, _said(exc))
            if deadline is not None and loop.time() + pause > deadline:
                raise _gave_up(doing, loop.time() - started, exc) from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_RETRY)
            continue
        if failures:
            logger.warning("The payload store answered after %.0f s; the leg goes on", loop.time() - started)
        if progress is not None:
            progress.wait_for_store(None)
        return result


def _waiting(doing: str, exc: BaseException) -> str:
    """What a leg's heartbeats say while it waits for the store."""
    return (
        f"Waiting for the payload store while {doing}: {_said(exc)}. The task goes on by itself once "
        "the store takes it: check that the workers reach the store FASTMCP_TEMPORAL_PAYLOAD_STORE names "
        "(mounted, writable, this cluster's; for S3 the endpoint, network and credentials)."
    )


def store_unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the store did not answer, rather than refused or lost."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) or _transient_s3(seen):
            return True
        seen = seen.__cause__
    return False


def _transient_s3(exc: BaseException) -> bool:
    try:
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError
    except ImportError:
        return False
    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _TRANSIENT_S3_CODES or int(status) >= 500
    return False


def _leg_deadline() -> float | None:
    """The event-loop time at which this attempt stops waiting, shortly before its start_to_close_timeout."""
    info = activity.info()
    if info.start_to_close_timeout is None:
        return None
    left = info.start_to_close_timeout - min(_DEADLINE_MARGIN, info.start_to_close_timeout / 5) - _since_started(info)
    return asyncio.get_running_loop().time() + left.total_seconds()


def _since_started(info: activity.Info) -> timedelta:
    """How long ago the attempt started: on this process's clock for a local leg (its start is read
    there), else on Temporal's."""
    if info.is_local:
        return datetime.now(timezone.utc) - info.started_time
    return worker_clock.since_written(info.started_time)


def _gave_up(doing: str, waited: float, exc: BaseException) -> ApplicationError:
    timeout = activity.info().start_to_close_timeout or timedelta(0)
    return ApplicationError(
        f"The payload store did not answer for {waited:.0f} s while the leg was {doing}, and the leg's "
        f"start_to_close_timeout of {timeout.total_seconds():g} s ran out ({_said(exc)}). Check that the "
        "workers reach the store FASTMCP_TEMPORAL_PAYLOAD_STORE names: for S3 the endpoint, network and "
        "credentials; for a folder, that it is mounted and readable.",
        type=STORE_UNREACHABLE,
        non_retryable=True,
    )


def _said(exc: BaseException) -> str:
    """The error and its cause, as the drivers word them (bucket and key, or the folder)."""
    cause = exc.__cause__
    return f"{exc}: {cause}" if cause is not None and str(cause) not in str(exc) else str(exc)
