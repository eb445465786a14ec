"""Task ids, the caller's scope, and the workflow id that binds them.

A task's workflow id embeds a tag of its creator's scope (client id plus `sub`;
anonymous is its own scope, `anon`), so every `tasks/*` call derives the id from its
own caller and a task of another scope is simply not found.

The tag is an HMAC-SHA256 of the scope's parts encoded as a JSON array, so two scopes
never share a tag (a client id holding a separator cannot pose as another client's
user). Its secret is shared by every server: derived from the encrypting (first)
encryption key (from the stretched payload key, under its own label), so without the
key nobody can compute or guess a tag; with no key it is a fixed public default, and a
tag is then only unambiguous. The scope never appears in Temporal in clear, only its tag.

Keys rotate without moving a task: a task keeps the tag it was created under, and a
lookup that finds nothing under the encrypting key's tag tries the tag of each other
listed key (one more describe per key, only then). So a task created under the key list
[A] is found by its owner under [A, B], [B, A] and any list holding A; under [B] alone
it is not found, as its payloads written under A (its arguments at least) could not be
read there either. Under a single key the tags are the ones keyed tags always had.

Tasks created before keyed tags (`mcp-task/<32 hex>/...`: an unkeyed SHA-256 of
`client_id|sub`) stay reachable by their owner until they expire: a lookup that finds
nothing under the keyed tags tries the legacy one, but only for a caller whose client id holds
no `|`. No two such callers share a legacy string, so the fallback never reaches another
caller's task. A client id holding `|` gets no fallback, since its legacy string can
also be another caller's.

The tag is also the caller's fairness key in Temporal's task queues (`fairness_key`), so
one caller's backlog takes its share of the workers, not all of them.

A rejoinable durable call (`execution_policy(rejoin=True)`) is named, under its caller's
tag, by an HMAC of its tool, validated arguments, round and joiner (`call_id`) with the same
secret, so the same call from the same caller finds the same workflow, and the id says nothing
of the arguments. Without auth every caller has the anonymous tag, so the joiner is then the
caller's MCP session: another user's equal call is never joined.

What one caller may hold of what every caller needs (request body bytes, listen streams, held
reads) is counted by `caller_key`, which is not the scope: every anonymous caller shares the
anonymous scope, so one of them would count for all. A caller is its token's client id and
`sub` (the scope its tasks take), or, unauthenticated, its peer's address; outside HTTP (stdio
serves one client) every request is the one local caller.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from fastmcp.server.dependencies import get_access_token, get_http_request
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from starlette.types import Scope

from fastmcp_temporal._fastmcp_private import get_task_scope
from fastmcp_temporal._settings import encryption_keys
from fastmcp_temporal.connection._codec import stretched_key

ANONYMOUS_SCOPE_TAG = "anon"
SCOPE_TAG_PREFIX = "v2-"
# Temporal refuses a longer `Priority.fairness_key` (bytes of its UTF-8).
FAIRNESS_KEY_BYTES = 64
_HASHED_FAIRNESS_KEY = "h-"
# The scope secret without an encryption key: public, so zero-config tags are unambiguous but guessable.
ZERO_CONFIG_SCOPE_SECRET = b"fastmcp-temporal scope tags without FASTMCP_TEMPORAL_ENCRYPTION_KEY"
_SCOPE_SECRET_LABEL = b"fastmcp-temporal scope tag secret v2"
_LEGACY_SEPARATOR = "|"
LOCAL_CALLER = json.dumps(["local"])
"""The caller of every request not made over HTTP: stdio and in-memory serve one client."""

WorkflowKind = Literal["task", "call"]
# The protocol version whose own tasks (SEP-1686) are served beside the 2026-07-28 extension.
VERSION_2025_11_25 = "2025-11-25"
# Such a task's id starts with its era, so no method of the other era finds it ("." is outside
# the random part's alphabet: no 2026-07-28 id has it).
TASK_ID_PREFIX_2025_11_25 = f"{VERSION_2025_11_25}."


@dataclass(frozen=True)
class CallerScope:
    """The calling scope's tag, its tags under older keys, and the legacy tag its older tasks may be under."""

    tag: str
    older_tags: tuple[str, ...] = ()
    legacy_tag: str | None = None

    @property
    def lookup_tags(self) -> tuple[str, ...]:
        """Where the caller's tasks are looked for, in order."""
        legacy = () if self.legacy_tag is None else (self.legacy_tag,)
        return (self.tag, *self.older_tags, *legacy)


def task_not_found(task_id: str) -> MCPError:
    """What every task method answers for a task id its caller has no task under: missing, expired or another's."""
    return MCPError(code=INVALID_PARAMS, message=f"Task {task_id} not found")


