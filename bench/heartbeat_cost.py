"""What a long tool leg bills in Actions beside bare Temporal, and how fast a cancel reaches it.

    .venv/bin/python bench/heartbeat_cost.py [--seconds 60] [--rounds 10] [--out FILE]

Starts its own in-memory dev server with its Prometheus endpoint on, a FastMCP server with
the embedded worker (default settings: `heartbeat_timeout` 5 s), driven through a real
`fastmcp.Client`, and beside it a bare Temporal worker whose workflow runs one activity
with the same heartbeat timeout, heartbeating through the SDK's own throttle:

1. **Actions per task**, from the dev server's `action` metric (its billable estimate), one
   task at a time for `--seconds`: a silent leg and one reporting progress every second, for
   each engine. The 10-minute leg is modelled from the measured heartbeat rate. With them,
   the history reads per task per 30 s (every `GetWorkflowExecutionHistory` the frontend
   served: the worker's long poll for a cancel, the server's and the client's reads).
2. **Cancel delivery at any age.** `--rounds` legs run at once, each cancelled at its own
   moment spread over the first 50 s; the latency is from just before `tasks/cancel` to
   the body seeing `CancelledError` (same process, same clock). Target: <= 1 s p95.

Writes the figures to `--out` (default `bench/results/heartbeat_cost.json`).
Everything started is stopped in `finally`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import runpy
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import anyio
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio import activity, workflow
from temporalio.client import Client as TemporalClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import find_temporal_binary, free_port
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES

sample = runpy.run_path(str(Path(__file__).parents[1] / "tests" / "helpers" / "metrics.py"))["sample"]
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
# Counters reach the metrics endpoint this long after the request that moved them.
_SETTLE = 2.0
_CANCEL_AGES = (0.2, 50.0)


@contextmanager
def dev_server_with_metrics() -> Iterator[tuple[str, str]]:
    """An in-memory dev server on loopback; yields its address and metrics URL."""
    port, metrics = free_port(), free_port()
    command = [str(find_temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--metrics-port", str(metrics), "--log-level", "error"]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_ready(address: str) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                await TemporalClient.connect(address)
                return
            except Exception:
                await anyio.sleep(0.2)


def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode()


def heartbeats_recorded(metrics_url: str) -> float:
    """Heartbeats the frontend has answered since it started, from its own metrics."""
    return sample(scrape(metrics_url), "service_requests", operation="RecordActivityTaskHeartbeat",
                  service_name="frontend")


def counts(metrics_url: str) -> dict[str, float]:
    """Billed Actions, heartbeats and history long polls so far, from the dev server's metrics."""
    text = scrape(metrics_url)
    return {
        "actions": sample(text, "action", namespace="default"),
        "heartbeats": sample(text, "service_requests", operation="RecordActivityTaskHeartbeat",
                             service_name="frontend"),
        "history_reads": sample(text, "client_requests", operation="HistoryClientGetWorkflowExecutionHistory",
                                service_name="frontend"),
    }


@activity.defn(name="bare_long_leg")
async def bare_long_leg(seconds: float, report_every: float) -> str:
    """A bare activity: heartbeats every second (its progress, if any), throttled by the SDK."""
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        activity.heartbeat({"statusMessage": f"step {step}"} if report_every else None)
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    return "done"


@workflow.defn(name="BareLongLeg")
class BareLongLeg:
    @workflow.run
    async def run(self, seconds: float, report_every: float) -> str:
        return await workflow.execute_activity(
            "bare_long_leg", args=[seconds, report_every], result_type=str,
            start_to_close_timeout=timedelta(hours=1), heartbeat_timeout=HEARTBEAT_TIMEOUT,
        )


def build_server(address: str, events: dict[str, float]) -> FastMCP:
    """A server whose `hold` tool logs when it starts and when a cancel reaches it."""
    extension = TemporalTasksExtension(
        address=address, task_queue="heartbeat-cost", heartbeat_timeout=HEARTBEAT_TIMEOUT,
        shutdown_grace=timedelta(0), ui=False,
    )
    server = FastMCP("heartbeat-cost")
    server.add_extension(extension)

    @server.tool(task=True)
    async def hold(key: str, seconds: float, report_every: float, ctx: Context) -> str:
        events[f"{key}:start"] = time.monotonic()
        try:
            step, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                if report_every:
                    step += 1
                    await ctx.report_progress(step, None, f"step {step}")
                await asyncio.sleep(min(report_every or seconds, max(0.0, deadline - time.monotonic())))
        except asyncio.CancelledError:
            events[f"{key}:cancelled"] = time.monotonic()
            raise
        return key

    return server


