"""Billable Temporal Cloud Actions per task shape, counted in recorded histories.

    .venv/bin/python tests/histories/record.py now /tmp/histories-now   # this code's shapes
    .venv/bin/python -m bench run actions --folders tests/histories/0.2.0 /tmp/histories-now

Each folder holds one JSON history per task shape, as `tests/histories/record.py` writes them
(every run of a task that continued as new, summed under its shape). Figures, per shape and
folder: the Actions its history bills (`bench/billing.py`'s rules) and its event count, also
printed as a Markdown table. Heartbeats leave no event, so they are not counted here: the SDK
sends a leg's first half a throttle window in, then one per window (0.8 x `heartbeat_timeout`);
the `heartbeat_cost` scenario counts them from the dev server's metric.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory

from bench.billing import billable_actions
from bench.harness import REPO

QUESTION = "How many billable Actions and history events does each recorded task shape cost, per release?"
QUICK: dict[str, Any] = {}
_RECORDED = REPO / "tests" / "histories"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--folders",
        nargs="+",
        type=Path,
        default=sorted(p for p in _RECORDED.iterdir() if p.is_dir()),
        help="folders of recorded histories (default: every release under tests/histories)",
    )


def counted(folder: Path) -> dict[str, dict[str, int]]:
    """Actions and events per shape in a folder of `<shape>.json` (or `<shape>-runN.json`) histories."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"actions": 0, "events": 0})
    for path in sorted(folder.glob("*.json")):
        history = WorkflowHistory.from_json("recorded", path.read_text())
        shape = re.sub(r"-run\d+$", "", path.stem)
        totals[shape]["actions"] += billable_actions(history.events)
        totals[shape]["events"] += len(history.events)
    return dict(totals)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    return {str(folder): counted(folder) for folder in args.folders}


def report(figures: dict[str, Any], path: Path) -> None:
    """Print a Markdown table: per shape and folder, Actions (events)."""
    shapes = sorted(set().union(*figures.values()))
    print("| shape | " + " | ".join(f"{folder}: Actions (events)" for folder in figures) + " |")
    print("| --- |" + " --- |" * len(figures))
    for shape in shapes:
        cells = [
            f"{c[shape]['actions']} ({c[shape]['events']})" if shape in c else "—" for c in figures.values()
        ]
        print(f"| {shape} | " + " | ".join(cells) + " |")
