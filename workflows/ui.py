"""What the task workflow shows operators in the Temporal UI, in MCP words.

Pure, deterministic formatting with no imports beyond the standard library, safe in
workflow code. Summaries and details are Temporal user metadata: they travel through
the payload codec (encrypted with a key) and cost no history event (an activity's
summary rides on its schedule command; current details are served by the
`__temporal_workflow_metadata` query).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_MAX_MESSAGE = 200


def leg_summary(tool: str, leg: int, answered: Iterable[str] = ()) -> str:
    """One line per leg activity: `crunch · leg 2 · after answers: name`."""
    summary = f"{tool} · leg {leg}"
    keys = sorted(answered)
    return f"{summary} · after answers: {', '.join(keys)}" if keys else summary


def live_details(
    state: str,
    leg: int,
    requests: Mapping[str, Mapping[str, Any]] | None = None,
    failure: str | None = None,
) -> str:
    """The task's live state as Markdown: status, what it waits for, its last leg failure.

    `requests` are keyed by the tool's own keys (what the leg summaries name).
    """
    lines = [f"**{state}** · {_leg_phrase(state, leg)}"]
    if requests:
        lines += ["", "Waiting for:", ""]
        lines += [f"- `{key}` {_request_line(request)}" for key, request in requests.items()]
    if failure:
        lines += ["", f"Last leg failure: {_shortened(failure)}"]
    return "\n".join(lines)


def _leg_phrase(state: str, leg: int) -> str:
    if leg == 0:
        return "no leg started yet"
    if state == "working":
        return f"leg {leg} running"
    if state == "input_required":
        return f"leg {leg} asked for input"
    return f"after leg {leg}"


def _request_line(request: Mapping[str, Any]) -> str:
    method = request.get("method", "request")
    message = (request.get("params") or {}).get("message")
    return f"({method}): {_shortened(message)}" if message else f"({method})"


def _shortened(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 1] + "…"
