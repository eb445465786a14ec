"""The live Temporal connection a running extension serves tasks from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal._payloads import PayloadLimits, limits_of
from fastmcp_temporal._scope import CallerScope, current_scope, scope_secret
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

    @property
    def payload_limits(self) -> PayloadLimits:
        settings = self.settings
        return limits_of(self.client.data_converter, settings.payload_limit, settings.stored_payload_limit)

    def caller_scope(self) -> CallerScope:
        """The scope of the request being served, tagged with this deployment's scope secret."""
        key = self.settings.encryption_key
        return current_scope(scope_secret(key.get_secret_value() if key is not None else None))


@contextmanager
def temporal_errors(action: str) -> Iterator[None]:
    """Report Temporal being unreachable or refusing as a retryable -32603, not a crash."""
    try:
        yield
    except RPCError as exc:
        raise MCPError(
            code=INTERNAL_ERROR,
            message=f"Temporal could not {action} ({exc.status.name}: {exc.message}); retry the request.",
        ) from exc
