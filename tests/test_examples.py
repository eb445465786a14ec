"""The README's demo: examples/server.py over HTTP, driven by examples/client.py.

What the demo claims is checked in Temporal itself: each tool the client called ran
as a task workflow, `crunch` as one tool leg, `greet` as two legs around the answer
the client sent (a `submit_input` signal). A client that stopped opting in to the
tasks extension would leave Temporal empty and fail here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus

from fastmcp_temporal.devserver import DevServer, free_port
from helpers.temporal import anonymous_workflow_id, task_handle

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _wait_for_port(port: int, process: subprocess.Popen[bytes], deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"examples/server.py did not listen on {port}")


def test_the_demo_client_runs_the_demo_tools_as_temporal_tasks(
    temporal_server: DevServer, task_queue: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "FASTMCP_TEMPORAL_ADDRESS": temporal_server.address,
        "FASTMCP_TEMPORAL_TASK_QUEUE": task_queue,
    }
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "server.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, server)
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "client.py"), f"http://127.0.0.1:{port}/mcp", "--ui", UI],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert client.returncode == 0, client.stdout + client.stderr
    lines = client.stdout.splitlines()
    assert "crunch(12) = 144" in lines
    assert "  server asks: What is your name? -> answering 'Ada'" in lines
    assert lines[-1] == "Hello, Ada!"
    crunch, greet = (line.split(": task ")[1] for line in lines if ": task " in line)
    assert any(line.startswith(f"  Temporal UI: {UI}/namespaces/default/workflows?query=") for line in lines)

    histories = anyio.run(_histories, temporal_server.address, [crunch, greet])
    assert histories[crunch] == ["leg"]
    assert histories[greet] == ["leg", "signal submit_input", "leg"]
    assert anyio.run(_workflows_on_queue, temporal_server.address, task_queue) == {
        anonymous_workflow_id(crunch),
        anonymous_workflow_id(greet),
    }


UI = "http://ui.example:8233"


async def _histories(address: str, task_ids: list[str]) -> dict[str, list[str]]:
    """Each task's completed workflow, as its completed tool legs and the signals it got."""
    temporal = await TemporalClient.connect(address)
    found = {}
    for task_id in task_ids:
        handle = task_handle(temporal, task_id)
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
        found[task_id] = [
            "leg"
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            else f"signal {event.workflow_execution_signaled_event_attributes.signal_name}"
            for event in (await handle.fetch_history()).events
            if event.event_type
            in (
                EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
            )
        ]
    return found


async def _workflows_on_queue(address: str, task_queue: str) -> set[str]:
    """Every workflow the demo left on its task queue, once visibility has them all."""
    temporal = await TemporalClient.connect(address)
    with anyio.fail_after(30):
        while True:
            ids = {w.id async for w in temporal.list_workflows(f'TaskQueue="{task_queue}"')}
            if len(ids) >= 2:
                return ids
            await anyio.sleep(0.2)
