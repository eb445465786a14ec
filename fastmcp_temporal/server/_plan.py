"""One plan per `tools/call` of a task tool: what it runs and how, looked up once when it arrives.

A call that runs on Temporal (a task, a durable synchronous call, a 2025-11-25 task) needs the
component a worker runs for the tool (a mounted tool's child, not its wrapper) and the execution
policy that component carries. The entry that takes the call makes one `CallPlan` of them, and
every layer below it (the durable call, the task's creation, its facts) reads the plan, so a
call looks its component up once at most. A call served inline looks up only what decides
that: for a tool whose own function carries its policy, nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError

from fastmcp_temporal._fastmcp_private import registered_component_for_key
from fastmcp_temporal._policy import ExecutionPolicy, policy_of
from fastmcp_temporal._settings import TemporalTasksSettings

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.tools.base import Tool


@dataclass(frozen=True)
class CallPlan:
    """A call of a task tool as it runs on Temporal."""

    tool: Tool
    """The tool as called: the task's tool name and version are its."""
    component: Tool
    """What a worker runs for it: the arguments are validated against it, and its key names it."""
    policy: ExecutionPolicy
    """The component's execution policy."""


async def plan_task(server: FastMCP, tool: Tool) -> CallPlan:
    """The plan of a call whose caller asked for a task."""
    component = await _task_component(server, tool)
    return CallPlan(tool, component, policy_of(component))


async def plan_sync_call(settings: TemporalTasksSettings, server: FastMCP, tool: Tool) -> CallPlan | None:
    """The plan of a call whose caller did not opt in to tasks, when a workflow serves it (`sync_calls`);
    None when it is served inline. A function tool is its own component, so its policy is read from it."""
    component = None if hasattr(tool, "fn") else await _task_component(server, tool)
    policy = policy_of(component or tool)
    if not _runs_as_workflow(settings, policy):
        return None
    return CallPlan(tool, component or await _task_component(server, tool), policy)


def refuse_rejoin_that_cannot_apply(settings: TemporalTasksSettings, components: Sequence[Any]) -> None:
    """Refuse, when the server starts, a tool's `rejoin=True` that no call would honour.

    Raises:
        ValueError: a tool with `rejoin=True` is served inline, or only as a task.
    """
    for component in components:
        policy = policy_of(component)
        if not policy.rejoin:
            continue
        if component.task_config.mode == "required":
            raise ValueError(
                f"Tool {component.name!r} has execution_policy(rejoin=True) but runs only as a task "
                "(task mode 'required'), which a caller cannot rejoin: drop rejoin=True, or let the tool "
                "answer synchronous calls (task=True) with sync_calls='workflow'."
            )
        if not _runs_as_workflow(settings, policy):
            raise ValueError(
                f"Tool {component.name!r} has execution_policy(rejoin=True), which only a durable call can "
                "honour, but its synchronous calls run inline: add sync_calls='workflow' to its "
                "execution_policy (or set it on TemporalTasksExtension), or drop rejoin=True."
            )


def _runs_as_workflow(settings: TemporalTasksSettings, policy: ExecutionPolicy) -> bool:
    """Whether a caller that did not opt in gets the tool by a workflow: its policy, else the extension's."""
    return (policy.sync_calls or settings.sync_calls) == "workflow"


async def _task_component(server: FastMCP, tool: Tool) -> Tool:
    """The component a worker runs for `tool`: a mounted tool's child, not its wrapper."""
    try:
        return await registered_component_for_key(server, tool.key)
    except MCPError:
        return tool  # not among get_tasks(): validate against the tool as resolved