def new_task_id(prefix: str = "") -> str:
    """A server-minted, unguessable task id (43 URL-safe characters, as the reference), after `prefix`
    (`TASK_ID_PREFIX_2025_11_25` for a task of the 2025-11-25 tasks)."""
    return prefix + secrets.token_urlsafe(32)


def is_2025_11_25_task(task_id: str) -> bool:
    """The id names a task created on the 2025-11-25 tasks (`new_task_id`)."""
    return task_id.startswith(TASK_ID_PREFIX_2025_11_25)


def call_id(secret: bytes, tool_key: str, arguments: dict[str, Any], joiner: str, answers: Any) -> str:
    """The id of a rejoinable call of `tool_key` with `arguments` (validated, in JSON form), by
    `joiner` (who may join it under the caller's scope tag), carrying `answers` (a 2026-07-28
    caller's answers to the call's previous round, each round its own call) (43 URL-safe
    characters): the same for every repeat, keyed so that its id tells nothing of the arguments
    to whoever reads it."""
    named = json.dumps([tool_key, arguments, joiner, answers], sort_keys=True, ensure_ascii=False, default=str)
    return base64.urlsafe_b64encode(hmac.digest(secret, named.encode(), "sha256")).decode().rstrip("=")


@lru_cache(maxsize=8)
def scope_secrets(encryption_key: str | None) -> tuple[bytes, ...]:
    """The secrets scope tags are keyed with: the encrypting key's (new tasks' tags) first, then
    each other listed key's. Every server with the same keys derives the same.

    Args:
        encryption_key: the `FASTMCP_TEMPORAL_ENCRYPTION_KEY` value (keys separated by commas),
            or None without encryption.
    """
    if encryption_key is None:
        return (ZERO_CONFIG_SCOPE_SECRET,)
    keys = encryption_keys(encryption_key)
    return tuple(hmac.digest(stretched_key(key), _SCOPE_SECRET_LABEL, "sha256") for key in keys)


def current_scope(tag_secrets: Sequence[bytes]) -> CallerScope:
    """The scope of the request being served (its access token's client id and `sub`), tagged
    with each of `tag_secrets`: the first tags new tasks, the others find older ones."""
    token = get_access_token()
    if token is None:
        return CallerScope(ANONYMOUS_SCOPE_TAG)
    sub = token.claims.get("sub") if token.claims else None
    parts = json.dumps([token.client_id, str(sub) if sub else None], ensure_ascii=False).encode()
    tags = [SCOPE_TAG_PREFIX + hmac.new(secret, parts, "sha256").hexdigest()[:32] for secret in tag_secrets]
    legacy = _legacy_tag() if _LEGACY_SEPARATOR not in token.client_id else None
    return CallerScope(tags[0], tuple(tags[1:]), legacy)


def _legacy_tag() -> str | None:
    """The tag tasks of this scope got before keyed tags: `fastmcp_tasks`' scope string, hashed."""
    legacy = get_task_scope()
    return hashlib.sha256(legacy.encode()).hexdigest()[:32] if legacy is not None else None


def workflow_id(scope_tag: str, task_id: str, kind: WorkflowKind = "task") -> str:
    """`mcp-task/...` for a task, `mcp-call/...` for a synchronous call run as a workflow."""
    return f"{workflow_id_prefix(kind)}{scope_tag}/{task_id}"


def workflow_id_prefix(kind: WorkflowKind) -> str:
    """What every workflow id of `kind` starts with.

    Args:
        kind: "task" for a task, "call" for a synchronous call run as a workflow.
    """
    return f"mcp-{kind}/"


def fairness_key(scope_tag: str) -> str:
    """The caller's fairness key: its scope tag, or a hash prefix of one too long for Temporal.

    Every tag this module mints fits; the hash keeps the key deterministic (every server gives
    one caller the same key) should a longer tag ever be passed.
    """
    if len(scope_tag.encode()) <= FAIRNESS_KEY_BYTES:
        return scope_tag
    return _HASHED_FAIRNESS_KEY + hashlib.sha256(scope_tag.encode()).hexdigest()[:32]


def caller_key(asgi_scope: Scope) -> str:
    """Who an HTTP request's caller is, for the limits one caller must not exhaust alone: its access
    token's client id and `sub`, or, unauthenticated, its peer's address."""
    token = getattr(asgi_scope.get("user"), "access_token", None)
    if token is not None:
        sub = (getattr(token, "claims", None) or {}).get("sub")
        return json.dumps(["token", token.client_id, None if sub is None else str(sub)])
    peer = asgi_scope.get("client")
    return json.dumps(["address", peer[0] if peer else None])


def current_caller() -> str:
    """The `caller_key` of the request being served; `LOCAL_CALLER` outside HTTP."""
    try:
        request = get_http_request()
    except RuntimeError:
        return LOCAL_CALLER
    return caller_key(request.scope)
