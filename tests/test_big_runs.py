"""A worker gives back the memory a run of big arguments held, soon after the run ends.

A `fastmcp-temporal worker` process with a folder payload store runs tasks whose arguments
take 40 MiB each. Once they completed, the worker's resident memory, as `ps` or
a container's limit sees it, comes back near what it was before them within a deadline,
instead of holding what the runs decoded until the garbage collector's next full pass,
which a few large objects never bring about.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import DevServer
from helpers.processes import Processes
from helpers.servers import server_with
from helpers.waits import eventually

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
BIG_CALLS = 2
BIG_CHARS = 40 * MIB
"""Each call's argument: past the size after which a run is followed by a collection, and past
glibc's largest mmap threshold (32 MiB), so its freed copies go back to the system at once and
resident memory shows what is still referenced, not what the allocator keeps for reuse."""

WEIGHING_SERVER = """
from fastmcp import FastMCP
from fastmcp_temporal import TemporalTasksExtension

mcp = FastMCP("weighing-worker")
mcp.add_extension(TemporalTasksExtension())


@mcp.tool(task=True)
async def weigh(blob: str) -> int:
    return len(blob)
"""


async def weigh(blob: str) -> int:
    return len(blob)


def _resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError("VmRSS")


async def _weigh_all(client: Client, chars: int, calls: int) -> None:
    async def weigh(index: int) -> None:
        task = await call_tool_task(client, "weigh", {"blob": chr(ord("a") + index) * chars})
        assert (await task.result()).data == chars

    async with anyio.create_task_group() as group:
        for index in range(calls):
            group.start_soon(weigh, index)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
async def test_a_workers_memory_returns_soon_after_runs_of_big_arguments(
    temporal_server: DevServer, task_queue: str, processes: Processes, tmp_path: Path
) -> None:
    store = tmp_path / "payloads"
    app = tmp_path / "server.py"
    app.write_text(WEIGHING_SERVER)
    worker = processes.worker(
        temporal_server.address, task_queue, app=app, env={"FASTMCP_TEMPORAL_PAYLOAD_STORE": str(store)}
    )
    await processes.polling(worker)
    api = TemporalTasksExtension(
        address=temporal_server.address, task_queue=task_queue, worker=False, payload_store=str(store)
    )
    async with Client(server_with(api, weigh)) as client:
        await _weigh_all(client, 1024, BIG_CALLS)  # the worker's code paths warm before the baseline
        before = _resident_mib(worker.pid)
        await _weigh_all(client, BIG_CHARS, BIG_CALLS)
    sent = BIG_CALLS * BIG_CHARS / MIB
    with contextlib.suppress(AssertionError):
        await eventually(lambda: _resident_mib(worker.pid) - before < sent / 2, timeout=90)
    held = _resident_mib(worker.pid) - before
    assert held < sent / 2, (
        f"the worker holds {held:.0f} MiB more than before {sent:.0f} MiB of arguments ran"
    )
