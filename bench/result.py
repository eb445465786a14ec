"""The one result schema: what a scenario measured, stamped with where and on what it ran.

Every run writes one JSON object to `bench/results/<scenario>-<stamp>.json` (or where `--out`
says: a file name under `bench/results/`, or a path):

- `scenario`, `question`, `quick`, `settings` (the run's options);
- `stamp`: `commit` (and `dirty`), `versions` of fastmcp, fastmcp-tasks, temporalio and
  fastmcp-temporal, `cpus`, `load_start` and `load_end` (1, 5 and 15 minute load averages),
  `started` (UTC) and `seconds`;
- `figures`: the scenario's own measurements, latencies as `metrics.percentiles` gives them.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.harness import BENCH, RESULTS

PACKAGES = ("fastmcp", "fastmcp-tasks", "temporalio", "fastmcp-temporal")


def stamp_start() -> dict[str, Any]:
    """Where and on what the run starts: commit, package versions, CPU count, load, time."""
    return {
        **_commit(),
        "versions": {name: _version(name) for name in PACKAGES},
        "cpus": os.cpu_count(),
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "monotonic": time.monotonic(),
    }


def stamp_end(stamp: dict[str, Any]) -> dict[str, Any]:
    """`stamp` with the load at the end and the run's length."""
    began = stamp.pop("monotonic")
    return stamp | {
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - began, 1),
    }


def write(result: dict[str, Any], out: str | None) -> Path:
    """Write `result` to `bench/results/<scenario>-<stamp>.json`, or to `out`: a file name under
    `bench/results/`, or a path (one with a folder in it) taken as it is."""
    stamp = result["stamp"]["started"].replace(":", "").replace("-", "").split("+")[0]
    name = Path(out or f"{result['scenario']}-{stamp}.json")
    path = name if name.parent != Path() else RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def _commit() -> dict[str, Any]:
    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", "-C", str(BENCH), *arguments], capture_output=True, text=True, check=False
        ).stdout.strip()

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
