"""How soon does a waiting client see its task finish, with reads held and without?

Runs one task at a time on a fresh local Temporal dev server (started here, stopped in
`finally`), the worker in this process, a real `fastmcp.Client` over the in-memory
transport. Each task's tool (poll interval 5 s, the default) waits until released at a
random moment 1 to 8 s after it starts, while its client polls; the figure is the time from
the tool's return to the client's observing the result, for two clients: `fastmcp.Client`'s
`call_tool` (it waits min(backoff from 20 ms, pollIntervalMs) between reads) and a client
that waits exactly the advertised `pollIntervalMs` between reads. Each with the defaults
(reads held) and with `read_hold=0, reread_hold=0` (every read answered at once, as before
reads were held).

    .venv/bin/python bench/held_reads.py [--samples N]

Writes `bench/results/held_reads.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

RESULTS = Path(__file__).parent / "results"
SETTINGS: dict[str, dict[str, Any]] = {
    "held (defaults)": {},
    "not held (read_hold=0, reread_hold=0)": {"read_hold": timedelta(0), "reread_hold": timedelta(0)},
}
RELEASE_AFTER = (1.0, 8.0)  # seconds after the tool starts
TERMINAL = ("completed", "failed", "cancelled")


async def _fixed_interval_client(client: Client, task_id: str) -> None:
    """Read until the task ends, waiting exactly the advertised `pollIntervalMs` between reads."""
    while True:
        request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
        read = await client.session.send_request(request, ClientGetTaskResult)
        if read.status in TERMINAL:
            return
        await asyncio.sleep((read.poll_interval_ms or 0) / 1000)


async def _samples(address: str, settings: dict[str, Any], samples: int) -> dict[str, list[float]]:
    mcp = FastMCP("bench")
    extension = TemporalTasksExtension(address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}", **settings)
    mcp.add_extension(extension)
    returned: list[float] = []

    @mcp.tool(task=True)
    async def waits(seconds: float) -> str:
        await asyncio.sleep(seconds)
        returned.append(time.perf_counter())
        return "done"

    seen: dict[str, list[float]] = {"fastmcp.Client": [], "fixed interval": []}
    async with Client(mcp) as client:
        for _ in range(samples):
            await client.call_tool("waits", {"seconds": random.uniform(*RELEASE_AFTER)})
            seen["fastmcp.Client"].append(time.perf_counter() - returned[-1])
            task = await call_tool_task(client, "waits", {"seconds": random.uniform(*RELEASE_AFTER)})
            await asyncio.sleep((task.create_result.poll_interval_ms or 0) / 1000)
            await _fixed_interval_client(client, task.task_id)
            seen["fixed interval"].append(time.perf_counter() - returned[-1])
    return seen


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 3),
        "max_s": round(ordered[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="tasks per client kind and setting")
    args = parser.parse_args()
    server = start_dev_server(ui=False)
    report: dict[str, Any] = {"samples": args.samples, "tool_poll_interval_ms": 5000}
    try:
        for name, settings in SETTINGS.items():
            seen = asyncio.run(_samples(server.address, settings, args.samples))
            report[name] = {kind: {**_summary(times), "raw_s": [round(t, 3) for t in times]}
                            for kind, times in seen.items()}
            print(name, {kind: _summary(times) for kind, times in seen.items()}, flush=True)
    finally:
        server.stop()
    (RESULTS / "held_reads.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
