"""Waits with one generous deadline, for conditions the tests cannot be told about.

Each wait polls (in this process, or over the wire with `tasks/get`) and fails with what
it waited for once `DEADLINE` seconds have passed, so a stuck test ends with a reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from fastmcp_tasks.client import ToolTask
from fastmcp_tasks.client_models import ClientGetTaskResult

DEADLINE = 30


async def eventually(check: Callable[[], bool], timeout: float = DEADLINE, what: str = "condition") -> None:
    """Poll a condition in this process until it holds."""
    try:
        with anyio.fail_after(timeout):
            while not check():
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


async def finished(task: ToolTask) -> ClientGetTaskResult:
    """Poll `tasks/get` until the task is terminal; that read."""
    return await task.wait(timeout=DEADLINE)


async def polled_until(
    fetch: Callable[[], Awaitable[ClientGetTaskResult]],
    status: str,
    until: Callable[[ClientGetTaskResult], bool] = lambda _: True,
) -> ClientGetTaskResult:
    """Poll `fetch` until it reports `status` (and `until` holds); return that read."""
    with anyio.fail_after(DEADLINE):
        while True:
            current = await fetch()
            if current.status == status and until(current):
                return current
            await anyio.sleep(0.05)


async def status_becomes(
    task: ToolTask, status: str, *, until: Callable[[ClientGetTaskResult], bool] = lambda _: True
) -> ClientGetTaskResult:
    """Poll the task's `tasks/get` until it reports `status` (and `until` holds); that read."""
    return await polled_until(task.status, status, until)
