"""MkDocs hook: every number the prose restates from the code is checked against the code.

A sentence that needs a setting's default or a constant's value writes the number as a reader
says it, followed by a comment naming its source: `first 2 s<!-- close_only_for -->`. GitHub
and the site both hide the comment, so the page reads the same either way. A number right
after a setting's name, `` `read_hold` (250 ms) ``, needs no comment: it is that setting's
default. The build fails (and tests/test_docs.py, on the README and every page) when such a
number is not what the code says now, in the configuration reference's own format
(`settings_reference.shown_value`), so prose cannot drift from the code unnoticed.

A comment names a setting of `TemporalTasksSettings` or a key of `CONSTANTS`, the one place that
says where each constant the docs quote lives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from importlib import import_module
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page
from settings_reference import shown_value

from fastmcp_temporal._settings import TemporalTasksSettings

WATCH = "fastmcp_temporal.server._watch"
"""The module holding one watch's decisions: when what is known answers, held reads' re-reads."""
DESCRIBED = "fastmcp_temporal.server._described"
"""The module holding when a copy's progress is due a re-read."""
FEED_GAPS = "fastmcp_temporal.server._feed_gaps"
"""The module holding what a copy followed through the change feed is re-read for."""
HANDLERS = "fastmcp_temporal.server._handlers"
HEARTBEAT = "fastmcp_temporal.worker._heartbeat"
NOTICES = "fastmcp_temporal.worker._notices"

CONSTANTS: dict[str, str] = {
    "close_only_for": "fastmcp_temporal.server._long_poll_road:_CLOSE_ONLY_FOR",
    "close_only_first_recheck": f"{WATCH}:_CLOSE_ONLY_FIRST_RECHECK",
    "close_only_recheck": f"{WATCH}:_CLOSE_ONLY_RECHECK",
    "held_poll_interval": "fastmcp_temporal.server._holds:HELD_POLL_INTERVAL",
    "poll_loop_slack": "fastmcp_temporal.server._holds:POLL_LOOP_SLACK",
    "progress_recheck_min": f"{DESCRIBED}:_PROGRESS_RECHECK_MIN",
    "heartbeat_lands": f"{DESCRIBED}:_HEARTBEAT_LANDS",
    "notice_delay": f"{HEARTBEAT}:NOTICE_DELAY",
    "follow_after": "fastmcp_temporal.worker._leg_follow:_FOLLOW_AFTER",
    "closed_recheck_max": "fastmcp_temporal.server._closed_answers:_CLOSED_RECHECK_MAX",
    "closed_cache_entries": "fastmcp_temporal.server._closed_answers:_CLOSED_CACHE_ENTRIES",
    "closed_cache_max_result_chars": "fastmcp_temporal.server._closed_answers:CLOSED_CACHE_MAX_RESULT_CHARS",
    "watch_idle": f"{WATCH}:_WATCH_IDLE",
    "workflow_task_recheck": f"{FEED_GAPS}:_WORKFLOW_TASK_RECHECK",
    "safety_reread": f"{FEED_GAPS}:SAFETY_REREAD",
    "refused_pause": "fastmcp_temporal.server._watches:_REFUSED_PAUSE",
    "long_poll_period": "fastmcp_temporal.server._quiet:LONG_POLL_PERIOD",
    "default_poll_interval_ms": "fastmcp_temporal.workflows.models:DEFAULT_POLL_INTERVAL_MS milliseconds",
    "apply_wait": f"{HANDLERS}:_APPLY_WAIT",
    "apply_first_poll": f"{HANDLERS}:_APPLY_FIRST_POLL seconds",
    "apply_max_poll": f"{HANDLERS}:_APPLY_MAX_POLL seconds",
    "stall_grace": "fastmcp_temporal.connection._stall:STALL_GRACE",
    "relay_describe_every": "fastmcp_temporal.server._relay:DESCRIBE_EVERY",
    "tool_timeout_margin": "fastmcp_temporal.server._facts:_TOOL_TIMEOUT_MARGIN",
    "fairness_key_bytes": "fastmcp_temporal.server._scope:FAIRNESS_KEY_BYTES",
    "initial_retry": "fastmcp_temporal.server._facts:_INITIAL_RETRY",
    "progress_stamp_after": "fastmcp_temporal.worker._progress:PROGRESS_STAMP_AFTER",
    "first_message_stamp_after": "fastmcp_temporal.worker._progress:FIRST_MESSAGE_STAMP_AFTER",
    "loop_lag_limit": "fastmcp_temporal.worker._slots:LAG_LIMIT seconds",
    "minimum_legs": "fastmcp_temporal.worker._slots:MINIMUM_LEGS",
    "sticky_timeout": "fastmcp_temporal.worker._plugin:STICKY_TIMEOUT",
    "notice_window_age": f"{NOTICES}:WINDOW_AGE seconds",
    "notice_window_messages": f"{NOTICES}:WINDOW_NOTICES",
    "notice_window_bytes": f"{NOTICES}:WINDOW_BYTES",
    "notice_message_chars": f"{NOTICES}:MESSAGE_CHARS",
    "store_retry_longest": "fastmcp_temporal.worker._store_outage:_LONGEST_RETRY seconds",
    "store_threshold": "fastmcp_temporal.connection._stores:STORE_THRESHOLD",
    "history_bytes_limit": "fastmcp_temporal.workflows.budget:HISTORY_BYTES_LIMIT",
    "big_run_arguments": "fastmcp_temporal.worker._big_runs:BIG_ARGUMENTS",
    "codec_max_body": "fastmcp_temporal.cli._codec_server:MAX_BODY",
    "uncounted_bytes": "fastmcp_temporal.server._http_limit:UNCOUNTED_BYTES",
    "max_tasks_per_stream": "fastmcp_temporal.server._push:MAX_TASKS_PER_STREAM",
}
"""Comment name: `module:attribute`, then the unit (a `timedelta` keyword) of a plain number of time."""

