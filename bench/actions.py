"""Billable Temporal Cloud Actions per task shape, counted in recorded histories.

    .venv/bin/python tests/histories/record.py now /tmp/histories-now   # this code's shapes
    .venv/bin/python bench/actions.py tests/histories/0.2.0 /tmp/histories-now

Each folder holds one JSON history per task shape, as `tests/histories/record.py` writes
them (every run of a task that continued as new, summed under its shape). Prints a
Markdown table: per shape and folder, the Actions its history bills (`billing.py`'s
rules) and its event count. Heartbeats leave no event, so they are not counted here: the SDK
sends a leg's first half a throttle window in, then one per window (0.8 x `heartbeat_timeout`);
`bench/heartbeat_cost.py` counts them from the dev server's metric.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

from billing import billable_actions  # bench/ is the script's own folder on sys.path
from temporalio.client import WorkflowHistory


def counted(folder: Path) -> dict[str, tuple[int, int]]:
    """Actions and events per shape in a folder of recorded histories.

    Args:
        folder: a folder of `<shape>.json` (or `<shape>-runN.json`) histories.
    """
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in sorted(folder.glob("*.json")):
        history = WorkflowHistory.from_json("recorded", path.read_text())
        shape = re.sub(r"-run\d+$", "", path.stem)
        totals[shape][0] += billable_actions(history.events)
        totals[shape][1] += len(history.events)
    return {shape: (actions, events) for shape, (actions, events) in totals.items()}


def main(folders: list[Path]) -> None:
    counts = [counted(folder) for folder in folders]
    shapes = sorted(set().union(*counts))
    print("| shape | " + " | ".join(f"{folder}: Actions (events)" for folder in folders) + " |")
    print("| --- |" + " --- |" * len(folders))
    for shape in shapes:
        cells = [f"{c[shape][0]} ({c[shape][1]})" if shape in c else "—" for c in counts]
        print(f"| {shape} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main([Path(arg) for arg in sys.argv[1:]])
