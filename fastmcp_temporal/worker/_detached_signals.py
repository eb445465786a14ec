"""Signals a leg sends its own workflow from a task detached from its attempt.

Temporal may cancel an attempt at any moment (a heartbeat timeout, a cancel): a signal
that must still reach the workflow (a late leg's outcome, a new message's stamp) is sent
by a task of its own, kept referenced until it ends, on the handle of the attempt's run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowHandle

_sending: set[asyncio.Task[None]] = set()


def signal_detached(send: Callable[[WorkflowHandle[Any, Any]], Coroutine[Any, Any, None]]) -> None:
    """Run `send` on the running leg's workflow run, in a task a cancel of the attempt does not reach."""
    info = activity.info()
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    task = asyncio.create_task(send(handle))
    _sending.add(task)
    task.add_done_callback(_sending.discard)
