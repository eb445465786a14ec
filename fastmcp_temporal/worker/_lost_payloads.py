"""A task whose stored payload is lost ends even while its workflow replays.

The workflow ends a task itself when a payload the store lost reaches it for the
first time (`_unreadable`). On a replay (a worker restarted, or the workflow left
the cache) the history already holds what the workflow decided with that payload,
and deciding anything else would be non-deterministic: the workflow task would
fail forever. So the workflow raises `LostOnReplay` instead, and this worker
interceptor terminates the task's run with the reason, which `tasks/get` then
reports as `failed`. Only a payload the store's marker shows lost comes here: a store
that is away (an empty mount point, another cluster's store) raises instead, and the
replay is retried until it is back (`connection._store_marker`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from fastmcp_temporal.workflows.models import LostOnReplay

logger = logging.getLogger(__name__)


class EndTasksWithLostPayloads(Interceptor):
    """Terminates, from the worker's own event loop, each task run that raised `LostOnReplay`."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._terminations: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def serving(self, client: Client) -> AsyncIterator[None]:
        """Terminate through `client` while the worker runs."""
        self._client, self._loop = client, asyncio.get_running_loop()
        try:
            yield
        finally:
            self._client = self._loop = None

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        ender = self

        class _EndOnLostPayload(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                try:
                    return await self.next.execute_workflow(input)
                except LostOnReplay as lost:
                    info = workflow.info()
                    ender.terminate_soon(info.workflow_id, info.run_id, str(lost))
                    raise

        return _EndOnLostPayload

    def terminate_soon(self, workflow_id: str, run_id: str, reason: str) -> None:
        """Called from the workflow's thread: hand the termination to the worker's loop."""
        if self._loop is None:
            logger.error("Task %s lost a stored payload and no worker loop can end it: %s", workflow_id, reason)
            return
        self._loop.call_soon_threadsafe(self._terminate, workflow_id, run_id, reason)

    def _terminate(self, workflow_id: str, run_id: str, reason: str) -> None:
        termination = asyncio.ensure_future(self._terminated(workflow_id, run_id, reason))
        self._terminations.add(termination)
        termination.add_done_callback(self._terminations.discard)

    async def _terminated(self, workflow_id: str, run_id: str, reason: str) -> None:
        if self._client is None:
            return
        try:
            await self._client.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason)
        except RPCError as exc:  # already closed, or terminated by another worker
            logger.info("Could not terminate task %s after its payload was lost: %s", workflow_id, exc.message)
        else:
            logger.error("Terminated task %s: %s", workflow_id, reason)