SETTINGS = TemporalTasksSettings.model_fields
NUMBER = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"
UNIT = r"(?:ms|s|min|h|days|KiB|MiB)\b"
COMMENT = re.compile(r"<!-- (?P<name>[a-z_]+) -->")
SOURCED = re.compile(rf"(?P<number>{NUMBER}(?: {UNIT})?)?{COMMENT.pattern}")
AFTER_A_SETTING = re.compile(rf"`(?P<name>[a-z_]+)`\s+\(?(?P<number>{NUMBER} {UNIT})")


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    """Fail the build on a restated number the code contradicts; drop the comments naming sources."""
    wrong = mismatches(markdown)
    if wrong:
        raise PluginError(f"{page.file.src_uri}: numbers that are not the code's:\n" + "\n".join(wrong))
    return COMMENT.sub("", markdown)


def mismatches(markdown: str) -> list[str]:
    """Each restated number of `markdown` that is not its source's value, as `line N: what is wrong`."""
    wrong = []
    for line, name, number in sorted(restated_numbers(markdown), key=lambda restated: restated[0]):
        if name not in SETTINGS and name not in CONSTANTS:
            wrong.append(f"line {line}: <!-- {name} --> names no setting and no key of CONSTANTS")
        elif number is None:
            wrong.append(f"line {line}: <!-- {name} --> follows no number")
        elif number != (value := code_value(name)):
            wrong.append(f"line {line}: {number} for {name}, which is {value}")
    return wrong


def restated_numbers(markdown: str) -> Iterator[tuple[int, str, str | None]]:
    """The line, the source's name and the number of each number `markdown` ties to the code."""
    for sourced in SOURCED.finditer(markdown):
        yield _line(markdown, sourced), sourced["name"], sourced["number"]
    for named in AFTER_A_SETTING.finditer(markdown):
        if named["name"] in SETTINGS:
            yield _line(markdown, named), named["name"], named["number"]


def code_value(name: str) -> str:
    """The value of the setting's default or of the constant `name`, as the docs write it."""
    if name in SETTINGS:
        return shown_value(SETTINGS[name].default)
    where, _, unit = CONSTANTS[name].partition(" ")
    module, attribute = where.split(":")
    value = getattr(import_module(module), attribute)
    return shown_value(timedelta(**{unit: value}) if unit else value)


def _line(markdown: str, found: re.Match[str]) -> int:
    return markdown.count("\n", 0, found.start()) + 1
