"""A task cancelled while its payload store is away closes anyway.

A worker that does not hold a task's workflow in its cache replays it from the start,
and Temporal decodes each workflow task's payloads before any workflow code runs. While
the store is away (an empty mount point, another cluster's store, a store that does not
answer) the decode fails, so the workflow task fails before the workflow sees the
cancel, on every retry: the workflow cannot run the cancel without the payloads its
replay needs to reach it. So the worker whose read failed ends the task instead, when
the task's cancel was requested and its workflow task has failed before (a read that
fails once, on a store that answers again, is left to the retry): it terminates the run
with a reason that names the store. `tasks/get` reads such a task as `cancelled`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from fastmcp_temporal.connection._store_marker import MarkedStore
from fastmcp_temporal.connection._wrapped_driver import innermost

logger = logging.getLogger("fastmcp_temporal")

_FAILED_BEFORE = 2
"""The workflow task attempt from which a failing read ends a cancelled task."""


def store_away_reason(cause: BaseException) -> str:
    """The termination reason of a task cancelled while its store was away."""
    return (
        f"Cancelled while its payload store was away, so its workflow could not run the cancel and a "
        f"worker ended it: {cause}"
    )


class CloseCancelsWhileStoreAway:
    """Terminates each cancelled task whose workflow task keeps failing on its store's reads."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._checking: dict[str, asyncio.Task[None]] = {}

    @asynccontextmanager
    async def serving(self, client: Client) -> AsyncIterator[None]:
        """Listen to the store of `client`'s converter, and terminate through `client`, while the worker runs."""
        storage = client.data_converter.external_storage
        drivers = [innermost(wrapper) for wrapper in (storage.drivers if storage is not None else [])]
        stop_listening = [store.when_unreadable(self._read_failed) for store in drivers if isinstance(store, MarkedStore)]
        self._client = client
        try:
            yield
        finally:
            self._client = None
            for stop in stop_listening:
                stop()

    def _read_failed(self, namespace: str, workflow_id: str, cause: BaseException) -> None:
        """Called on the worker's loop for each task a failing read was for: check it once at a time."""
        client = self._client
        if client is None or namespace != client.namespace or workflow_id in self._checking:
            return
        check = asyncio.ensure_future(self._close_if_cancelled(client, workflow_id, cause))
        self._checking[workflow_id] = check
        check.add_done_callback(lambda _: self._checking.pop(workflow_id, None))

    async def _close_if_cancelled(self, client: Client, workflow_id: str, cause: BaseException) -> None:
        handle = client.get_workflow_handle(workflow_id)
        try:
            described = (await handle.describe()).raw_description
            if (
                described.workflow_execution_info.status != WorkflowExecutionStatus.RUNNING.value
                or not described.workflow_extended_info.cancel_requested
                or described.pending_workflow_task.attempt < _FAILED_BEFORE
            ):
                return
            run_id = described.workflow_execution_info.execution.run_id
            await client.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=store_away_reason(cause))
        except RPCError as exc:  # closed meanwhile, or Temporal is away too: the next failing read tries again
            logger.info("Could not end cancelled task %s while its store is away: %s", workflow_id, exc.message)
            return
        logger.error("Terminated cancelled task %s: %s", workflow_id, store_away_reason(cause))
