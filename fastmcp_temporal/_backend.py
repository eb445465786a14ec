"""The live Temporal connection a running extension serves tasks from."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client

from fastmcp_temporal._settings import TemporalTasksSettings


@dataclass(frozen=True)
class Backend:
    client: Client
    settings: TemporalTasksSettings
    searchable: bool
    """Whether the namespace has our search attributes registered."""
    embedded_worker: bool
    """Whether this process polls the task queue (enables eager workflow start)."""

    @property
    def ttl_ms(self) -> int:
        return int(self.settings.task_ttl.total_seconds() * 1000)
