"""Task ids, the caller's scope, and the workflow id that binds them.

A task's workflow id embeds a tag of its creator's scope (client id plus `sub`;
anonymous is its own scope, `anon`), so every `tasks/*` call derives the id from its
own caller and a task of another scope is simply not found.

The tag is an HMAC-SHA256 of the scope's parts encoded as a JSON array, so two scopes
never share a tag (a client id holding a separator cannot pose as another client's
user). Its secret is shared by every server: derived from the encryption key (from the
stretched payload key, under its own label), so without the key nobody can compute or
guess a tag; with no key it is a fixed public default, and a tag is then only
unambiguous. The scope never appears in Temporal in clear, only its tag.

Tasks created before keyed tags (`mcp-task/<32 hex>/...`: an unkeyed SHA-256 of
`client_id|sub`) stay reachable by their owner until they expire: a lookup that finds
nothing under the tag tries the legacy one, but only for a caller whose client id holds
no `|`. No two such callers share a legacy string, so the fallback never reaches another
caller's task. A client id holding `|` gets no fallback, since its legacy string can
also be another caller's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Literal

from fastmcp.server.dependencies import get_access_token
from fastmcp_tasks.context import get_task_scope

from fastmcp_temporal.connection._codec import stretched_key

ANONYMOUS_SCOPE_TAG = "anon"
SCOPE_TAG_PREFIX = "v2-"
# The scope secret without an encryption key: public, so zero-config tags are unambiguous but guessable.
ZERO_CONFIG_SCOPE_SECRET = b"fastmcp-temporal scope tags without FASTMCP_TEMPORAL_ENCRYPTION_KEY"
_SCOPE_SECRET_LABEL = b"fastmcp-temporal scope tag secret v2"
_LEGACY_SEPARATOR = "|"

WorkflowKind = Literal["task", "call"]


@dataclass(frozen=True)
class CallerScope:
    """The calling scope's tag, and the legacy tag its older tasks may still be under."""

    tag: str
    legacy_tag: str | None = None

    @property
    def lookup_tags(self) -> tuple[str, ...]:
        """Where the caller's tasks are looked for, in order."""
        return (self.tag,) if self.legacy_tag is None else (self.tag, self.legacy_tag)


def new_task_id() -> str:
    """A server-minted, unguessable task id (43 URL-safe characters, as the reference)."""
    return secrets.token_urlsafe(32)


def scope_secret(encryption_key: str | None) -> bytes:
    """The secret scope tags are keyed with: every server with the same key derives the same."""
    if encryption_key is None:
        return ZERO_CONFIG_SCOPE_SECRET
    return hmac.digest(stretched_key(encryption_key), _SCOPE_SECRET_LABEL, "sha256")


def current_scope(secret: bytes) -> CallerScope:
    """The scope of the request being served (its access token's client id and `sub`)."""
    token = get_access_token()
    if token is None:
        return CallerScope(ANONYMOUS_SCOPE_TAG)
    sub = token.claims.get("sub") if token.claims else None
    parts = json.dumps([token.client_id, str(sub) if sub else None], ensure_ascii=False).encode()
    tag = SCOPE_TAG_PREFIX + hmac.new(secret, parts, "sha256").hexdigest()[:32]
    return CallerScope(tag, _legacy_tag() if _LEGACY_SEPARATOR not in token.client_id else None)


def _legacy_tag() -> str | None:
    """The tag tasks of this scope got before keyed tags: `fastmcp_tasks`' scope string, hashed."""
    legacy = get_task_scope()
    return hashlib.sha256(legacy.encode()).hexdigest()[:32] if legacy is not None else None


def workflow_id(scope_tag: str, task_id: str, kind: WorkflowKind = "task") -> str:
    """`mcp-task/...` for a task, `mcp-call/...` for a synchronous call run as a workflow."""
    return f"mcp-{kind}/{scope_tag}/{task_id}"
