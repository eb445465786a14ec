"""Resumable tools: record a checkpoint while running, read it back after a crash.

A tool leg is retried from the start when its worker dies. A long tool can call
`checkpoint(value)` as it makes progress; the value rides on the leg's heartbeats,
and when a retried attempt starts, `last_checkpoint()` returns the last one Temporal
received, so the tool continues instead of starting over. Values must be JSON.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from fastmcp_temporal._progress import current_progress


def checkpoint(value: Any) -> None:
    """Record how far the running tool got; a retried attempt reads it back."""
    progress = current_progress.get()
    if progress is None:
        raise RuntimeError("checkpoint() works only inside a task tool running on a Temporal worker.")
    progress.checkpoint = value
    activity.heartbeat(progress.details())


def last_checkpoint(default: Any = None) -> Any:
    """The last checkpoint of this leg's earlier attempts, or `default` on the first attempt."""
    progress = current_progress.get()
    if progress is None or progress.checkpoint is None:
        return default
    return progress.checkpoint
