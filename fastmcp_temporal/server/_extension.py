"""`TemporalTasksExtension`: FastMCP's tasks extension (SEP-2663) on Temporal.

A drop-in for `fastmcp_tasks.TasksExtension`: the same capability, the same
`tools/call` decision rules and the same `tasks/*` wire, with every task a Temporal
workflow and every tool leg an activity. The wire models, the client half and the
claim-production patch come from `fastmcp_tasks`; the engine is ours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.server.dependencies import extract_version_spec, get_http_request
from fastmcp.server.extensions import MethodBinding, read_client_extension_settings
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from fastmcp.utilities.versions import VersionSpec
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import INTERNAL_ERROR, METHOD_NOT_FOUND, PaginatedRequestParams
from mcp_types.jsonrpc import HEADER_MISMATCH
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from temporalio.client import Client
from temporalio.worker import Worker

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._fastmcp_private import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CancelTaskParams,
    CancelTaskResult,
    GetTaskParams,
    GetTaskResult,
    UpdateTaskParams,
    UpdateTaskResult,
    missing_capability_error_data,
)
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal._upstream_check import check_upstream
from fastmcp_temporal.connection._client import require_codec, require_reachable, searchable, temporal_client
from fastmcp_temporal.connection._process_exit import end_without_finalizing_on_failure
from fastmcp_temporal.server._asks_first import task_asking_first
from fastmcp_temporal.server._backend import Backend, temporal_errors
from fastmcp_temporal.server._changes import TaskChanges
from fastmcp_temporal.server._creation import start_task
from fastmcp_temporal.server._handlers import TaskMethods
from fastmcp_temporal.server._http_limit import limit_http_requests
from fastmcp_temporal.server._plan import plan_sync_call, plan_task, refuse_rejoin_that_cannot_apply
from fastmcp_temporal.server._push import TaskPush
from fastmcp_temporal.server._scope import VERSION_2025_11_25, is_2025_11_25_task, task_not_found
from fastmcp_temporal.server._sync_calls import call_through_workflow
from fastmcp_temporal.server._tasks_2025_11_25 import Tasks2025_11_25, creation_requested
from fastmcp_temporal.worker import _leg_context
from fastmcp_temporal.worker._plugin import McpTasksPlugin

if TYPE_CHECKING:
    import mcp_types
    from fastmcp import FastMCP
    from fastmcp.server.context import Context
    from fastmcp.server.extensions import ToolCallContinuation, ToolCallOutcome

logger = logging.getLogger("fastmcp_temporal")

_TASK_METHOD_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)
_ERA_2025_11_25 = frozenset({VERSION_2025_11_25})
_BOTH_ERAS = _TASK_METHOD_VERSIONS | _ERA_2025_11_25


class TemporalTasksExtension(_fastmcp_private.RegisteredExtension):
    """Run `task=True` tools as Temporal workflows.

    Every argument falls back to its `FASTMCP_TEMPORAL_*` environment variable, then to
    the `.env` file, then to the default; with no address anywhere a local dev server is
    started. Pass `client` to reuse a connected `temporalio.client.Client`.

    Args:
        address: `host:port` of the Temporal frontend; unset: Temporal's own configuration,
            else an embedded dev server.
        namespace: the Temporal namespace; unset: Temporal's own configuration, else `default`.
        task_queue: the queue this server submits to and its workers poll.
        client: a connected `temporalio.client.Client` to use instead of connecting (its
            address and namespace win; connect it with `encrypted_data_converter` when tasks
            are encrypted or use a payload store).
        worker: run a worker inside this server process; False for an API-only server.
        task_ttl: how long a finished or parked task stays readable (the wire's `ttlMs`).
        heartbeat_timeout: a tool leg silent this long is retried on another worker.
        **settings: any other `TemporalTasksSettings` field by name, e.g. `sync_calls="workflow"`
            or `encryption_key=...` (the Configuration page lists them all).

    Raises:
        pydantic.ValidationError: a setting is invalid, or an argument (or a
            `FASTMCP_TEMPORAL_*` variable) names no setting; the error lists the settings.
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        *,
        address: str | None = None,
        namespace: str | None = None,
        task_queue: str | None = None,
        client: Client | None = None,
        worker: bool | None = None,
        task_ttl: timedelta | None = None,
        heartbeat_timeout: timedelta | None = None,
        **settings: Any,
    ) -> None:
        check_upstream()
        overrides = {
            "address": address,
            "namespace": namespace,
            "task_queue": task_queue,
            "worker": worker,
            "task_ttl": task_ttl,
            "heartbeat_timeout": heartbeat_timeout,
            **settings,
        }
        self._settings = TemporalTasksSettings(**{k: v for k, v in overrides.items() if v is not None})
        self._client = client
        self._backend: Backend | None = None
        self._methods: TaskMethods | None = None
        self._push = TaskPush(
            lambda: self._methods,
            lambda: self._settings.read_recheck.total_seconds(),
            lambda: self._settings.listen_streams_per_caller,
        )
        self._tasks_2025_11_25 = Tasks2025_11_25(lambda: self._methods, lambda: self.server.auth is not None)

    @property
    def temporal_settings(self) -> TemporalTasksSettings:
        """The resolved configuration (constructor over environment over defaults)."""
        return self._settings

    @asynccontextmanager
    async def hosted_in_worker(self, client: Client) -> AsyncGenerator[None, None]:
        """While a user-built worker runs: serve through its client and start no worker of our own.

        When the server's lifespan already runs in this process, it is left as it is.
        """
        if self._backend is not None:
            yield
            return
        saved = self._client, self._settings
        self._client, self._settings = client, self._settings.model_copy(update={"worker": False})
        try:
            yield
        finally:
            self._client, self._settings = saved

    def configure(self, **overrides: Any) -> None:
        """Override settings before the server starts (used by the worker CLI)."""
        if self._backend is not None:
            raise RuntimeError("Configure TemporalTasksExtension before the server starts.")
        self._settings = TemporalTasksSettings(**{**self._settings.model_dump(), **overrides})

    @property
    def client(self) -> Client | None:
        """The Temporal client while the server runs."""
        return self._backend.client if self._backend else None

    def clone(self) -> TemporalTasksExtension:
        return TemporalTasksExtension(client=self._client, **self._settings.model_dump())

    def settings(self) -> dict[str, Any]:
        return {}

    def registered(self, server: FastMCP) -> None:
        """Let the server's streamable-HTTP app take requests as large as `http_request_limit`, up to
        `request_memory_budget` bytes of them at once (a share of it per caller), each body stalling
        no longer than `request_body_timeout`; and serve `subscriptions/listen` for task ids (`_push`),
        unless the server serves it already; and the 2025-11-25 tasks (`_tasks_2025_11_25`)."""
        limit_http_requests(server, lambda: self._settings)
        _fastmcp_private.add_server_middleware(server, self._tasks_2025_11_25.middleware)
        if not _fastmcp_private.serve_subscriptions_listen(server, self._push.serve):
            logger.info("The server already serves subscriptions/listen: task statuses are not pushed")

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", GetTaskParams, self._handle_get, _BOTH_ERAS),
            MethodBinding("tasks/update", UpdateTaskParams, self._handle_update, _TASK_METHOD_VERSIONS),
            MethodBinding("tasks/cancel", CancelTaskParams, self._handle_cancel, _BOTH_ERAS),
            MethodBinding("tasks/result", GetTaskParams, self._handle_result, _ERA_2025_11_25),
            MethodBinding("tasks/list", PaginatedRequestParams, self._handle_list, _ERA_2025_11_25),
        ]

    async def _handle_get(
        self, ctx: ServerRequestContext[Any, Any], params: GetTaskParams
    ) -> GetTaskResult | dict[str, Any]:
        if ctx.protocol_version == VERSION_2025_11_25:
            with temporal_errors("read the task"):
                return await self._tasks_2025_11_25.get(ctx, params.task_id)
        methods = self._task_methods(ctx, params.task_id)
        with temporal_errors("read the task"):
            return await methods.get(params.task_id)

    async def _handle_update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> UpdateTaskResult:
        methods = self._task_methods(ctx, params.task_id)
        with temporal_errors("deliver the answers"):
            return await methods.update(params.task_id, params.input_responses)

    async def _handle_cancel(
        self, ctx: ServerRequestContext[Any, Any], params: CancelTaskParams
    ) -> CancelTaskResult | dict[str, Any]:
        if ctx.protocol_version == VERSION_2025_11_25:
            with temporal_errors("cancel the task"):
                return await self._tasks_2025_11_25.cancel(params.task_id)
        methods = self._task_methods(ctx, params.task_id)
        with temporal_errors("cancel the task"):
            return await methods.cancel(params.task_id)

    async def _handle_result(self, ctx: ServerRequestContext[Any, Any], params: GetTaskParams) -> dict[str, Any]:
        with temporal_errors("read the task's result"):
            return await self._tasks_2025_11_25.result(ctx, params.task_id)

    async def _handle_list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> dict[str, Any]:
        with temporal_errors("list the tasks"):
            return await self._tasks_2025_11_25.list(self._running_backend(), params.cursor)

    def _task_methods(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskMethods:
        """Apply the gates every `tasks/*` shares, then the running backend's methods."""
        if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
            raise _missing_capability(f"This request targets the tasks extension ({TASKS_EXTENSION_ID})")
        _require_matching_route(task_id)
        if self._methods is None or is_2025_11_25_task(task_id):
            raise task_not_found(task_id)  # a 2025-11-25 task is not one of this era's
        return self._methods

    async def intercept_tool_call(
        self,
        params: mcp_types.CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolCallOutcome:
        """Run the call as a task when the tool's mode and the client's opt-in say so.

        A caller that did not opt in is served inline, or by a workflow it waits on
        when `sync_calls="workflow"` (the extension's setting or the tool's policy).
        """
        from_client = _fastmcp_private.is_client_tool_call()
        version_str = extract_version_spec(params.meta)
        version = VersionSpec(eq=version_str) if version_str else None
        try:
            tool = await context.fastmcp.get_tool(params.name, version)
        except NotFoundError:
            tool = None
        if tool is not None and from_client and creation_requested(context):
            return await self._tasks_2025_11_25.create(self._running_backend, tool, params.arguments, context)
        if tool is None or not tool.task_config.supports_tasks():
            return await call_next()

        request = context.request_context
        opted_in = (
            request is not None
            and request.protocol_version in MODERN_PROTOCOL_VERSIONS
            and context.client_extension_settings(TASKS_EXTENSION_ID) is not None
        )
        mode = tool.task_config.mode
        if not from_client:
            if mode == "required":
                raise ToolError(
                    f"Tool {tool.name!r} only runs as a background task, which the client "
                    "has to request by calling it directly."
                )
            return await call_next()
        if mode == "required" and not opted_in:
            if request is not None and request.protocol_version == VERSION_2025_11_25:
                raise MCPError(METHOD_NOT_FOUND, f"Tool {tool.name!r} runs only as a task: call it with `task`.")
            raise _missing_capability(f"Tool {tool.name!r} requires the tasks extension ({TASKS_EXTENSION_ID})")
        if not opted_in:
            if (plan := await plan_sync_call(self._settings, context.fastmcp, tool)) is None:
                return await call_next()
            with temporal_errors("run the call"):
                return await call_through_workflow(self._running_backend(), plan, params.arguments, context)
        with temporal_errors("start the task"):
            plan = await plan_task(context.fastmcp, tool)
            if self._methods is not None and plan.policy.ask_before_task:
                return await task_asking_first(
                    self._running_backend(), self._methods, plan, params.arguments, context
                )
            created, started = await start_task(self._running_backend(), plan, params.arguments, context)
        return created if self._methods is None else self._methods.watch(created, started)

    def _running_backend(self) -> Backend:
        if self._backend is None:
            raise MCPError(
                code=INTERNAL_ERROR,
                message="Background tasks need the server's lifespan running (TemporalTasksExtension).",
            )
        return self._backend

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None, None]:
        """Connect to Temporal and, unless API-only, run a worker in this process."""
        server = self.server
        components = [c for c in await server.get_tasks() if c.task_config.supports_tasks()]
        if not components:
            yield
            return
        refuse_rejoin_that_cannot_apply(self._settings, components)
        end_without_finalizing_on_failure()
        async with AsyncExitStack() as stack:
            if self._client is not None:
                require_codec(self._client, self._settings)
                await require_reachable(self._client, self._settings)
            client = self._client or await stack.enter_async_context(temporal_client(self._settings))
            indexed = await searchable(client, client.service_client.config.target_host, client.namespace)
            _leg_context.install_hooks()
            stack.callback(_leg_context.release_hooks)
            stack.enter_context(_fastmcp_private.task_results_on_the_wire())
            if self._settings.worker:
                await stack.enter_async_context(_running_worker(client, server, self._settings))
            self._backend = Backend(client, self._settings, indexed.tasks, self._settings.worker, indexed.changes)
            self._methods = TaskMethods(self._backend, TaskChanges())
            await self._methods.read_clock()
            try:
                yield
            finally:
                await self._methods.close()
                self._backend = self._methods = None


@asynccontextmanager
async def _running_worker(
    client: Client, server: FastMCP, settings: TemporalTasksSettings
) -> AsyncGenerator[Worker, None]:
    """A worker on the server's own event loop, inside its lifespan, stopped gracefully."""
    worker = build_worker(client, server, settings)
    run = asyncio.create_task(worker.run())
    run.add_done_callback(_report_worker_exit)
    try:
        yield worker
    finally:
        await worker.shutdown()
        await run


def _report_worker_exit(run: asyncio.Task[None]) -> None:
    if not run.cancelled() and run.exception() is not None:
        logger.error(
            "The embedded Temporal worker stopped; this server no longer runs task tools",
            exc_info=run.exception(),
        )


def build_worker(client: Client, server: FastMCP, settings: TemporalTasksSettings) -> Worker:
    """The embedded worker: the same plugin a user-built worker loads, inside the running lifespan."""
    return Worker(
        client,
        task_queue=settings.task_queue,
        max_cached_workflows=settings.max_cached_workflows,
        plugins=[McpTasksPlugin(server, enter_server_lifespan=False)],
    )


def _missing_capability(subject: str) -> MCPError:
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{subject}; the client did not declare it for this request.",
        data=missing_capability_error_data(),
    )


def _require_matching_route(task_id: str) -> None:
    """Over HTTP, an `Mcp-Name` header must name the same task as the body (SEP-2243)."""
    try:
        request = get_http_request()
    except RuntimeError:
        return
    header = request.headers.get(MCP_NAME_HEADER)
    if header is not None and decode_header_value(header) != task_id:
        raise MCPError(
            code=HEADER_MISMATCH,
            message=f"{MCP_NAME_HEADER} header does not match the request body's 'taskId' parameter",
        )
