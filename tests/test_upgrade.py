"""A deploy of this release meets tasks the previous release started, and finishes them.

The previous release is its own wheel (`tests/releases/`), unpacked and put first on
the path of the server process that runs it. That server starts tasks: two park on
input, one counts with checkpoints. It is then killed, as a deploy's old process is,
mid-leg; a server of this release takes over the same task queue. Every task
finishes with the right result, each answer is applied once, and the counting task
resumes from its checkpoint instead of running again from the start.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from temporalio.client import Client as TemporalClient

from fastmcp_temporal.devserver import DevServer, free_port
from helpers.processes import PROCESS_DEADLINE, AttemptLog, Processes, answering_client
from helpers.temporal import checkpoint_recorded, no_workflow_running, task_handle
from helpers.waits import eventually
from helpers.wire import accept, tasks_get, tasks_update

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RELEASES = sorted((Path(__file__).parent / "releases").glob("fastmcp_temporal-*.whl"))


@pytest.fixture(scope="module", params=RELEASES, ids=lambda wheel: wheel.name.split("-")[1])
def previous_release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's wheel, unpacked where a PYTHONPATH can put it before this checkout."""
    folder = tmp_path_factory.mktemp("release")
    zipfile.ZipFile(request.param).extractall(folder)
    return folder


async def _status(client: Client, task_id: str, *states: str) -> Any:
    with anyio.fail_after(PROCESS_DEADLINE):
        while (status := await tasks_get(client, task_id)).status not in states:
            await anyio.sleep(0.1)
    return status


async def test_tasks_of_the_previous_release_finish_on_this_one(
    temporal_server: DevServer, task_queue: str, processes: Processes, attempts: AttemptLog, previous_release: Path
) -> None:
    old_port, new_port = free_port(), free_port()
    old = processes.http_server(temporal_server.address, task_queue, old_port, release=previous_release)
    async with answering_client(f"http://127.0.0.1:{old_port}/mcp", old, processes) as client:
        parked = [await call_tool_task(client, "confirm", {"key": key}) for key in ("first", "second")]
        counting = await call_tool_task(client, "count", {"key": "c", "to": 30, "step": 0.2})
        for task in parked:
            await _status(client, task.task_id, "input_required")
        await eventually(lambda: attempts.progress("c") >= 3, what="the count to checkpoint")
        await checkpoint_recorded(task_handle(await TemporalClient.connect(temporal_server.address), counting.task_id))
    processes.kill(old)

    new = processes.http_server(temporal_server.address, task_queue, new_port)
    async with answering_client(f"http://127.0.0.1:{new_port}/mcp", new, processes) as client:
        for task in parked:
            (key,) = (await _status(client, task.task_id, "input_required")).input_requests
            await tasks_update(client, task.task_id, {key: accept("yes")})
        results = [(await _status(client, task.task_id, "completed")).result for task in parked]
        counted = (await _status(client, counting.task_id, "completed")).result
    await no_workflow_running(await TemporalClient.connect(temporal_server.address), task_queue)

    assert [result["structuredContent"] for result in results] == [{"result": "first: yes"}, {"result": "second: yes"}]
    assert counted["structuredContent"] == {"key": "c", "counted": 30}
    for key in ("first", "second"):
        assert len(attempts.starts(key)) == 2  # the ask, then the answer: each applied once
    starts = attempts.starts("c")
    assert len(starts) == 2 and starts[1]["resumed_from"] >= 1  # the checkpoint a heartbeat carried
    assert [Path(start["code"]).is_relative_to(previous_release) for start in starts] == [True, False]
