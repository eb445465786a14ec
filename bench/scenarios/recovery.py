"""How fast a killed worker's task recovers: kill -9 -> retried attempt starts -> task completes.

    .venv/bin/python -m bench run recovery [--rounds 10]

Two `fastmcp-temporal worker tests/fault_app.py` processes (`bench/fault_workers.py`). Each round
submits a resumable `count` task through an API-only FastMCP server and `fastmcp.Client`, kills
the worker running it once the tool is near its end, and measures from the kill to the retried
attempt's first line in the tool body and to Temporal closing the workflow. The retried attempt
resumes from its checkpoint, so about 0.2 s of tool work remains after it starts. The killed
worker is replaced before the next round. Target: heartbeat timeout + 3 s.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from bench.fault_workers import fault_app, fault_workers
from bench.metrics import percentiles_ms
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id

QUESTION = "How long after a worker is killed does its task's retried attempt start, and the task complete?"
QUICK = {"rounds": 2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    to_retry, to_done = [], []
    async with fault_workers(2) as (bench, client):
        temporal = await TemporalClient.connect(bench.server.address)
        for round_ in range(args.rounds):
            key = f"round-{round_}"
            task = await call_tool_task(client, "count", {"key": key, "to": 30, "step": 0.1})
            with anyio.fail_after(60):
                while max((e["done"] for e in bench.events("step", key)), default=0) < 28:
                    await anyio.sleep(0.01)
            (first,) = bench.events("start", key)
            victim = bench.worker_with_pid(first["pid"])
            killed_at = time.time()
            bench.kill(victim)
            retry = (await bench.wait_for("start", key, count=2))[-1]
            final = await task.wait(timeout=60)
            assert final.status == "completed", final
            handle = temporal.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id))
            closed = (await handle.describe()).close_time
            assert closed is not None
            to_retry.append(retry["t"] - killed_at)
            to_done.append(closed.timestamp() - killed_at)
            print(
                f"round {round_}: retry +{to_retry[-1]:.2f}s (resumed from {retry['resumed_from']}), "
                f"completed +{to_done[-1]:.2f}s"
            )
            await anyio.to_thread.run_sync(bench.start_worker)
    return {
        "kill_to_retry_ms": percentiles_ms(to_retry),
        "kill_to_completed_ms": percentiles_ms(to_done),
        "target_s": fault_app.HEARTBEAT_TIMEOUT.total_seconds() + 3,
    }
