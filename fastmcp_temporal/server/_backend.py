"""The live Temporal connection a running extension serves tasks from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import InvalidToken
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._codec import UnknownEncryptionKeyError
from fastmcp_temporal.connection._sizes import PayloadLimits, limits_of
from fastmcp_temporal.server._cursors import issue_cursor, page_token
from fastmcp_temporal.server._scope import CallerScope, call_id, current_scope, scope_secrets


@dataclass(frozen=True)
class Backend:
    client: Client
    settings: TemporalTasksSettings
    searchable: bool
    """Whether the namespace has our search attributes registered."""
    embedded_worker: bool
    """Whether this process polls the task queue (enables eager workflow start)."""
    changes_indexed: bool = False
    """Whether the namespace has `McpTaskChangedAt` too, so tasks stamp their changes (`_feed`)."""

    @property
    def stamps_changes(self) -> bool:
        """Whether tasks created here stamp `McpTaskChangedAt`, so the change feed can follow them."""
        return self.searchable and self.changes_indexed

    @property
    def ttl_ms(self) -> int:
        return int(self.settings.task_ttl.total_seconds() * 1000)

    @property
    def payload_limits(self) -> PayloadLimits:
        settings = self.settings
        return limits_of(self.client.data_converter, settings.payload_limit, settings.stored_payload_limit)

    def caller_scope(self) -> CallerScope:
        """The scope of the request being served, tagged with this deployment's scope secrets."""
        return current_scope(self._scope_secrets)

    def call_id(self, tool_key: str, arguments: dict[str, Any], joiner: str, answers: Any) -> str:
        """The id a rejoinable call of `tool_key` with `arguments` by `joiner`, carrying `answers`, has
        every time (`_scope.call_id`)."""
        return call_id(self._scope_secrets[0], tool_key, arguments, joiner, answers)

    def issue_cursor(self, scope: CallerScope, page_token: bytes) -> str:
        """A `tasks/list` cursor for `page_token` that only `scope`'s caller can pass back (`_cursors`)."""
        return issue_cursor(self._scope_secrets[0], scope.tag, page_token)

    def page_token(self, scope: CallerScope, cursor: str | None) -> bytes | None:
        """The page token of a cursor this deployment issued to `scope`'s caller; -32602 for any other."""
        return page_token(self._scope_secrets[0], scope.tag, cursor)

    @property
    def _scope_secrets(self) -> tuple[bytes, ...]:
        key = self.settings.encryption_key
        return scope_secrets(key.get_secret_value() if key is not None else None)


class UnreadablePayloadError(Exception):
    """A task's stored payload is lost for good (`_unreadable`); the message says which and why."""


@contextmanager
def temporal_errors(action: str) -> Iterator[None]:
    """Report what stops a request, and what to do, as a -32603 instead of a bare crash.

    Temporal unreachable or refusing, a payload this server cannot decrypt, a payload
    store that is down or has lost the payload: each says so and names the fix,
    without a key or a payload's content in the message.
    """
    try:
        yield
    except RPCError as exc:
        raise MCPError(
            code=INTERNAL_ERROR,
            message=f"Temporal could not {action} ({exc.status.name}: {exc.message}); retry the request.",
        ) from exc
    except (UnreadablePayloadError, InvalidToken, RuntimeError, OSError) as exc:
        message = _payload_fault(action, exc)
        if message is None:
            raise
        raise MCPError(code=INTERNAL_ERROR, message=message) from exc


def _payload_fault(action: str, exc: BaseException) -> str | None:
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    if isinstance(exc, UnreadablePayloadError):
        return f"Could not {action}: {exc}"
    if unknown_key := next((link for link in chain if isinstance(link, UnknownEncryptionKeyError)), None):
        return f"Could not {action}: {unknown_key}"
    if any(isinstance(link, InvalidToken) for link in chain):
        return (
            f"Could not {action}: this server cannot decrypt the task's payloads, which were encrypted with "
            "another key. Give every server and worker of the task queue the same "
            "FASTMCP_TEMPORAL_ENCRYPTION_KEY."
        )
    if any(str(link).startswith("S3StorageDriver") or isinstance(link, OSError) for link in chain):
        return (
            f"Could not {action}: the payload store (FASTMCP_TEMPORAL_PAYLOAD_STORE) failed: {exc}. "
            "Retry the request once the store is reachable."
        )
    return None
