"""What a long tool leg costs in heartbeats, and how fast a cancel still reaches it.

    .venv/bin/python bench/heartbeat_cost.py [--seconds 120] [--rounds 20]
        [--interval S] [--fast-period S] [--heartbeat-timeout S] [--label L] [--out FILE]

Starts its own in-memory dev server with its Prometheus endpoint on, and a FastMCP
server with the embedded worker (the extension's settings unless overridden above),
driven through a real `fastmcp.Client`:

1. **Heartbeats.** One `hold` task runs for `--seconds`; the heartbeats are counted by
   Temporal (the frontend's `service_requests{operation="RecordActivityTaskHeartbeat"}`),
   10 s after the fast period and at the end of the leg, and projected to a one-hour leg
   from the rate in between. Target: <= 1,000 per leg-hour.
2. **Cancel delivery in the first 30 s.** `--rounds` tasks are cancelled at a random
   moment between 0.2 s and 25 s into the leg; the latency is from just before
   `tasks/cancel` to the body seeing `CancelledError` (same process, same clock).
   Target: <= 250 ms p95.

With `--label`, the heartbeat count is stored under that label in `--out` (default
`bench/results/heartbeat_cost.json`), beside the runs stored before.

Everything started is stopped in `finally`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import anyio
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import find_temporal_binary, free_port
from fastmcp_temporal.workflows.models import SEARCH_ATTRIBUTES

# The history service counts each heartbeat again; the frontend's count is what a client sent.
# The slow rate is measured from this long after the fast period, once it has settled.
_SETTLE = 10.0
_HEARTBEATS = re.compile(
    r'^service_requests\{[^}]*operation="RecordActivityTaskHeartbeat"[^}]*service_name="frontend"[^}]*\} (\S+)$',
    re.M,
)


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


def heartbeats_recorded(metrics_url: str) -> float:
    """Heartbeats the frontend has answered since it started, from its own metrics."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    return sum(float(value) for value in _HEARTBEATS.findall(text))


def build_server(address: str, options: argparse.Namespace, events: dict[str, float]) -> FastMCP:
    """A server whose `hold` tool logs when it starts and when a cancel reaches it."""
    chosen = {
        "heartbeat_timeout": options.heartbeat_timeout,
        "heartbeat_interval": options.interval,
        "heartbeat_fast_period": options.fast_period,
    }
    extension = TemporalTasksExtension(
        address=address,
        task_queue="heartbeat-cost",
        shutdown_grace=timedelta(0),
        ui=False,
        **{name: timedelta(seconds=value) for name, value in chosen.items() if value is not None},
    )
    settings = extension.temporal_settings
    options.fast_period = settings.heartbeat_fast_period.total_seconds()
    print(
        f"heartbeat_timeout {settings.heartbeat_timeout.total_seconds():g} s, heartbeat_interval "
        f"{settings.heartbeat_interval.total_seconds():g} s, heartbeat_fast_period {options.fast_period:g} s"
    )
    server = FastMCP("heartbeat-cost")
    server.add_extension(extension)

    @server.tool(task=True)
    async def hold(key: str, seconds: float) -> str:
        events[f"{key}:start"] = time.time()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            events[f"{key}:cancelled"] = time.time()
            raise
        return key

    return server


async def until(check: object, what: str, timeout: float = 60) -> None:
    with anyio.fail_after(timeout):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def measure_heartbeats(
    client: Client, metrics_url: str, options: argparse.Namespace, events: dict
) -> dict[str, float]:
    before = heartbeats_recorded(metrics_url)
    task = await call_tool_task(client, "hold", {"key": "long", "seconds": options.seconds})
    await until(lambda: "long:start" in events, "the leg to start")
    started = events["long:start"]
    settled = options.fast_period + _SETTLE
    await anyio.sleep(max(0.0, started + settled - time.time()))
    early = heartbeats_recorded(metrics_url) - before
    await task.wait(timeout=options.seconds + 60)
    total = heartbeats_recorded(metrics_url) - before
    slow_rate = (total - early) / max(options.seconds - settled, 1e-9)
    hour = early + slow_rate * (3600 - settled)
    print(f"heartbeats recorded by Temporal for a {options.seconds:g} s leg: {total:.0f}")
    print(f"  first {settled:g} s: {early:.0f}; afterwards {slow_rate * 60:.1f}/min")
    print(f"  projected for a one-hour leg: {hour:.0f}   (target <= 1,000)")
    return {"leg_s": options.seconds, "heartbeats": total, "first_s": settled, "first": early,
            "per_min_after": round(slow_rate * 60, 1), "per_leg_hour": round(hour)}


async def measure_cancel(client: Client, options: argparse.Namespace, events: dict) -> None:
    latencies = []
    chooser = random.Random(7)
    for round_ in range(options.rounds):
        key = f"cancel-{round_}"
        task = await call_tool_task(client, "hold", {"key": key, "seconds": 60})
        await until(lambda key=key: f"{key}:start" in events, "the leg to start")
        await anyio.sleep(chooser.uniform(0.2, min(25.0, options.fast_period)))
        sent = time.time()
        await task.cancel()
        await until(lambda key=key: f"{key}:cancelled" in events, "the cancel to arrive")
        latencies.append(events[f"{key}:cancelled"] - sent)
    latencies.sort()
    p50 = statistics.median(latencies)
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    print(f"tasks/cancel -> CancelledError in the first {options.fast_period:g} s, {len(latencies)} rounds:")
    print(f"  p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms   (target p95 <= 250 ms)")


async def main(options: argparse.Namespace) -> None:
    events: dict[str, float] = {}
    with dev_server_with_metrics() as (address, metrics_url):
        await wait_ready(address)
        async with Client(build_server(address, options, events)) as client:
            heartbeats = await measure_heartbeats(client, metrics_url, options, events)
            if options.rounds:
                await measure_cancel(client, options, events)
    if options.label:
        runs = json.loads(options.out.read_text()) if options.out.exists() else {}
        runs.setdefault(options.label, []).append({"load_average_at_start": options.load, **heartbeats})
        options.out.write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120, help="length of the measured leg")
    parser.add_argument("--rounds", type=int, default=20, help="cancel rounds (0 skips)")
    parser.add_argument("--interval", type=float, help="heartbeat_interval in seconds (default: the setting's)")
    parser.add_argument("--fast-period", type=float, help="heartbeat_fast_period in seconds (default: the setting's)")
    parser.add_argument("--heartbeat-timeout", type=float, help="heartbeat_timeout in seconds (default: the setting's)")
    parser.add_argument("--label", help="store the heartbeat count under this label in --out")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "heartbeat_cost.json")
    options = parser.parse_args()
    options.load = round(os.getloadavg()[0], 2)
    anyio.run(main, options)
