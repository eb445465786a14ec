"""`McpTasksPlugin`: the worker side of MCP tasks, for any Temporal worker.

One temporalio plugin carries everything a worker needs to run a FastMCP server's
tasks: the task workflow, the tool-leg activity bound to the server, the data
converter (encryption, payload store), the worker tuning that makes
cancellation prompt, and the settings' concurrency and rate limits (a Worker's own
arguments win; a rate limit turns eager activity dispatch off, which would start legs
past it). Its legs' slots follow the event loop (`_slots.py`): a worker takes no
more legs than its loop keeps up with, unless the Worker sets its own
`max_concurrent_activities` or `tuner`. The embedded worker and `fastmcp-temporal worker`
load it, and so can a team's own worker::

    client = await Client.connect("temporal:7233", plugins=[McpTasksPlugin(mcp)])
    worker = Worker(client, task_queue="fastmcp-tasks")

In a worker of its own (the default), the plugin runs the worker inside the
server's lifespan, so tools see their `lifespan_context`; the server's extension
then serves through the worker's client and starts no worker of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkerDeploymentConfig

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._settings import VERSIONING_BEHAVIORS, TemporalTasksSettings
from fastmcp_temporal._upstream_check import check_upstream
from fastmcp_temporal.activities.tool_leg import ToolLegActivities
from fastmcp_temporal.connection._client import require_codec
from fastmcp_temporal.connection._converter import tasks_data_converter
from fastmcp_temporal.connection._store_marker import identify_store
from fastmcp_temporal.connection._temporal_clock import worker_clock
from fastmcp_temporal.worker._big_runs import CollectAfterBigRuns
from fastmcp_temporal.worker._heartbeat import HeartbeatCadence
from fastmcp_temporal.worker._loop_lag import worker_loop_lag
from fastmcp_temporal.worker._lost_payloads import EndTasksWithLostPayloads
from fastmcp_temporal.worker._metrics import worker_interceptors
from fastmcp_temporal.worker._slots import loop_bound_tuner
from fastmcp_temporal.worker._store_away_cancels import CloseCancelsWhileStoreAway
from fastmcp_temporal.workflows.task import McpTaskWorkflow

if TYPE_CHECKING:
    from fastmcp import FastMCP

PLUGIN_NAME = "fastmcp_temporal.McpTasksPlugin"

# A dead worker's sticky queue holds the workflow's next task this long.
STICKY_TIMEOUT = timedelta(seconds=1)


class McpTasksPlugin(SimplePlugin):
    """Run the MCP tasks of `server` (which has a `TemporalTasksExtension`) in a Temporal worker.

    Pass it to `Client.connect(plugins=[...])` (the client then encrypts when
    `FASTMCP_TEMPORAL_ENCRYPTION_KEY` is set, and every worker of that client loads
    it) or to `Worker(plugins=[...])`. The worker must poll the extension's task
    queue.

    Args:
        server: the FastMCP server definition, the same the MCP servers load, with its
            `TemporalTasksExtension` added.
        enter_server_lifespan: run the worker inside the server's lifespan, so tools see
            their `lifespan_context`; False for a worker that already runs inside it.
    """

    def __init__(self, server: FastMCP, *, enter_server_lifespan: bool = True) -> None:
        check_upstream()
        self._server = server
        self._extension = tasks_extension(server)
        self._lost_payloads = EndTasksWithLostPayloads()
        self._store_away_cancels = CloseCancelsWhileStoreAway()
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            workflows=[McpTaskWorkflow],
            activities=[
                ToolLegActivities(server, heartbeat_cadence(self._extension.temporal_settings)).run_tool_leg
            ],
            interceptors=[*worker_interceptors(), self._lost_payloads, CollectAfterBigRuns()],
        )
        self._enter_server_lifespan = enter_server_lifespan

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        settings = self._extension.temporal_settings
        polled = config.get("task_queue")
        if polled != settings.task_queue:
            raise ValueError(
                f"This worker polls task queue {polled!r} but {self._server.name!r} submits its tasks to"
                f" {settings.task_queue!r}; pass task_queue={settings.task_queue!r} to the Worker or set"
                " FASTMCP_TEMPORAL_TASK_QUEUE to the worker's queue."
            )
        require_codec(config["client"], settings)  # type: ignore[typeddict-item]
        if settings.heartbeat_interval is not None:  # else the SDK's own throttle, as a bare activity's
            config["max_heartbeat_throttle_interval"] = settings.heartbeat_interval
        config["sticky_queue_schedule_to_start_timeout"] = STICKY_TIMEOUT
        if config.get("max_concurrent_activities") is None and config.get("tuner") is None:
            config["tuner"] = loop_bound_tuner(config, settings.max_concurrent_activities, worker_loop_lag)
        if config.get("max_activities_per_second") is None:
            config["max_activities_per_second"] = settings.max_activities_per_second
        if config.get("max_task_queue_activities_per_second") is None:
            config["max_task_queue_activities_per_second"] = settings.max_task_queue_activities_per_second
        if config.get("max_activities_per_second") or config.get("max_task_queue_activities_per_second"):
            config["disable_eager_activity_execution"] = True  # an eager leg skips the poll and its limits
        if not config.get("graceful_shutdown_timeout"):
            config["graceful_shutdown_timeout"] = settings.shutdown_grace
        if deployment := deployment_config(settings):
            if config.get("deployment_config") not in (None, deployment):
                raise ValueError(
                    f"This worker has its own deployment_config but {self._server.name!r} is set to run as "
                    f"{deployment.version.to_canonical_string()}; pass one of them: drop the Worker's "
                    "deployment_config, or unset FASTMCP_TEMPORAL_DEPLOYMENT_NAME and FASTMCP_TEMPORAL_BUILD_ID."
                )
            config["deployment_config"] = deployment
        return config

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        return tasks_data_converter(self._extension.temporal_settings, existing)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker inside the server's lifespan, the extension serving through its client."""
        await identify_store(worker.client)
        await worker_clock.read_once(worker.client)
        async with (
            worker_loop_lag.sampling(),
            self._lost_payloads.serving(worker.client),
            self._store_away_cancels.serving(worker.client),
        ):
            if not self._enter_server_lifespan:
                await next(worker)
                return
            async with (
                self._extension.hosted_in_worker(worker.client),
                _fastmcp_private.lifespan_manager(self._server),
            ):
                await next(worker)


