"""Resumable tools: record a checkpoint while running, read it back after a crash.

A tool leg is retried from the start when its worker dies. A long tool can call
`checkpoint(value)` as it makes progress; the value rides on the leg's next heartbeat
(so checkpointing often costs nothing extra), and when a retried attempt starts,
`last_checkpoint()` returns the last one Temporal received, so the tool continues
instead of starting over. A value the worker's payload converter cannot store is
refused at the call with a `TypeError`, never later in the heartbeat.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from fastmcp_temporal.worker._progress import current_progress


def checkpoint(value: Any) -> None:
    """Record how far the running tool got; a retried attempt reads it back.

    The value rides on the leg's next heartbeat, so a crash loses at most what came after it.

    Args:
        value: a JSON-like value (dicts, lists, strings, numbers, dataclasses, pydantic models)
            that `last_checkpoint()` returns to the next attempt of this leg.

    Raises:
        TypeError: Temporal cannot store `value` as JSON.
        RuntimeError: called outside a task tool running on a Temporal worker.
    """
    progress = current_progress.get()
    if progress is None:
        raise RuntimeError("checkpoint() works only inside a task tool running on a Temporal worker.")
    try:
        activity.payload_converter().to_payloads([value])
    except Exception as exc:
        raise TypeError(
            f"checkpoint() needs a value Temporal can store as JSON (dicts, lists, strings, numbers, "
            f"dataclasses, pydantic models); got {type(value).__name__}: {exc}"
        ) from exc
    progress.checkpoint = value


def last_checkpoint(default: Any = None) -> Any:
    """The last checkpoint of this leg's earlier attempts, or `default` on the first attempt.

    Args:
        default: what to return when no earlier attempt recorded a checkpoint (and outside a
            task tool).
    """
    progress = current_progress.get()
    if progress is None or progress.checkpoint is None:
        return default
    return progress.checkpoint
