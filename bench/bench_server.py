"""The MCP server the `compare` scenario measures, one definition for every process that loads it.

The same-process shape builds it inside the driver; production's shape runs it as an API
server over streamable HTTP (`python bench/bench_server.py`) and loads it again in the
worker process (`fastmcp-temporal worker bench/bench_server.py`, or fastmcp-tasks'
`python -m fastmcp_tasks.worker_cli worker bench/bench_server.py`), as a deployment
does. The engine comes from the environment the benchmark sets:

- `BENCH_ENGINE`: `temporal`, `temporal-baseline`, `tasks-memory`, `tasks-redis` or
  `bare-mcp`;
- `BENCH_MARKS`: the folder where tool bodies leave their start and cancel marks;
- the engines' own settings: `FASTMCP_TEMPORAL_*` (address, task queue, `WORKER`,
  `METRICS_ADDRESS`) or `FASTMCP_DOCKET_*` (url, name).

`bare-mcp` is the MCP floor over bare Temporal: no tasks extension, just two plain tools,
`bare_start` (starts `BareTrivial`, returns its workflow id) and `bare_result` (waits for
its result), on one temporalio client; the bare engine's worker runs the workflows. A
third, `bare_status`, answers "working" without Temporal: a status read's MCP cost.

The `scale` scenario's tools (`scale_park`, `scale_leg`, `scale_sleep`) log every body run in `BENCH_MARKS`,
so the bench can tell which bodies ran twice; a `scale_leg` reports progress every
`BENCH_PROGRESS_S` seconds (default 10) until the bench releases it, a `scale_sleep` waits in
silence for as long as it is told.

The `freshness` scenario's tool (`fresh`) runs its body a given time, then closes, asks or reports
progress, marking the moment just before in `BENCH_MARKS`; the bench times from that mark
to the client seeing the change.

With `BENCH_COUNT_BY_WORKFLOW` set (the `scale` scenario sets it on its API servers only), the process
counts every Temporal request its clients make by the workflow the request names and by
operation, and serves the counts at `GET /bench/temporal-by-workflow` (`count_by_workflow`), and
times its `tasks/get` answers and its event loop's lag at `GET /bench/read-times` (`time_reads`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import time
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp_types import ElicitRequest, InputRequiredResult
from starlette.middleware import Middleware as StarletteMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from bench.marks import Marks


class _RequestCounter(Middleware):
    """Counts the MCP requests the server answers, by method."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self.counts = counts

    async def on_request(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        self.counts[context.method or "?"] += 1
        return await call_next(context)


class _ReadTimer(Middleware):
    """Records how long each `tasks/get` took this server to answer, in seconds, holds included."""

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds

    async def on_request(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        if context.method != "tasks/get":
            return await call_next(context)
        began = time.perf_counter()
        try:
            return await call_next(context)
        finally:
            self.seconds.append(time.perf_counter() - began)


def time_reads(mcp: FastMCP) -> None:
    """Time this server's `tasks/get` answers, and how late its event loop wakes from a 0.1 s sleep.

    `GET /bench/read-times?from=N&lag_from=M` answers `{"tasks_get_s": [...], "loop_lag_s": [...]}`,
    each from the given index on, and `"n"`/`"lag_n"`, their lengths so far: a reader tells what the
    server spent on its reads (holds included) from what its own side added.
    """
    reads: list[float] = []
    lags: list[float] = []
    mcp.add_middleware(_ReadTimer(reads))

    async def sample_lag() -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(0.1)
            lags.append(time.perf_counter() - began - 0.1)

    sampler: list[asyncio.Task[None]] = []

    @mcp.custom_route("/bench/read-times", methods=["GET"])
    async def read_times(request: Request) -> JSONResponse:
        if not sampler:  # started on the server's own loop by the first request
            sampler.append(asyncio.create_task(sample_lag()))
        start, lag_start = (int(request.query_params.get(key, 0)) for key in ("from", "lag_from"))
        http_start = int(request.query_params.get("http_from", 0))
        return JSONResponse(
            {
                "n": len(reads),
                "lag_n": len(lags),
                "http_n": len(_HTTP_TIMES),
                "tasks_get_s": reads[start:],
                "loop_lag_s": lags[lag_start:],
                "mcp_post_s": _HTTP_TIMES[http_start:],
            }
        )


# Every POST to /mcp this server answered, in seconds from its arrival to its response's last
# byte (`_PostTimer`, with `time_reads`): beside the tasks/get handler's own time, what the
# HTTP and MCP session layers add.
_HTTP_TIMES: list[float] = []


class _PostTimer:
    """ASGI middleware: how long each POST to /mcp took, from its arrival to the last byte sent."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/mcp"):
            return await self.app(scope, receive, send)
        began = time.perf_counter()

        async def timed_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                _HTTP_TIMES.append(time.perf_counter() - began)

        await self.app(scope, receive, timed_send)


def count_by_workflow(mcp: FastMCP) -> None:
    """Count this process's Temporal requests by the workflow each names; serve them over HTTP.

    The seam is `temporalio.service._BridgeServiceClient._rpc_call`, which every
    `WorkflowService` method calls once per request (client interceptors miss the raw
    `workflow_service` calls the server makes, such as its history long polls). The SDK's
    own metrics count by operation only, and count each retry the core makes; this counts
    calls. A request's workflow is its `execution`, `workflow_execution` or
    `update_ref.workflow_execution`'s `workflow_id`, or its own `workflow_id`; one naming
    none (a visibility list for the change feed, a namespace lookup) counts under "".
    The endpoint answers `{workflow_id: {Operation: n}}`, operations spelled as the SDK's
    metrics spell them (`GetWorkflowExecutionHistory`), at `GET /bench/temporal-by-workflow`.
    """
    from temporalio.service import _BridgeServiceClient

    counts: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    operations: dict[str, str] = {}
    call = _BridgeServiceClient._rpc_call

    async def counted(self: Any, rpc: str, req: Any, *args: Any, **kwargs: Any) -> Any:
        operation = operations.get(rpc) or operations.setdefault(
            rpc, "".join(part.title() for part in rpc.split("_"))
        )
        counts[_named_workflow(req)][operation] += 1
        return await call(self, rpc, req, *args, **kwargs)

    _BridgeServiceClient._rpc_call = counted  # type: ignore[method-assign]

    @mcp.custom_route("/bench/temporal-by-workflow", methods=["GET"])
    async def temporal_by_workflow(request: Request) -> JSONResponse:
        return JSONResponse({workflow: dict(ops) for workflow, ops in counts.items()})


def _named_workflow(request: Any) -> str:
    """The workflow id a Temporal request names, or "" for one that names none."""
    for field in ("execution", "workflow_execution"):
        if (execution := getattr(request, field, None)) is not None and execution.workflow_id:
            return execution.workflow_id
    if (ref := getattr(request, "update_ref", None)) is not None and ref.workflow_execution.workflow_id:
        return ref.workflow_execution.workflow_id
    return getattr(request, "workflow_id", "") or ""


def build(kind: str, marks: Marks) -> FastMCP:
    """The benchmark server on engine `kind`, configured from the environment.

    Args:
        kind: `temporal`, `temporal-baseline`, `tasks-memory`, `tasks-redis` or `bare-mcp`.
        marks: where the `hold` tool records its start and its cancel.
    """
    requests: collections.Counter[str] = collections.Counter()
    mcp = FastMCP("bench", middleware=[_RequestCounter(requests)])
    if os.environ.get("BENCH_COUNT_BY_WORKFLOW"):
        count_by_workflow(mcp)
        time_reads(mcp)

    @mcp.tool
    async def bench_requests() -> dict[str, int]:
        """The MCP requests this server process has answered, by method."""
        return dict(requests)

    if kind == "bare-mcp":  # no tasks extension: plain tools only
        add_trivial_tools(mcp, tasks=False)
        add_bare_tools(mcp, os.environ["FASTMCP_TEMPORAL_TASK_QUEUE"])
        return mcp
    if kind.startswith("temporal"):
        from fastmcp_temporal import TemporalTasksExtension

        mcp.add_extension(TemporalTasksExtension())
    else:
        from fastmcp_tasks import TasksExtension

        mcp.add_extension(TasksExtension())
    add_trivial_tools(mcp)
    if kind == "temporal":  # a baseline checkout may predate execution policies
        from fastmcp_temporal import execution_policy

        @mcp.tool(task=True)
        @execution_policy(leg="local")
        async def trivial_local(n: int) -> int:
            return n

        add_scale_tools(mcp, marks)

    add_fresh_tool(mcp, marks)

    @mcp.tool(task=True)
    async def hold(key: str) -> str:
        marks.started(key)
        try:
            while True:
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            marks.cancelled(key)
            raise

    @mcp.tool(task=True)
    async def park() -> str | InputRequiredResult:
        return ask_ok()

    return mcp


def add_scale_tools(mcp: FastMCP, marks: Marks) -> None:
    """`scale_park`, parked on input at once, `scale_leg`, a leg that reports progress until released,
    and `scale_sleep`, a leg that waits a given time in silence (`scale.py --legs`).

    Both answer `answered:<key>` once their ask is answered (a `scale_park` with `ask_again`: once
    answered twice, asking again after the first answer); a released leg asks (`then="ask"`)
    or returns `done:<key>` (any other `then`), leaving an `asking` or `closing` mark just before.
    A `then="progress"` leg the bench nudges (a `nudge` mark) reports progress at once, marked
    `progressing` just before, and every message after that one ends in `progressed`.

    Args:
        mcp: the server to add them to.
        marks: where body runs and moments are recorded.
    """
    progress_every = float(os.environ.get("BENCH_PROGRESS_S", "10"))

    @mcp.tool(task=True)
    async def scale_park(key: str, ctx: Context, ask_again: bool = False) -> str | InputRequiredResult:
        if ctx.input_responses is not None:
            marks.ran(key, "answered")
            if ask_again and marks.seen(key, "asked-again") is None:
                marks.mark(key, "asked-again")
                return ask_ok()
            return f"answered:{key}"
        marks.ran(key, "ask")
        return ask_ok()

    @mcp.tool(task=True)
    async def scale_leg(key: str, then: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is not None:
            marks.ran(key, "answered")
            return f"answered:{key}"
        marks.ran(key, "leg")
        reports, quiet, nudged = 0, progress_every, ""  # the first report at once
        while marks.seen(key, "release") is None:
            if then == "progress" and not nudged and marks.seen(key, "nudge") is not None:
                nudged, quiet = " progressed", progress_every
                marks.mark(key, "progressing")
            if quiet >= progress_every:
                reports, quiet = reports + 1, 0.0
                await ctx.report_progress(reports, None, f"{key} {reports}{nudged}")
            await asyncio.sleep(1)
            quiet += 1
        marks.mark(key, "asking" if then == "ask" else "closing")
        return ask_ok() if then == "ask" else f"done:{key}"

    @mcp.tool(task=True)
    async def scale_sleep(key: str, seconds: float) -> str:
        """A waiting leg: sleeps `seconds` (I/O-bound, reports nothing), then returns `done:<key>`; its
        start and end are marked (`leg`, `slept`)."""
        marks.ran(key, "leg")
        await asyncio.sleep(seconds)
        marks.ran(key, "slept")
        return f"done:{key}"


def add_fresh_tool(mcp: FastMCP, marks: Marks) -> None:
    """`fresh`: a body that runs `seconds`, then does `then` (`close`, `ask` or `progress`).

    Each change is marked just before it is made: `closing`, `asking` (the ask names the
    key: one client can tell its questions apart), `progressing` (the report carries
    `"<key> progressed"`; the body then runs until the bench marks `release`). An answered
    ask returns `answered:<key>` at once.

    Args:
        mcp: the server to add it to.
        marks: where the moments are recorded.
    """

    @mcp.tool(task=True)
    async def fresh(key: str, seconds: float, then: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is not None:
            return f"answered:{key}"
        await asyncio.sleep(seconds)
        if then == "ask":
            marks.mark(key, "asking")
            return ask_ok(f"ok? {key}")
        if then == "progress":
            marks.mark(key, "progressing")
            await ctx.report_progress(1, None, f"{key} progressed")
            while marks.seen(key, "release") is None:
                await asyncio.sleep(0.1)
        marks.mark(key, "closing")
        return f"done:{key}"


def add_trivial_tools(mcp: FastMCP, *, tasks: bool = True) -> None:
    """`trivial`, a task tool that returns its argument, and `no_task`, the same as a plain tool.

    Args:
        mcp: the server to add them to.
        tasks: False on a server without a tasks extension: `no_task` alone.
    """
    if tasks:

        @mcp.tool(task=True)
        async def trivial(n: int) -> int:
            return n

    @mcp.tool
    async def no_task(n: int) -> int:
        return n


def add_bare_tools(mcp: FastMCP, task_queue: str) -> None:
    """`bare_start` and `bare_result`: the two requests any MCP tasks client makes, over bare Temporal.

    Args:
        mcp: the server to add them to.
        task_queue: the queue the bare worker polls.
    """
    from bare_engine import start

    @mcp.tool
    async def bare_start(n: int) -> str:
        """Start `BareTrivial` with `n`; its workflow id."""
        return (await start(await bare_client(), task_queue, "BareTrivial", n)).id

    @mcp.tool
    async def bare_status() -> str:
        """What a status read that asks Temporal nothing answers (no arguments: no schema lookup)."""
        return "working"

    @mcp.tool
    async def bare_result(workflow_id: str) -> int:
        """Wait for a `BareTrivial` workflow's result."""
        return await (await bare_client()).get_workflow_handle(workflow_id).result()


_bare_client: Any = None
_bare_connect = asyncio.Lock()


async def bare_client() -> Any:
    """The process's temporalio client for `bare-mcp`, connected on first use.

    It connects to `FASTMCP_TEMPORAL_ADDRESS` and, where `FASTMCP_TEMPORAL_METRICS_ADDRESS`
    is set, serves its Temporal calls there. The same-process shape runs the bare worker
    on it too, so a start can be eager, as the bare engine's can.
    """
    global _bare_client
    if _bare_client is not None:
        return _bare_client
    async with _bare_connect:
        if _bare_client is None:
            from bare_engine import metrics_runtime
            from temporalio.client import Client

            metrics = os.environ.get("FASTMCP_TEMPORAL_METRICS_ADDRESS")
            _bare_client = await Client.connect(
                os.environ["FASTMCP_TEMPORAL_ADDRESS"], runtime=metrics_runtime(metrics) if metrics else None
            )
    return _bare_client


def ask_ok(message: str = "ok?", fields: dict[str, Any] | None = None, **result: Any) -> InputRequiredResult:
    """A task tool's ask for one form elicitation, `q`, saying `message`, with `fields` (none by default).

    Args:
        result: more of the result's fields (`request_state`).
    """
    schema = {"type": "object", "properties": fields or {}}
    request = ElicitRequest(
        method="elicitation/create", params={"mode": "form", "message": message, "requestedSchema": schema}
    )
    return InputRequiredResult(result_type="input_required", input_requests={"q": request}, **result)


def serve_http(port_file: Path) -> None:
    """Serve `mcp` over streamable HTTP on a free 127.0.0.1 port, written to `port_file`.

    Args:
        port_file: where the port goes once the socket is bound (written whole at once).
    """
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that name it, and
    # without it every response after the first waits ~40 ms for a delayed ACK.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    partial = port_file.with_suffix(".partial")
    partial.write_text(str(listener.getsockname()[1]))
    partial.replace(port_file)
    timed = [StarletteMiddleware(_PostTimer)] if os.environ.get("BENCH_COUNT_BY_WORKFLOW") else None
    mcp.run(transport="http", show_banner=False, log_level="warning", sockets=[listener], middleware=timed)


# What the worker CLIs load by file: built only where the benchmark set the engine up.
if "BENCH_ENGINE" in os.environ:
    mcp = build(os.environ["BENCH_ENGINE"], Marks(Path(os.environ["BENCH_MARKS"])))

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", type=Path, required=True, help="where to write the port it serves on")
    serve_http(parser.parse_args().port_file)
