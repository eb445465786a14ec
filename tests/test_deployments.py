"""Worker Versioning: a rolling deploy of a server's tools with tasks in flight.

Two builds of one server definition, A and B, whose tool says which build ran each of
its legs, share a task queue as versions of one Temporal Worker Deployment. Tasks
started while A is current stay on A after B becomes current (the default `pinned`
behaviour): a parked task's answers and later legs run on A, and so does a leg that
was running at the switch; new tasks run on B, also those started through A's server;
once A's tasks close, Temporal reports A drained and A's worker can stop. An
`auto_upgrade` task (per tool, or for the whole extension) moves to B at its next leg;
a tool `pinned` by its execution policy stays. Temporal's own records show which
version ran every workflow task. Tasks pinned to a build whose workers have all stopped
are listed by `tasks list --stuck` with the build and the fix, and end in Temporal on a
cancel (tasks/cancel or the CLI's) and at their TTL, read as an expired task.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import ToolTask, call_tool_task
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, InputRequiredResult
from pydantic import ValidationError
from temporalio.api.deployment.v1 import WorkerDeploymentVersion as VersionMessage
from temporalio.api.deployment.v1 import WorkerDeploymentVersionInfo
from temporalio.api.enums.v1 import (
    EventType,
    RoutingConfigUpdateState,
    VersionDrainageStatus,
    VersioningBehavior,
    WorkerDeploymentVersionStatus,
)
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerDeploymentConfig

from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension, execution_policy
from fastmcp_temporal.devserver import DevServer
from helpers.cli import cli, listed
from helpers.servers import WORKER_SERVER
from helpers.temporal import no_workflow_running, task_handle
from helpers.waits import DEADLINE, eventually, status_becomes
from helpers.wire import accept, ask, tasks_cancel, tasks_get, tasks_update, text_of

pytestmark = pytest.mark.anyio

Legs = Callable[..., Any]


def legs_of(build: str, gate: asyncio.Event, running: asyncio.Event) -> Legs:
    """Three legs: ask "first" (a held call waits for `gate` first), ask "second", then report
    which build ran each leg, with the answer it was given."""

    async def legs(ctx: Context, hold: bool = False) -> str | InputRequiredResult:
        answers = ctx.input_responses
        if answers is None:
            if hold:
                running.set()
                await gate.wait()
            return ask("first", state=build)
        (key, answer), = answers.items()
        assert isinstance(answer, ElicitResult)
        ran = f"{ctx.request_state} {build}:{answer.content['value']}"
        return ask("second", state=ran) if key == "first" else ran

    return legs


class Build:
    """One build of the server definition: a `legs` tool under three versioning behaviours."""

    def __init__(self, name: str, extension: TemporalTasksExtension) -> None:
        self.extension, self.gate, self.running = extension, asyncio.Event(), asyncio.Event()
        self.server = FastMCP("deployed")
        self.server.add_extension(extension)
        tools = {"legs": None, "pinned_legs": "pinned", "auto_upgrade_legs": "auto_upgrade"}
        for tool_name, behavior in tools.items():
            legs = execution_policy(versioning_behavior=behavior)(legs_of(name, self.gate, self.running))
            self.server.tool(legs, name=tool_name, task=True)


async def make_current(temporal: TemporalClient, version: WorkerDeploymentVersion) -> None:
    """Make `version` its deployment's current one, once its worker has registered it, and wait
    until Temporal has propagated the change to the task queue."""
    namespace, name = temporal.namespace, version.deployment_name
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=namespace, deployment_name=name, build_id=version.build_id
    )
    with anyio.fail_after(DEADLINE):
        while True:
            try:
                await temporal.workflow_service.set_worker_deployment_current_version(request)
                break
            except RPCError:  # the version exists once its worker's first poll reached Temporal
                await anyio.sleep(0.2)
    await routing_propagated(temporal, name)


async def routing_propagated(temporal: TemporalClient, deployment: str) -> None:
    """Wait until Temporal has propagated the deployment's routing change to its task queues."""
    describe = DescribeWorkerDeploymentRequest(namespace=temporal.namespace, deployment_name=deployment)
    propagated = RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
    with anyio.fail_after(DEADLINE):
        while (
            await temporal.workflow_service.describe_worker_deployment(describe)
        ).worker_deployment_info.routing_config_update_state != propagated:
            await anyio.sleep(0.1)


