"""Caller B's one task behind caller A's backlog: its end to end on a fair queue and a first-come one.

    .venv/bin/python -m bench run fairness [--backlog 200] [--rounds 3]

For each queue order, a dev server of its own (in memory: the launcher's fair task queues, or
the baseline, `matching.enableFairness=false`; Temporal's default partitions either way), serves one
FastMCP server over streamable HTTP with its embedded worker running one leg at a time
(`max_concurrent_activities=1`), and, each round, has caller A (bearer `token-a`) submit
`--backlog` trivial tasks, then caller B (`token-b`) submit one. Printed, median of the
rounds: B's end to end (submit -> result through `fastmcp.Client`, seconds), how many of
A's legs ran before B's (the order the worker ran them in), and how long A's backlog took
to drain. Same machine, wall clock. Every round, and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Mapping
from typing import Any

from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp_tasks.client import call_tool_task

from bench.harness import dev_server, serving
from fastmcp_temporal import TemporalTasksExtension

QUESTION = (
    "How long does caller B's one task wait behind caller A's backlog, on a fair queue and a first-come one?"
)
QUICK = {"backlog": 20, "rounds": 1}

ORDERS: dict[str, Mapping[str, str]] = {"fair": {}, "first-come": {"matching.enableFairness": "false"}}
TOKENS = {"token-a": {"client_id": "caller-a"}, "token-b": {"client_id": "caller-b"}}
SUBMITTING = 20  # A's submissions in flight at once


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
    ran: list[int] = []
    async with dev_server(in_memory=True, dynamic_config=ORDERS[order]) as server:
        async with serving(build(server.address, ran)) as url:
            await one_round(url, 5, ran)  # warm up: connections, caches, the queue's first poll
            runs = [await one_round(url, backlog, ran) for _ in range(rounds)]
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    print(
        f"one worker, one leg at a time; A's backlog of {args.backlog} trivial tasks, then B's one, "
        f"{args.rounds}x"
    )
    return {
        "settings": {"submitting": SUBMITTING, "max_concurrent_activities": 1},
        "orders": {order: await measure(order, args.backlog, args.rounds) for order in ORDERS},
    }
