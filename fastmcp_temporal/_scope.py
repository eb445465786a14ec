"""Task ids, the caller's scope, and the workflow id that binds them.

A task's workflow id embeds a hash of its creator's scope (client id plus `sub`;
anonymous is its own scope), so every `tasks/*` call derives the id from its own
caller and a task of another scope is simply not found. The scope itself never
appears in Temporal in clear, only this hash.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Literal

from fastmcp_tasks.context import get_task_scope

ANONYMOUS_SCOPE_TAG = "anon"

WorkflowKind = Literal["task", "call"]


def new_task_id() -> str:
    """A server-minted, unguessable task id (43 URL-safe characters, as the reference)."""
    return secrets.token_urlsafe(32)


def current_scope_tag() -> str:
    scope = get_task_scope()
    if scope is None:
        return ANONYMOUS_SCOPE_TAG
    return hashlib.sha256(scope.encode()).hexdigest()[:32]


def workflow_id(scope_tag: str, task_id: str, kind: WorkflowKind = "task") -> str:
    """`mcp-task/...` for a task, `mcp-call/...` for a synchronous call run as a workflow."""
    return f"mcp-{kind}/{scope_tag}/{task_id}"
