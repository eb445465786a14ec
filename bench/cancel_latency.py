"""How fast `tasks/cancel` reaches a running tool: the request -> the body sees CancelledError.

    .venv/bin/python bench/cancel_latency.py [--rounds 30]

Uses the harness of `bench/recovery.py`: its own file-backed dev server and one
`fastmcp-temporal worker tests/fault_app.py` process (heartbeat timeout 2 s). Each round
submits a `hold` task through an API-only FastMCP server and `fastmcp.Client`, lets the
body run for 0.3 s, sends `tasks/cancel`, and measures from just before the request to
the line the body logs when `CancelledError` reaches it (same machine, wall clock).
Target: <= 250 ms p95.
"""

from __future__ import annotations

import argparse
import time

import anyio
from fastmcp_tasks.client import call_tool_task
from recovery import harness, report


async def main(rounds: int) -> None:
    latencies = []
    async with harness(workers=1) as (bench, client):
        for round_ in range(rounds):
            key = f"round-{round_}"
            task = await call_tool_task(client, "hold", {"key": key})
            await bench.wait_for("start", key)
            await anyio.sleep(0.3)
            sent_at = time.time()
            await task.cancel()
            (seen,) = await bench.wait_for("cancelled", key)
            latencies.append(seen["t"] - sent_at)
            final = await task.wait(timeout=30)
            assert final.status == "cancelled", final
    report("tasks/cancel -> body sees CancelledError", latencies, "p95 <= 250 ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    anyio.run(main, parser.parse_args().rounds)
