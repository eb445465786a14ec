"""A worker's own leg rate limit holds for legs its own workflows schedule.

A real FastMCP server, whose embedded worker runs with `max_activities_per_second`,
gets several trivial tasks at once through a real `fastmcp.Client`. Temporal would hand
the worker each leg eagerly, in answer to the workflow task that scheduled it, without a
poll and so past the limit; the limit holds only because such a worker takes no leg
eagerly. The legs' starts are spread as the limit says.
"""

from __future__ import annotations

import time

import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task

from helpers.servers import server_with

pytestmark = pytest.mark.anyio

LEGS = 6
RATE = 2.0
DEADLINE = 60


async def test_a_worker_rate_limit_spreads_the_legs_it_starts(make_extension) -> None:
    server = server_with(make_extension(max_activities_per_second=RATE))
    started: list[float] = []

    @server.tool(task=True)
    async def trivial(n: int) -> int:
        started.append(time.monotonic())
        return n

    async with Client(server) as client:
        tasks = [await call_tool_task(client, "trivial", {"n": n}) for n in range(LEGS)]
        for task in tasks:
            assert (await task.wait(timeout=DEADLINE)).status == "completed"

    # At RATE legs a second, LEGS legs take (LEGS - 1) / RATE seconds to start; allow a fifth less.
    assert max(started) - min(started) >= 0.8 * (LEGS - 1) / RATE, sorted(b - min(started) for b in started)
