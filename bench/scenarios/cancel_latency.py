"""How fast `tasks/cancel` reaches a running tool: the request -> the body sees CancelledError.

    .venv/bin/python -m bench run cancel_latency [--rounds 30]

One `fastmcp-temporal worker tests/fault_app.py` process (`bench/fault_workers.py`, heartbeat
timeout 2 s). Each round submits a `hold` task through an API-only FastMCP server and
`fastmcp.Client`, lets the body run for 0.3 s, sends `tasks/cancel`, and measures from just
before the request to the line the body logs when `CancelledError` reaches it (same machine,
wall clock). Target: <= 250 ms p95.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
from fastmcp_tasks.client import call_tool_task

from bench.fault_workers import fault_workers
from bench.metrics import percentiles

QUESTION = (
    "How long from a tasks/cancel to the running tool body seeing CancelledError, in production's shape?"
)
QUICK = {"rounds": 5}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=30)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    latencies = []
    async with fault_workers(1) as (bench, client):
        for round_ in range(args.rounds):
            key = f"round-{round_}"
            task = await call_tool_task(client, "hold", {"key": key})
            await bench.wait_for("start", key)
            await anyio.sleep(0.3)
            sent_at = time.time()
            await task.cancel()
            (seen,) = await bench.wait_for("cancelled", key)
            latencies.append((seen["t"] - sent_at) * 1000)
            final = await task.wait(timeout=30)
            assert final.status == "cancelled", final
    return {"cancel_to_cancelled_error_ms": percentiles(latencies), "target_p95_ms": 250}