async def until(check: object, timeout: float = 120) -> None:
    with anyio.fail_after(timeout):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def one_task(metrics_url: str, run: object) -> dict[str, float]:
    """What one task run by `run` moved in the dev server's counters."""
    before = counts(metrics_url)
    await run()  # type: ignore[operator]
    await anyio.sleep(_SETTLE)
    after = counts(metrics_url)
    return {name: after[name] - before[name] for name in after}


async def price(client: Client, temporal: TemporalClient, metrics_url: str, seconds: float) -> dict:
    async def ours(report_every: float) -> None:
        task = await call_tool_task(client, "hold", {"key": uuid.uuid4().hex, "seconds": seconds,
                                                      "report_every": report_every})
        await task.wait(timeout=seconds + 120)

    async def bare(report_every: float) -> None:
        await temporal.execute_workflow("BareLongLeg", args=[seconds, report_every], id=uuid.uuid4().hex,
                                        task_queue="bare-long-leg")

    shapes = {}
    for name, run in (("silent", lambda: ours(0)), ("progress_every_second", lambda: ours(1.0)),
                      ("bare_silent", lambda: bare(0)), ("bare_progress_every_second", lambda: bare(1.0))):
        shapes[name] = await one_task(metrics_url, run)
        print(f"{name:28} {shapes[name]}")
    for name in list(shapes):
        per_second = shapes[name]["heartbeats"] / seconds
        shapes[name]["modelled_10_min_actions"] = round(shapes[name]["actions"] - shapes[name]["heartbeats"]
                                                       + per_second * 600)
        shapes[name]["history_reads_per_30s"] = round(shapes[name]["history_reads"] * 30 / seconds, 2)
    for ours_name in ("silent", "progress_every_second"):
        bare_shape = shapes[f"bare_{ours_name}"]
        shapes[ours_name]["actions_vs_bare"] = round(shapes[ours_name]["actions"] / bare_shape["actions"], 2)
        shapes[ours_name]["modelled_10_min_vs_bare"] = round(
            shapes[ours_name]["modelled_10_min_actions"] / bare_shape["modelled_10_min_actions"], 2)
    return shapes


async def cancel_latency(client: Client, rounds: int, events: dict[str, float]) -> dict[str, float]:
    latencies: list[float] = []
    low, high = _CANCEL_AGES
    ages = [low + (high - low) * i / max(rounds - 1, 1) for i in range(rounds)]

    async def one(age: float) -> None:
        key = uuid.uuid4().hex
        task = await call_tool_task(client, "hold", {"key": key, "seconds": 3600, "report_every": 0})
        await until(lambda: f"{key}:start" in events)
        await anyio.sleep(max(0.0, events[f"{key}:start"] + age - time.monotonic()))
        sent = time.monotonic()
        await task.cancel()
        await until(lambda: f"{key}:cancelled" in events)
        latencies.append(events[f"{key}:cancelled"] - sent)

    async with anyio.create_task_group() as group:
        for age in ages:
            group.start_soon(one, age)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    figures = {"rounds": rounds, "ages_s": [round(a, 1) for a in ages], "p50_ms": round(statistics.median(latencies) * 1000),
               "p95_ms": round(p95 * 1000), "max_ms": round(latencies[-1] * 1000)}
    print(f"tasks/cancel -> CancelledError at ages {low:g}-{high:g} s: {figures}   (target p95 <= 1,000 ms)")
    return figures


async def main(options: argparse.Namespace) -> None:
    events: dict[str, float] = {}
    with dev_server_with_metrics() as (address, metrics_url):
        await wait_ready(address)
        temporal = await TemporalClient.connect(address)
        bare = Worker(temporal, task_queue="bare-long-leg", workflows=[BareLongLeg], activities=[bare_long_leg],
                      workflow_runner=UnsandboxedWorkflowRunner())
        async with bare, Client(build_server(address, events)) as client:
            shapes = await price(client, temporal, metrics_url, options.seconds)
            cancels = await cancel_latency(client, options.rounds, events) if options.rounds else None
    result = {"load_average_at_start": options.load, "leg_s": options.seconds,
              "heartbeat_timeout_s": HEARTBEAT_TIMEOUT.total_seconds(), "per_task": shapes, "cancel": cancels}
    options.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="length of each measured leg")
    parser.add_argument("--rounds", type=int, default=10, help="cancel rounds (0 skips)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "heartbeat_cost.json")
    options = parser.parse_args()
    options.load = round(os.getloadavg()[0], 2)
    anyio.run(main, options)