def heartbeat_cadence(settings: TemporalTasksSettings) -> HeartbeatCadence:
    """How often the worker's legs heartbeat, from its settings."""
    return HeartbeatCadence(interval=settings.heartbeat_interval)


def deployment_config(settings: TemporalTasksSettings) -> WorkerDeploymentConfig | None:
    """The worker's Worker Versioning, from its settings; None runs it unversioned.

    The task workflow declares no versioning behaviour of its own, so the worker's default
    (`versioning_behavior`) is the behaviour of every task it starts; a tool's own
    `execution_policy(versioning_behavior=...)` overrides it when the task starts.
    """
    version = settings.deployment_version
    if version is None:
        return None
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VERSIONING_BEHAVIORS[settings.versioning_behavior],
    )


@runtime_checkable
class TasksHost(Protocol):
    """What the plugin needs of the server's `TemporalTasksExtension`.

    The worker side never imports the MCP-facing side (which starts workers with this
    plugin), so it names the extension by what it offers.
    """

    @property
    def temporal_settings(self) -> TemporalTasksSettings: ...

    def hosted_in_worker(self, client: Client) -> AbstractAsyncContextManager[None]: ...


def tasks_extension(server: FastMCP) -> TasksHost:
    """The server's `TemporalTasksExtension`, or an error that says how to add one."""
    extension = _fastmcp_private.registered_extension(server, TASKS_EXTENSION_ID)
    if not isinstance(extension, TasksHost):
        raise ValueError(
            f"Server {server.name!r} has no TemporalTasksExtension; add "
            "`mcp.add_extension(TemporalTasksExtension(...))` to the server first."
        )
    return extension
