"""Per-tool execution policy: timeouts and retries for one tool's legs.

The extension's settings are the defaults; `@execution_policy(...)` under
`@mcp.tool(task=True)` overrides them for that tool. Only crashes and timeouts
retry: tool errors are results, never retried. `sync_calls` chooses, for this tool,
whether a caller that did not opt in to tasks is served inline or by a workflow;
`leg="local"` runs a short tool's body as a local activity, inside the workflow task;
`versioning_behavior` chooses, with Worker Versioning on, whether this tool's tasks stay
on the deployment version that started them; `priority` orders this tool's tasks in the
task queue's backlog (Temporal's priority key, 1 first), within which callers share fairly;
`ask_before_task` lets a tool's first questions come back on the `tools/call` itself (SEP-2322),
and the call that answers them gets the task (SEP-2663's MRTR → task composition); `rejoin`
lets a client whose request timed out call a durable call again and join it, and
`sync_call_answer_after` answers such a call still running with "call again" before the
client's timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar

from fastmcp_temporal._settings import VersioningBehaviorName

_ATTRIBUTE = "__fastmcp_temporal_policy__"
# Temporal's priority keys with its default `matching.priorityLevels`; unset is the middle one, 3.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 5

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ExecutionPolicy:
    """How one tool's legs are scheduled; None leaves the extension's setting in force.

    `@execution_policy(...)` builds one; a custom `Tool` subclass may carry one as its
    `execution_policy` attribute instead.

    Args:
        start_to_close_timeout: the longest one leg may run.
        heartbeat_timeout: a leg silent this long is retried on another worker.
        maximum_attempts: attempts per leg after crashes or timeouts (0 is unlimited).
        initial_retry_interval: the wait before the first retry.
        heartbeat_interval: accepted and not read (see `execution_policy`).
        sync_calls: `inline` or `workflow`, for callers that did not opt in to tasks.
        leg: `activity`, or `local` for a tool that finishes within seconds.
        versioning_behavior: `pinned` or `auto_upgrade`, with Worker Versioning on.
        priority: 1 (first) to 5 (last) in the task queue's backlog; unset is Temporal's 3.
        ask_before_task: a task's first questions answer the `tools/call` that started it.
        rejoin: a durable call is named by its caller and arguments, and a repeat joins it.
        sync_call_answer_after: a rejoinable call still running this long answers "call again".
    """

    start_to_close_timeout: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    maximum_attempts: int | None = None
    initial_retry_interval: timedelta | None = None
    heartbeat_interval: timedelta | None = None
    sync_calls: Literal["inline", "workflow"] | None = None
    leg: Literal["activity", "local"] | None = None
    versioning_behavior: VersioningBehaviorName | None = None
    priority: int | None = None
    ask_before_task: bool | None = None
    rejoin: bool | None = None
    sync_call_answer_after: timedelta | None = None

    def __post_init__(self) -> None:
        _check_priority(self.priority)
        _check_answer_after(self.sync_call_answer_after, self.rejoin)


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
    priority: int | None = None,
    ask_before_task: bool | None = None,
    rejoin: bool | None = None,
    sync_call_answer_after: timedelta | None = None,
) -> Callable[[F], F]:
    """Set how this tool's legs are scheduled; place it below `@mcp.tool(task=True)`.

    Each argument left None keeps the extension's setting of the same name, read when the task
    starts.

    Args:
        start_to_close_timeout: the longest one leg of this tool may run (default 7 days).
        heartbeat_timeout: a leg silent this long is retried on another worker.
        maximum_attempts: attempts per leg after crashes or timeouts (0 is unlimited); errors
            the tool raises are results and never retried.
        initial_retry_interval: the wait before the first retry.
        heartbeat_interval: accepted and not read: a leg's heartbeats are sent at the Temporal
            SDK's throttle, which the worker's `heartbeat_interval` setting caps for all its legs.
        sync_calls: `inline` serves a caller that did not opt in to tasks in the server
            process, `workflow` on the workers.
        leg: `local` runs the body as a local activity inside the workflow task, for tools
            that finish within seconds (docs: "Short tools as local activities"); `activity`
            as a regular activity.
        versioning_behavior: with Worker Versioning on, `pinned` keeps a task on the version
            that started it, `auto_upgrade` moves it to the current version at its next
            workflow task.
        priority: where this tool's tasks wait when the workers are busy: 1 runs first, 5
            last, unset is Temporal's default 3. The tool's legs inherit it; within one
            priority each caller gets a fair share.
        ask_before_task: for a caller that opted in to tasks, a tool whose first leg asks
            within `read_hold` answers the `tools/call` with its questions (SEP-2322's
            `InputRequiredResult`, its `requestState` naming the task, which already runs
            durably and waits for the answers), and the `tools/call` that carries the answers
            gets the task (`CreateTaskResult`): SEP-2663's MRTR → task composition. Otherwise
            the call gets its task at once, and the questions show on `tasks/get`.
        rejoin: for a durable call (`sync_calls="workflow"`), for a client with no tasks whose
            request times out before a long tool ends: the call's workflow is named by its
            caller, its validated arguments and its round, a withdrawn request leaves it
            running, and the same caller (its scope with auth, its MCP session without) calling
            the tool with the same arguments joins it (its logs, progress when it asks, and the
            question it waits for now relayed) or, within `task_ttl` after it completed, gets
            the result nobody received yet, so the body runs once; once received, or when it is
            an error, the same arguments run the body again. Only for tools whose repeated call
            may be answered by one run; a caller cannot cancel such a call.
        sync_call_answer_after: for a `rejoin=True` tool, how long a call may run before its
            request is answered with an `isError` result telling the caller the tool still runs,
            what it reported last, and to call it again with the same arguments (which joins
            it); `timedelta(0)` waits for the end. Unset keeps the extension's setting (50 s).

    Raises:
        ValueError: `sync_calls`, `leg` or `versioning_behavior` is not one of its values,
            `priority` is not an integer from 1 to 5, `rejoin=True` with `sync_calls="inline"`,
            or `sync_call_answer_after` without `rejoin=True` or below zero.
    """
    if sync_calls not in (None, "inline", "workflow"):
        raise ValueError(f"execution_policy(sync_calls={sync_calls!r}): use 'inline' or 'workflow'.")
    if rejoin and sync_calls == "inline":
        raise ValueError(
            "execution_policy(rejoin=True, sync_calls='inline'): only a durable call can be rejoined; "
            "use sync_calls='workflow', or drop rejoin=True."
        )
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
        priority,
        ask_before_task,
        rejoin,
        sync_call_answer_after,
    )

    def apply(fn: F) -> F:
        setattr(fn, _ATTRIBUTE, policy)
        return fn

    return apply


def _check_priority(priority: int | None) -> None:
    """Temporal accepts a key past its levels without a word (9 is started as is): refuse it here."""
    if priority is None:
        return
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
        HIGHEST_PRIORITY <= priority <= LOWEST_PRIORITY
    ):
        raise ValueError(
            f"execution_policy(priority={priority!r}): use an integer from {HIGHEST_PRIORITY} (runs first)"
            f" to {LOWEST_PRIORITY} (runs last), or leave it unset for Temporal's default 3."
        )


def _check_answer_after(answer_after: timedelta | None, rejoin: bool | None) -> None:
    """A deadline answer asks the caller to call again, which only a rejoinable call can honour."""
    if answer_after is None:
        return
    if answer_after < timedelta(0):
        raise ValueError(
            f"execution_policy(sync_call_answer_after={answer_after!r}): use a duration of zero or more "
            "(timedelta(0) waits for the end)."
        )
    if not rejoin:
        raise ValueError(
            "execution_policy(sync_call_answer_after=...) answers a call still running by telling the caller "
            "to call the tool again, and only a rejoinable call's repeat joins it: add rejoin=True to the "
            "same execution_policy, or drop sync_call_answer_after."
        )


def policy_of(component: Any) -> ExecutionPolicy:
    """The policy a function tool's function or a custom `Tool` (attribute `execution_policy`) carries."""
    found = getattr(getattr(component, "fn", None), _ATTRIBUTE, None) or getattr(
        component, "execution_policy", None
    )
    return found if isinstance(found, ExecutionPolicy) else ExecutionPolicy()
