"""Per-tool execution policy: how one tool's legs are scheduled, and how its calls are served.

The extension's settings are the defaults; `@execution_policy(...)` under `@mcp.tool(task=True)`
overrides them for that tool. Only crashes and timeouts retry: tool errors are results, never
retried. The options are `ExecutionPolicy`'s fields, named and documented there once:
`execution_policy` is that class under the name a decorator reads by, so type checkers and
editors read the options, their types and their docs off the class, and an option it does not
have is refused by name, with the nearest one it has.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from fastmcp_temporal._settings import VersioningBehaviorName

_ATTRIBUTE = "__fastmcp_temporal_policy__"
# Temporal's priority keys with its default `matching.priorityLevels`; unset is the middle one, 3.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 5

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C")


def _naming_unknown_options(cls: type[C]) -> type[C]:
    """Refuse an option the policy does not have by its name, with the nearest one it has."""
    init, options = cls.__init__, [field.name for field in fields(cls)]  # type: ignore[arg-type]

    @functools.wraps(init)
    def checked(self: C, /, *unnamed: Any, **given: Any) -> None:
        if unnamed:
            raise TypeError(f"execution_policy takes its options by name: {', '.join(options)}.")
        for name in given:
            if name not in options:
                nearest = difflib.get_close_matches(name, options, n=1)
                fix = f"did you mean {nearest[0]}?" if nearest else f"its options are {', '.join(options)}."
                raise TypeError(f"execution_policy() has no option {name!r}: {fix}")
        init(self, **given)

    setattr(cls, "__init__", checked)  # type checkers still read the dataclass's own
    return cls


@_naming_unknown_options
@dataclass(frozen=True, kw_only=True)
class ExecutionPolicy:
    """Set how this tool's legs are scheduled: `@execution_policy(...)` below `@mcp.tool(task=True)`.

    `execution_policy` is this class: the policy it makes, applied to the tool's function, is
    carried with it. A custom `Tool` subclass may carry one as its `execution_policy` attribute
    instead. Each option left None keeps the extension's setting of the same name, read when the
    task starts.

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
        TypeError: an option it does not have (the error names the nearest one it has).
        ValueError: `sync_calls`, `leg` or `versioning_behavior` is not one of its values,
            `priority` is not an integer from 1 to 5, `rejoin=True` with `sync_calls="inline"`,
            or `sync_call_answer_after` without `rejoin=True` or below zero.
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
        _check_choices(self)
        if self.rejoin and self.sync_calls == "inline":
            raise ValueError(
                "execution_policy(rejoin=True, sync_calls='inline'): only a durable call can be rejoined; "
                "use sync_calls='workflow', or drop rejoin=True."
            )
        _check_priority(self.priority)
        _check_answer_after(self.sync_call_answer_after, self.rejoin)

    def __call__(self, fn: F) -> F:
        """Carry this policy with the tool's function."""
        setattr(fn, _ATTRIBUTE, self)
        return fn


execution_policy = ExecutionPolicy
"""`ExecutionPolicy` by the name a decorator reads by: `@execution_policy(leg="local")` below `@mcp.tool`."""


def _choices() -> dict[str, tuple[Any, ...]]:
    """The values of each option typed as a choice (`Literal`), as its annotation names them."""
    choices = {}
    for name, hint in get_type_hints(ExecutionPolicy).items():
        arms = [arm for arm in get_args(hint) if get_origin(arm) is Literal]
        if arms:
            choices[name] = tuple(value for arm in arms for value in get_args(arm))
    return choices


_CHOICES = _choices()


def _check_choices(policy: ExecutionPolicy) -> None:
    for name, allowed in _CHOICES.items():
        value = getattr(policy, name)
        if value is not None and value not in allowed:
            raise ValueError(f"execution_policy({name}={value!r}): use {' or '.join(map(repr, allowed))}.")


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