async def registered(temporal: TemporalClient, version: WorkerDeploymentVersion) -> None:
    """Wait until a worker's first poll has made `version` known to Temporal."""
    with anyio.fail_after(DEADLINE):
        while True:
            try:
                await version_info(temporal, version)
                return
            except RPCError:
                await anyio.sleep(0.1)


async def version_info(temporal: TemporalClient, version: WorkerDeploymentVersion) -> WorkerDeploymentVersionInfo:
    request = DescribeWorkerDeploymentVersionRequest(
        namespace=temporal.namespace,
        deployment_version=VersionMessage(deployment_name=version.deployment_name, build_id=version.build_id),
    )
    return (await temporal.workflow_service.describe_worker_deployment_version(request)).worker_deployment_version_info


async def answer_twice(client: Client, task: ToolTask, first: str, second: str) -> str:
    """Answer the task's "first" and "second" asks in turn; its result's text."""
    answered: set[str] = set()
    for value in (first, second):
        current = await status_becomes(
            task, "input_required", until=lambda read: bool(set(read.input_requests or {}) - answered)
        )
        (key,) = current.input_requests or {}
        answered.add(key)
        await tasks_update(client, task.task_id, {key: accept(value)})
    return text_of(await task.wait(timeout=DEADLINE))


async def builds_of_workflow_tasks(temporal: TemporalClient, task_id: str) -> list[str]:
    """The build id Temporal recorded for every workflow task of the task's workflow."""
    history = await task_handle(temporal, task_id).fetch_history()
    return [
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


async def pinned_to(temporal: TemporalClient, task_id: str) -> tuple[int, str]:
    """The task workflow's versioning behaviour and the build it runs on, as Temporal reports them."""
    described = await task_handle(temporal, task_id).describe()
    versioning = described.raw_description.workflow_execution_info.versioning_info
    return versioning.behavior, versioning.deployment_version.build_id


async def test_tasks_finish_on_the_build_that_started_them_and_the_old_build_drains(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    deployment = f"deploy-{task_queue}"
    a_version, b_version = (WorkerDeploymentVersion(deployment, build) for build in ("a", "b"))
    a = Build("A", make_extension(deployment_name=deployment, build_id="a"))
    b = Build("B", make_extension(deployment_name=deployment, build_id="b"))
    temporal = await TemporalClient.connect(temporal_server.address)
    async with AsyncExitStack() as a_running:
        a_client = await a_running.enter_async_context(Client(a.server))
        await make_current(temporal, a_version)
        parked = [await call_tool_task(a_client, "legs") for _ in range(2)]
        upgrading = await call_tool_task(a_client, "auto_upgrade_legs")
        for task in (*parked, upgrading):
            await status_becomes(task, "input_required")
        held = await call_tool_task(a_client, "legs", {"hold": True})
        await eventually(a.running.is_set, what="the held leg to run on A")

        async with Client(b.server) as b_client:
            await make_current(temporal, b_version)
            assert (await version_info(temporal, a_version)).status == (
                WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING
            )
            new_through_a = await call_tool_task(a_client, "legs")
            new_through_b = await call_tool_task(b_client, "legs")
            a.gate.set()

            assert [await answer_twice(a_client, task, "x", "y") for task in (*parked, held)] == ["A A:x A:y"] * 3
            assert await answer_twice(a_client, upgrading, "x", "y") == "A B:x B:y"
            for task in (new_through_a, new_through_b):
                assert await answer_twice(b_client, task, "n", "m") == "B B:n B:m"

            drained = WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED
            with anyio.fail_after(DEADLINE):
                while (info := await version_info(temporal, a_version)).status != drained:
                    await anyio.sleep(0.5)
            assert info.drainage_info.status == VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINED
            await a_running.aclose()  # A's worker stops: nothing of A is left to run

            pinned = VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
            for task in (*parked, held):
                assert await pinned_to(temporal, task.task_id) == (pinned, "a")
                assert set(await builds_of_workflow_tasks(temporal, task.task_id)) == {"a"}
            for task in (new_through_a, new_through_b):
                assert await pinned_to(temporal, task.task_id) == (pinned, "b")
                assert set(await builds_of_workflow_tasks(temporal, task.task_id)) == {"b"}
            upgraded = await builds_of_workflow_tasks(temporal, upgrading.task_id)
            assert upgraded[0] == "a" and upgraded[-1] == "b"
            await no_workflow_running(b.extension)


async def test_an_auto_upgrade_extension_moves_tasks_to_the_new_build_but_not_a_pinned_tool(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    deployment = f"deploy-{task_queue}"
    a_version, b_version = (WorkerDeploymentVersion(deployment, build) for build in ("a", "b"))
    a, b = (
        Build(name, make_extension(deployment_name=deployment, build_id=build, versioning_behavior="auto_upgrade"))
        for name, build in (("A", "a"), ("B", "b"))
    )
    temporal = await TemporalClient.connect(temporal_server.address)
    async with Client(a.server) as a_client:
        await make_current(temporal, a_version)
        moving, staying = await call_tool_task(a_client, "legs"), await call_tool_task(a_client, "pinned_legs")
        for task in (moving, staying):
            await status_becomes(task, "input_required")
        async with Client(b.server):
            await make_current(temporal, b_version)
            assert await answer_twice(a_client, moving, "x", "y") == "A B:x B:y"
            assert await answer_twice(a_client, staying, "x", "y") == "A A:x A:y"
            assert set(await builds_of_workflow_tasks(temporal, staying.task_id)) == {"a"}
            await no_workflow_running(b.extension)


async def workflow_status(temporal: TemporalClient, task_id: str) -> WorkflowExecutionStatus | None:
    return (await task_handle(temporal, task_id).describe()).status


async def read_until_closed(client: Client, temporal: TemporalClient, task_id: str) -> list[str]:
    """Poll `tasks/get` as a waiting client does until Temporal has closed the task's workflow; what
    each read answered (a status, or the error)."""
    answers: list[str] = []
    with anyio.fail_after(DEADLINE * 2):
        while await workflow_status(temporal, task_id) == WorkflowExecutionStatus.RUNNING:
            try:
                answers.append((await tasks_get(client, task_id)).status)
            except MCPError as exc:
                answers.append(exc.message)
            await anyio.sleep(0.5)
    return answers


@pytest.mark.slow
async def test_a_task_pinned_to_a_build_without_workers_is_listed_and_its_cancel_and_ttl_close_it(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    deployment = f"deploy-{task_queue}"
    a_version, b_version = (WorkerDeploymentVersion(deployment, build) for build in ("a", "b"))
    a = Build("A", make_extension(deployment_name=deployment, build_id="a"))
    b = Build("B", make_extension(deployment_name=deployment, build_id="b"))
    short_ttl = Build("A", make_extension(worker=False, task_ttl=timedelta(seconds=30)))
    temporal = await TemporalClient.connect(temporal_server.address)
    async with Client(b.server) as b_client:
        async with Client(a.server) as a_client, Client(short_ttl.server) as short_client:
            await make_current(temporal, a_version)
            to_cancel, by_operator = await call_tool_task(a_client, "legs"), await call_tool_task(a_client, "legs")
            to_expire = await call_tool_task(short_client, "legs")
            for task in (to_cancel, by_operator, to_expire):
                await status_becomes(task, "input_required")
            await make_current(temporal, b_version)
        # A's worker has stopped with both tasks pinned to it; B serves the wire
        for task in (to_cancel, by_operator, to_expire):
            (key,) = (await tasks_get(b_client, task.task_id)).input_requests or {}
            await tasks_update(b_client, task.task_id, {key: accept("x")})
            assert (await tasks_get(b_client, task.task_id)).status == "working"

        rows = await listed(temporal_server, "--stuck", "--tool", "legs", until=lambda rows: len(rows) == 3)
        assert {row["taskId"] for row in rows} == {to_cancel.task_id, by_operator.task_id, to_expire.task_id}
        for row in rows:
            assert "build 'a'" in row["reason"] and deployment in row["reason"], row
            assert "worker of build 'a'" in row["fix"] and "--versioning-override-behavior" in row["fix"], row
        code, table, err = await cli(temporal_server, "list", "--stuck", "--tool", "legs")
        assert code == 0 and to_cancel.task_id in table and "FIX" in table, err

        await tasks_cancel(b_client, to_cancel.task_id)
        assert await workflow_status(temporal, to_cancel.task_id) == WorkflowExecutionStatus.TERMINATED
        assert (await tasks_get(b_client, to_cancel.task_id)).status == "cancelled"
        code, out, err = await cli(temporal_server, "cancel", "--", by_operator.task_id)
        assert code == 0 and "no worker could run its cancel" in out, err
        assert await workflow_status(temporal, by_operator.task_id) == WorkflowExecutionStatus.TERMINATED
        code, out, err = await cli(temporal_server, "show", "--json", "--", by_operator.task_id)
        assert code == 0 and json.loads(out)["status"] == "cancelled", err

        answers = await read_until_closed(b_client, temporal, to_expire.task_id)
        assert set(answers) <= {"working", f"Task {to_expire.task_id} not found"}
        assert await workflow_status(temporal, to_expire.task_id) == WorkflowExecutionStatus.TERMINATED
        with pytest.raises(MCPError, match="not found"):  # as the reference answers an expired task
            await tasks_get(b_client, to_expire.task_id)
        code, out, err = await cli(temporal_server, "show", "--json", "--", to_expire.task_id)
        assert code == 0 and json.loads(out)["status"] == "expired", err
        await no_workflow_running(b.extension)


async def ramp(temporal: TemporalClient, version: WorkerDeploymentVersion, percentage: float) -> None:
    """Ramp new tasks to `version`, and wait until Temporal has propagated the change to the task queue."""
    request = SetWorkerDeploymentRampingVersionRequest(
        namespace=temporal.namespace,
        deployment_name=version.deployment_name,
        build_id=version.build_id,
        percentage=percentage,
    )
    await temporal.workflow_service.set_worker_deployment_ramping_version(request)
    await routing_propagated(temporal, version.deployment_name)


@pytest.mark.slow
@pytest.mark.parametrize("routing", ["current", "ramping"])
async def test_a_task_routed_to_a_build_with_no_workers_is_listed_with_the_build_and_cancelled(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str, routing: str
) -> None:
    deployment = f"deploy-{task_queue}"
    a = Build("A", make_extension(deployment_name=deployment, build_id="a"))
    c = Build("C", make_extension(deployment_name=deployment, build_id="c"))
    c_version = WorkerDeploymentVersion(deployment, "c")
    temporal = await TemporalClient.connect(temporal_server.address)
    async with Client(a.server) as a_client:
        await make_current(temporal, WorkerDeploymentVersion(deployment, "a"))
        async with Client(c.server):  # C's workers poll once, then are gone (crashed, scaled to zero)
            await registered(temporal, c_version)
        await (make_current(temporal, c_version) if routing == "current" else ramp(temporal, c_version, 100))
        task = await call_tool_task(a_client, "legs")
        assert (await tasks_get(a_client, task.task_id)).status == "working"

        (row,) = await listed(temporal_server, "--stuck", "--tool", "legs", until=bool)
        assert row["taskId"] == task.task_id
        assert f"{routing} build 'c'" in row["reason"] and "worker of build 'c'" in row["reason"], row
        assert "'c'" in row["fix"] and f"set-{routing}-version" in row["fix"], row
        await tasks_cancel(a_client, task.task_id)
        assert await workflow_status(temporal, task.task_id) == WorkflowExecutionStatus.TERMINATED


def worker_command(server_file: Path, *options: str) -> list[str]:
    return [str(Path(sys.executable).with_name("fastmcp-temporal")), "worker", str(server_file), *options]


async def test_the_worker_command_runs_as_the_deployment_version_it_is_given(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    server_file = tmp_path / "server.py"
    server_file.write_text(WORKER_SERVER)
    version = WorkerDeploymentVersion(f"deploy-{task_queue}", "cli-build")
    options = ("--address", temporal_server.address, "--task-queue", task_queue)
    versioned = ("--deployment-name", version.deployment_name, "--build-id", version.build_id)
    worker = subprocess.Popen(worker_command(server_file, *options, *versioned), stderr=subprocess.PIPE)
    try:
        temporal = await TemporalClient.connect(temporal_server.address)
        await make_current(temporal, version)
        api = FastMCP("cli-worker")
        api.add_extension(make_extension(worker=False))

        @api.tool(task=True)
        async def square(n: int) -> int:
            raise AssertionError("runs on the worker only")

        async with Client(api) as client:
            task = await call_tool_task(client, "square", {"n": 7})
            assert text_of(await task.wait(timeout=DEADLINE)) == "49"
    finally:
        worker.terminate()
        worker.wait(timeout=DEADLINE)
    assert set(await builds_of_workflow_tasks(temporal, task.task_id)) == {"cli-build"}


def test_the_worker_command_refuses_a_deployment_name_without_a_build_id(tmp_path: Path) -> None:
    server_file = tmp_path / "server.py"
    server_file.write_text(WORKER_SERVER)
    refused = subprocess.run(
        worker_command(server_file, "--deployment-name", "tools"), capture_output=True, text=True, timeout=DEADLINE
    )
    assert refused.returncode == 1
    assert "only deployment_name is set; set FASTMCP_TEMPORAL_BUILD_ID (build_id) as well" in refused.stderr


@pytest.mark.parametrize(
    ("environment", "missing"),
    [({"FASTMCP_TEMPORAL_DEPLOYMENT_NAME": "tools"}, "BUILD_ID"), ({"FASTMCP_TEMPORAL_BUILD_ID": "v2"}, "DEPLOYMENT_NAME")],
)
def test_versioning_needs_both_the_deployment_name_and_the_build_id(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], missing: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=f"set FASTMCP_TEMPORAL_{missing} .* or unset both to run unversioned"):
        TemporalTasksExtension()


def test_a_deployment_name_with_a_dot_is_refused() -> None:
    with pytest.raises(ValidationError, match="has a '.', which Temporal uses to join"):
        TemporalTasksExtension(deployment_name="tools.v2", build_id="b")


def test_an_unknown_versioning_behavior_is_refused() -> None:
    with pytest.raises(ValueError, match=r"versioning_behavior='sticky'\): use 'pinned' or 'auto_upgrade'"):
        execution_policy(versioning_behavior="sticky")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="'pinned' or 'auto_upgrade'"):
        TemporalTasksExtension(versioning_behavior="sticky")


async def test_the_plugin_refuses_a_worker_with_another_deployment_config(
    make_extension: Callable[..., TemporalTasksExtension], temporal_server: DevServer, task_queue: str
) -> None:
    own = WorkerDeploymentConfig(WorkerDeploymentVersion("theirs", "1"), use_worker_versioning=True)
    plugin = McpTasksPlugin(Build("A", make_extension(deployment_name="ours", build_id="a")).server)
    temporal = await TemporalClient.connect(temporal_server.address)
    with pytest.raises(ValueError, match="set to run as ours.a; pass one of them"):
        Worker(temporal, task_queue=task_queue, plugins=[plugin], deployment_config=own)
