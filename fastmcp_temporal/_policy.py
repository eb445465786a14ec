"""Per-tool execution policy: timeouts and retries for one tool's legs.

The extension's settings are the defaults; `@execution_policy(...)` under
`@mcp.tool(task=True)` overrides them for that tool. Only crashes and timeouts
retry: tool errors are results, never retried. `sync_calls` chooses, for this tool,
whether a caller that did not opt in to tasks is served inline or by a workflow;
`leg="local"` runs a short tool's body as a local activity, inside the workflow task;
`versioning_behavior` chooses, with Worker Versioning on, whether this tool's tasks stay
on the deployment version that started them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar

from fastmcp_temporal._settings import VersioningBehaviorName

_ATTRIBUTE = "__fastmcp_temporal_policy__"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ExecutionPolicy:
    start_to_close_timeout: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    maximum_attempts: int | None = None
    initial_retry_interval: timedelta | None = None
    heartbeat_interval: timedelta | None = None
    sync_calls: Literal["inline", "workflow"] | None = None
    leg: Literal["activity", "local"] | None = None
    versioning_behavior: VersioningBehaviorName | None = None


def execution_policy(
    *,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    maximum_attempts: int | None = None,
    initial_retry_interval: timedelta | None = None,
    heartbeat_interval: timedelta | None = None,
    sync_calls: Literal["inline", "workflow"] | None = None,
    leg: Literal["activity", "local"] | None = None,
    versioning_behavior: VersioningBehaviorName | None = None,
) -> Callable[[F], F]:
    """Set how this tool's legs are scheduled; place it below `@mcp.tool(task=True)`.

    `heartbeat_interval` is read by the worker running the leg, the others when the task starts.
    `leg="local"` suits tools that finish within seconds: see the README's "Short tools".
    `versioning_behavior` (with Worker Versioning on) overrides the extension's for this tool's
    tasks: "pinned" keeps a task on the version that started it, "auto_upgrade" moves it to the
    current version at its next workflow task.
    """
    if sync_calls not in (None, "inline", "workflow"):
        raise ValueError(f"execution_policy(sync_calls={sync_calls!r}): use 'inline' or 'workflow'.")
    if leg not in (None, "activity", "local"):
        raise ValueError(f"execution_policy(leg={leg!r}): use 'activity' or 'local'.")
    if versioning_behavior not in (None, "pinned", "auto_upgrade"):
        raise ValueError(
            f"execution_policy(versioning_behavior={versioning_behavior!r}): use 'pinned' or 'auto_upgrade'."
        )
    policy = ExecutionPolicy(
        start_to_close_timeout,
        heartbeat_timeout,
        maximum_attempts,
        initial_retry_interval,
        heartbeat_interval,
        sync_calls,
        leg,
        versioning_behavior,
    )

    def apply(fn: F) -> F:
        setattr(fn, _ATTRIBUTE, policy)
        return fn

    return apply


def policy_of(component: Any) -> ExecutionPolicy:
    """The policy a function tool's function or a custom `Tool` (attribute `execution_policy`) carries."""
    found = getattr(getattr(component, "fn", None), _ATTRIBUTE, None) or getattr(
        component, "execution_policy", None
    )
    return found if isinstance(found, ExecutionPolicy) else ExecutionPolicy()
