"""Every scenario, registered in one place: its name is its module under `bench/scenarios/`.

A scenario module has `QUESTION` (what it answers, in one sentence), `QUICK` (the option values
`--quick` sets: a run of seconds to a minute), `add_arguments(parser)` and
`async run(args) -> dict` (its figures); it may have `report(figures, path)` to print tables or
draw a chart once the result is written.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SCENARIOS = (
    "compare",
    "latency",
    "sync_calls",
    "update_calls",
    "cancel_latency",
    "recovery",
    "upstream_check",
    "actions",
    "input_roundtrip",
    "held_reads",
    "payloads",
    "busy_worker",
    "rate_limits",
    "close_ends_call",
    "fairness",
    "feed_cost",
    "heartbeat_cost",
    "push_latency",
    "request_memory",
    "stalled_uploads",
    "submit_cost",
    "freshness",
    "reads_at_scale",
    "scale",
)


def load(name: str) -> ModuleType:
    """The scenario module registered as `name`."""
    if name not in SCENARIOS:
        raise KeyError(f"no scenario {name!r}; `python -m bench list` names them")
    return importlib.import_module(f"bench.scenarios.{name}")
