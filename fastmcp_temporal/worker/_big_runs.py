"""Memory a task run of big arguments held returns soon after the run ends, not at some later full collection.

The SDK keeps what a run decoded and sent (its inputs, its last activation and completion,
whose protobuf arenas hold every payload they carried, its arguments' among them) on its
workflow instance, and an instance that ends or is evicted lives on in reference cycles
until the garbage collector's oldest generation is collected. A few objects, however
large, never trigger that collection (docs/large-payloads.md has the measure). So once a
run ends whose arguments are the workflow's second input (`workflows/arguments`) and big,
full collections follow shortly after, once the SDK has let its instance go; runs ending
together share them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from typing import Any

from temporalio.common import RawValue
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

BIG_ARGUMENTS = 8 * 1024 * 1024
"""A run whose arguments take this many converted bytes or more is followed by a collection."""
_COLLECT_AFTER_SECONDS = (2.0, 20.0)
"""When to collect after the last big run ended: soon, and again for an instance the SDK lets
go late (one whose workflow task it gave up on, on a loaded host, ends after the run)."""


class CollectAfterBigRuns(Interceptor):
    """Runs a full garbage collection shortly after the last run of big arguments ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[threading.Timer] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        collector = self

        class _CollectingAfter(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                big = _arguments_bytes(input.args) >= BIG_ARGUMENTS
                try:
                    return await self.next.execute_workflow(input)
                finally:
                    if big:
                        collector.collect_soon()

        return _CollectingAfter

    def collect_soon(self) -> None:
        """Collect at each of `_COLLECT_AFTER_SECONDS` from now (called from a workflow's thread:
        timers of their own), instead of at those a run that ended earlier set."""
        with self._lock:
            for timer in self._pending:
                timer.cancel()
            self._pending = [threading.Timer(delay, gc.collect) for delay in _COLLECT_AFTER_SECONDS]
            for timer in self._pending:
                timer.daemon = True
                timer.start()


def _arguments_bytes(args: Sequence[Any]) -> int:
    """The converted bytes of a run's inputs that came undecoded: its arguments, when they are the second."""
    return sum(arg.payload.ByteSize() for arg in args if isinstance(arg, RawValue))
