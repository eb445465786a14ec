"""MkDocs hook: the configuration reference, rendered from `TemporalTasksSettings` at build time.

A page puts `<!-- settings-reference -->` where the table goes. Every row comes from the
settings class itself (its name, `FASTMCP_TEMPORAL_<NAME>`, the default, the field's
`description`), so the reference cannot drift from the code; tests/test_docs.py checks that
every setting has a description and shows up in the built page.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastmcp_temporal._settings import ENV_PREFIX, TemporalTasksSettings

MARKER = "<!-- settings-reference -->"
KIB = 1024
MIB = 1024 * KIB


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker, on whichever page holds it, with the settings table."""
    return markdown.replace(MARKER, settings_table()) if MARKER in markdown else markdown


def settings_table() -> str:
    """One Markdown table row per setting, in the order the class declares them."""
    rows = [
        "| setting and variable | default | meaning |",
        "| --- | --- | --- |",
    ]
    for name, field in TemporalTasksSettings.model_fields.items():
        default = shown_value(field.default)
        rows.append(f"| `{name}`<br>`{ENV_PREFIX}{name.upper()}` | {default} | {field.description or ''} |")
    return "\n".join(rows)


def shown_value(value: object) -> str:
    """A value of the code as a reader says it: `unset`, `7 days`, `250 ms`, `2 MiB`, `fastmcp-tasks`."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f"{value // MIB} MiB"
    if isinstance(value, int) and value >= KIB and value % KIB == 0:
        return f"{value // KIB} KiB"
    if isinstance(value, int):
        return f"{value:,}"
    return f"`{value}`"


def _duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if seconds >= size and (seconds / size).is_integer() or unit == "s" and seconds >= 1:
            return f"{seconds / size:g} {unit}"
    return f"{seconds * 1000:g} ms"
