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
from typing import Any

from fastmcp_temporal.workflows.models import LegPolicy

_MAX_ARGUMENT_PREVIEW = 120


def task_user_metadata(
    *,
    tool: str,
    version: str | None,
    task_id: str,
    created_at: str,
    ttl_ms: int,
    scope_tag: str,
    poll_interval_ms: int,
    policy: LegPolicy,
    arguments: dict[str, Any],
    encrypted: bool,
) -> dict[str, str]:
    """`static_summary` and `static_details` for `Client.start_workflow`."""
    named = f"{tool} v{version}" if version else tool
    details = [
        f"**MCP task** of tool `{tool}`" + (f" (version {version})" if version else ""),
        "",
        f"- Task id: `{task_id}`",
        f"- Created: {created_at}",
        f"- TTL: {ttl_ms / 1000:g} s",
        f"- Caller scope (hash): `{scope_tag}`",
        f"- Poll interval: {poll_interval_ms} ms",
        f"- Each leg: {_leg_kind(policy)}, start-to-close {policy.start_to_close_seconds:g} s, {_attempts(policy)}",
        f"- Arguments: {_argument_preview(arguments, encrypted)}",
    ]
    return {"static_summary": f"{named} · task {task_id}", "static_details": "\n".join(details)}


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
