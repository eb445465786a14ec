"""Caller B's one task behind caller A's backlog: its end to end on a fair queue and a first-come one.

    .venv/bin/python bench/fairness.py [--backlog 200] [--rounds 3] [--out fairness.json]

For each queue order it starts its own in-memory dev server (the launcher's fair task queues,
or `matching.enableFairness=false`; Temporal's default partitions either way), serves one
FastMCP server over streamable HTTP with its embedded worker running one leg at a time
(`max_concurrent_activities=1`), and, each round, has caller A (bearer `token-a`) submit
`--backlog` trivial tasks, then caller B (`token-b`) submit one. Printed, median of the
rounds: B's end to end (submit -> result through `fastmcp.Client`, seconds), how many of
A's legs ran before B's (the order the worker ran them in), and how long A's backlog took
to drain. Same machine, wall clock. Every round, the medians and the machine's load average
before and after are written to `bench/results/<--out>`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import uvicorn
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

ORDERS: dict[str, Mapping[str, str]] = {"fair": {}, "first-come": {"matching.enableFairness": "false"}}
TOKENS = {"token-a": {"client_id": "caller-a"}, "token-b": {"client_id": "caller-b"}}
SUBMITTING = 20  # A's submissions in flight at once
RESULTS = Path(__file__).parent / "results"


def build(address: str, ran: list[int]) -> FastMCP:
    """The server: one task tool, `trivial`, that notes in `ran` the order legs ran in."""
    mcp = FastMCP("fairness-bench", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(
        TemporalTasksExtension(
            address=address, task_queue=f"fair-{uuid.uuid4().hex[:8]}", max_concurrent_activities=1
        )
    )

    @mcp.tool(task=True)
    async def trivial(n: int) -> int:
        ran.append(n)
        return n

    return mcp


@asynccontextmanager
async def serving(mcp: FastMCP) -> AsyncIterator[str]:
    """`mcp` over streamable HTTP on a free loopback port, until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    web = uvicorn.Server(uvicorn.Config(mcp.http_app(), log_level="warning", lifespan="on"))
    served = asyncio.create_task(web.serve(sockets=[sock]))
    while not web.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    finally:
        web.should_exit = True
        await served
        sock.close()


async def one_round(url: str, backlog: int, ran: list[int]) -> tuple[float, int, float]:
    """B's end to end behind A's backlog (s), A's legs run before B's, and A's drain time (s)."""
    client_a = Client(StreamableHttpTransport(url, auth="token-a"))
    client_b = Client(StreamableHttpTransport(url, auth="token-b"))
    limit = asyncio.Semaphore(SUBMITTING)

    async def submit(n: int) -> object:
        async with limit:
            return await call_tool_task(client_a, "trivial", {"n": n})

    ran.clear()
    async with client_a, client_b:
        started = time.perf_counter()
        a_tasks = await asyncio.gather(*(submit(n) for n in range(backlog)))
        b_started = time.perf_counter()
        b_task = await call_tool_task(client_b, "trivial", {"n": -1})
        assert (await b_task.result()).data == -1
        b_seconds = time.perf_counter() - b_started
        results = await asyncio.gather(*(task.result() for task in a_tasks))  # type: ignore[attr-defined]
        assert [result.data for result in results] == list(range(backlog))
        return b_seconds, ran.index(-1), time.perf_counter() - started


async def measure(order: str, backlog: int, rounds: int) -> dict[str, Any]:
    """One queue order's rounds, printed and returned."""
    server = await asyncio.to_thread(start_dev_server, ui=False, dynamic_config=ORDERS[order])
    ran: list[int] = []
    try:
        async with serving(build(server.address, ran)) as url:
            await one_round(url, 5, ran)  # warm up: connections, caches, the queue's first poll
            runs = [await one_round(url, backlog, ran) for _ in range(rounds)]
    finally:
        server.stop()
    b_seconds, before_b, drained = (statistics.median(run[i] for run in runs) for i in range(3))
    each = ", ".join(f"{b:.2f} s after {k}" for b, k, _ in runs)
    print(
        f"{order:>10}: B's end to end {b_seconds:.2f} s, after {before_b:.0f} of A's legs ({each});"
        f" A's {backlog} drained in {drained:.1f} s"
    )
    return {
        "median": {"b_end_to_end_s": b_seconds, "a_legs_before_b": before_b, "a_drained_s": drained},
        "rounds": [{"b_end_to_end_s": b, "a_legs_before_b": k, "a_drained_s": d} for b, k, d in runs],
    }


async def main(backlog: int, rounds: int, out: str) -> None:
    print(f"one worker, one leg at a time; A's backlog of {backlog} trivial tasks, then B's one, {rounds}x")
    report: dict[str, Any] = {
        "run_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": {
            "backlog": backlog,
            "rounds": rounds,
            "submitting": SUBMITTING,
            "max_concurrent_activities": 1,
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()},
        "orders": {},
    }
    for order in ORDERS:
        report["orders"][order] = await measure(order, backlog, rounds)
    report["machine"]["loadavg_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="fairness.json", help="file name under bench/results/")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.backlog, arguments.rounds, arguments.out))
