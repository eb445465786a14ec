"""The fixed summary and details every task workflow shows in the Temporal UI.

Temporal's user metadata turns an `mcp-task/<scope>/<id>` row of type
`McpTaskWorkflow` into "crunch v2 · task …" with the task's settings beside it.
It goes through the payload codec like any payload (encrypted with a key) and is
part of the start request, so it costs no extra history event. It never holds the
caller's token or headers; argument values are previewed only when payloads are
stored in clear and the preview is short.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastmcp_temporal.workflows.models import LegPolicy

if TYPE_CHECKING:
    from fastmcp_temporal.server._facts import TaskFacts

_MAX_ARGUMENT_PREVIEW = 120


def task_user_metadata(facts: TaskFacts, arguments: dict[str, Any], *, encrypted: bool) -> dict[str, str]:
    """`static_summary` and `static_details` for `Client.start_workflow`."""
    tool, version, policy = facts.tool, facts.version, facts.policy
    named = f"{tool} v{version}" if version else tool
    details = [
        f"**MCP task** of tool `{tool}`" + (f" (version {version})" if version else ""),
        "",
        f"- Task id: `{facts.task_id}`",
        f"- Created: {facts.created_at}",
        f"- TTL: {facts.ttl_ms / 1000:g} s",
        f"- Caller scope (hash): `{facts.scope}`",
        f"- Poll interval: {facts.poll_interval_ms} ms",
        f"- Each leg: {_leg_kind(policy)}, start-to-close {policy.start_to_close_seconds:g} s, {_attempts(policy)}",
        f"- Arguments: {_argument_preview(arguments, encrypted)}",
    ]
    return {"static_summary": f"{named} · task {facts.task_id}", "static_details": "\n".join(details)}


def _leg_kind(policy: LegPolicy) -> str:
    if policy.local:
        return "a local activity (no heartbeats)"
    return f"an activity with heartbeat timeout {policy.heartbeat_seconds:g} s"


def _attempts(policy: LegPolicy) -> str:
    if policy.maximum_attempts == 0:
        return "unlimited attempts"
    return f"at most {policy.maximum_attempts} attempt(s)"


def _argument_preview(arguments: dict[str, Any], encrypted: bool) -> str:
    names = ", ".join(f"`{name}`" for name in arguments) or "none"
    if encrypted:
        return f"{names} (values not previewed: payloads are encrypted)"
    preview = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(preview) > _MAX_ARGUMENT_PREVIEW:
        return f"{names} (too long to preview; see the workflow input)"
    return f"`{preview}`"
