"""How `tasks list` and `tasks show` print: stable JSON (docs/operations.md), or Rich tables.

Tables print caller and tool text verbatim (`plain`): tool names, questions, answers,
results and failure messages come from callers and tools; as markup they could crash the
command or hide text, and a raw escape sequence drives the operator's terminal. Rich is
imported only when a table is printed.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal acts on rather than prints (tab and newline excepted)."""


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def plain(value: object) -> Text:
    """`value` as Rich shows it verbatim: never read as markup or emoji codes, control characters escaped."""
    from rich.text import Text

    return Text(_CONTROL_CHARACTERS.sub(lambda found: repr(found[0])[1:-1], str(value)))


def print_rows(rows: list[dict[str, Any]], *, stuck: bool = False) -> None:
    """`tasks list`'s table; with `stuck`, each task's workflow task attempt, reason and fix too."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for name in ("TASK ID", "KIND", "TOOL", "STATUS", "CREATED", "DURATION", "SCOPE"):
        table.add_column(name, no_wrap=True)  # ids stay whole and copyable; a reason or a fix wraps
    if stuck:
        table.add_column("ATTEMPT", no_wrap=True)
        table.add_column("REASON", ratio=1, overflow="fold")
        table.add_column("FIX", ratio=1, overflow="fold")
    for row in rows:
        cells = [
            row["taskId"],
            row["kind"],
            row["tool"] or "",
            row["status"],
            row["createdAt"][:19].replace("T", " "),
            f"{row['durationSeconds']:.1f}s",
            row["scope"],
        ]
        if stuck:
            cells += [str(row["workflowTaskAttempt"]), row["reason"], row["fix"]]
        table.add_row(*map(plain, cells))
    Console(width=200).print(table)


def print_task(shown: dict[str, Any]) -> None:
    """`tasks show`'s table: one field a row, each input request and answer on its own."""
    from rich.console import Console
    from rich.table import Table

    fields = ("taskId", "kind", "tool", "status", "scope", "createdAt", "closedAt", "durationSeconds", "legs")
    rows: list[tuple[str, object]] = [(name, shown[name]) for name in fields]
    for request in shown["inputRequests"]:
        message = (request["request"].get("params") or {}).get("message", "")
        rows.append((f"leg {request['leg']} asked", f"{request['key']}: {message}"))
    for answer in shown["answers"]:
        rows.append(("answered", f"{answer['key']}: {json.dumps(answer['answer'], default=str)}"))
    for name in ("result", "error"):
        if shown[name] is not None:
            rows.append((name, json.dumps(shown[name], default=str)))
    if not shown["readable"]:
        rows.append(("payloads", "encrypted: pass --encryption-key (or FASTMCP_TEMPORAL_ENCRYPTION_KEY)"))
    rows.append(("UI", shown["uiUrl"]))
    table = Table("FIELD", "VALUE", show_header=False)
    for name, value in rows:
        table.add_row(name, plain(value))
    Console(width=200).print(table)
