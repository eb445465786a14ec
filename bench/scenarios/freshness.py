"""How soon a long task's change reaches the client waiting on it: the user's view of long tasks.

    .venv/bin/python -m bench run freshness [--body 75] [--calls 8] [--phase 5]
        [--engines temporal tasks-memory] [--clients fastmcp fixed-interval every-5s]
        [--changes close ask progress cancel]

On the run's dev server and, per engine (fastmcp-tasks is the paired baseline), production's
shape (`bench/deploy.py`):
this project with its defaults as an API server (`bench_server.py`, `worker=False`) over
streamable HTTP plus a `fastmcp-temporal worker` process; fastmcp-tasks on `memory://` as
one server that runs its tools itself. Each runs every call of a scenario at once (Docket's
`concurrency` and the worker's activity slots raised to fit; nothing else changed). For each
scenario in turn, every engine and every client kind at once make `--calls` calls of the
`task=True` tool `fresh`, whose body runs `--body` seconds (75 by default: long enough for a
quiet task's advertised interval to have grown) plus
i/`--calls` of `--phase` (so their ends spread over the phase), then makes its change,
marking the moment just before (`bench/marks.py`: one machine, one
monotonic clock). Each call has its own client over streamable HTTP:

- `fastmcp`: an unmodified `fastmcp.Client` with `fastmcp_tasks` imported, `call_tool`
  (the transparent task path, polling as it does); its elicitation handler sees an ask;
  a cancel is followed by `ToolTask.result()`, the same poll loop, since `call_tool`
  does not give its caller the task id to cancel;
- `fixed-interval`: `tasks/get`, then sleeps exactly the advertised `pollIntervalMs`
  (5 s when none) before the next read;
- `every-5s`: `tasks/get` every 5 s whatever is advertised;
- `sep1686`: a client of the 2025-11-25 tasks, as the TypeScript SDK's `callToolStream` and
  ext-tasks in its minimal form call a tool: a raw 2025-11-25 session, `tools/call` with
  `params.task`, then `tasks/get` after each advertised `pollInterval`; the result is then
  read with `tasks/result`, and an ask, once seen, is cancelled (this client answers none).
  Not for fastmcp-tasks, which serves no 2025-11-25 tasks.

Changes (`--changes`), each timed from the change to the first read (or `call_tool` return)
showing it:

- `close`: the body returns (`closing` mark) -> the client has the result;
- `ask`: the body asks for input (`asking`) -> the client sees `input_required`;
- `progress`: the body reports progress (`progressing`) -> a read shows its message
  (not for `fastmcp`: `call_tool` shows no status message);
- `cancel`: `tasks/cancel` through a second client, acknowledged -> the first client
  sees `cancelled` (the `hold` tool, cancelled at the time the others change).

Per engine, change and client kind: percentiles in seconds. On Temporal engines, the
requests of the API server and of the worker over each change (their SDK metrics,
`metrics.temporal_calls`), per task per 30 s by kind (`metrics.request_kind`: describe,
history (long polls and reads), list/visibility, signal, ...), the API server's apart:
those are the reads. About 7 minutes with the defaults on 2 shared cores. Everything started is
stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastmcp_tasks  # noqa: F401  # the transparent task path of fastmcp.Client
import httpx2
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult

from bench.deploy import Backends, engine_env, start_api_server, start_worker, terminate, worker_command
from bench.drivers import accept_every_ask, tasks_cancel, tasks_get, tasks_update
from bench.harness import RESULTS, dev_server
from bench.marks import Marks
from bench.metrics import per_task_per_30s_by_kind, percentiles, process_tree, temporal_calls

QUESTION = (
    "How soon does a long task's change (close, ask, progress, cancel) reach the client waiting on it, "
    "by client kind, on fastmcp-temporal and fastmcp-tasks (the paired baseline), and at what read cost?"
)
QUICK = {"body": 3.0, "calls": 2, "phase": 1.0, "clients": ["fastmcp", "fixed-interval"]}
ENGINES = ("temporal", "tasks-memory")
CLIENTS = ("fastmcp", "fixed-interval", "every-5s", "sep1686")
SCENARIOS = ("close", "ask", "progress", "cancel")
DEFAULT_POLL_S = 5.0  # what a read without pollIntervalMs waits, and the `every-5s` client's interval
DEADLINE_S = 300  # past its change, for anything a call waits on
_CHANGE_MARK = {"close": "closing", "ask": "asking", "progress": "progressing"}


@dataclass
class Engine:
    """One engine's processes, the URL of its API server, and where its Temporal calls are counted."""

    kind: str
    url: str
    marks: Marks
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)  # role -> host:port

    async def calls(self) -> dict[str, dict[str, int]]:
        """Temporal requests so far by role and operation."""
        return {role: await temporal_calls([at]) for role, at in self.metrics.items()}

    async def stop(self) -> None:
        for process in self.processes:
            await terminate(process)


async def start_engine(kind: str, backends: Backends, state: Path, log: Path, slots: int) -> Engine:
    """Start `kind` in production's shape and return once a trivial task has run through it.

    Args:
        slots: tool bodies it must run at once (Docket runs 10 by default, and queues the rest).
    """
    state.mkdir(parents=True)
    env = engine_env(kind, backends, state, None) | {
        "FASTMCP_DOCKET_CONCURRENCY": str(slots),
        "FASTMCP_TEMPORAL_MAX_CONCURRENT_ACTIVITIES": str(max(slots, 50)),  # 50: the default
    }
    server, url, metrics = await start_api_server(kind, env, state / "port", log)
    engine = Engine(kind, url, Marks(Path(env["BENCH_MARKS"])), [server])
    if metrics:
        engine.metrics["api server"] = metrics
    if worker_command(kind, env) is not None:
        worker, worker_metrics = await start_worker(kind, env, log)
        engine.processes.append(worker)
        if worker_metrics:
            engine.metrics["worker"] = worker_metrics
    try:
        async with Client(url, timeout=60) as client:
            await asyncio.wait_for(client.call_tool("trivial", {"n": 1}), 120)
    except BaseException:
        await engine.stop()
        raise
    return engine


@dataclass
class Call:
    """One measured call: which engine, client kind and scenario, and when its change was seen."""

    engine: Engine
    client: str
    scenario: str
    key: str
    seconds: float  # the body's run before its change
    changed: float | None = None  # monotonic: the body's mark, or the cancel's acknowledgement
    seen: float | None = None  # monotonic: the client's first sight of the change

    def arguments(self) -> tuple[str, dict[str, Any]]:
        if self.scenario == "cancel":
            return "hold", {"key": self.key}
        return "fresh", {"key": self.key, "seconds": self.seconds, "then": self.scenario}

    def shows(self, status: ClientGetTaskResult) -> bool:
        """Whether `status` shows this call's change."""
        if self.scenario == "progress":
            return f"{self.key} progressed" in (status.status_message or "")
        wanted = {"close": "completed", "ask": "input_required", "cancel": "cancelled"}[self.scenario]
        return status.status == wanted


async def run_call(call: Call) -> None:
    """Drive `call` with its client kind until it has seen its change; fill `call.changed` and `call.seen`."""
    async with asyncio.timeout(call.seconds + DEADLINE_S):
        if call.client == "fastmcp" and call.scenario in ("close", "ask"):
            await _call_tool(call)
        elif call.client == "sep1686":
            await _poll_sep1686(call)
        else:
            await _poll(call)
    if call.scenario in _CHANGE_MARK:
        call.changed = call.engine.marks.seen(call.key, _CHANGE_MARK[call.scenario])


async def _call_tool(call: Call) -> None:
    """`fastmcp.Client.call_tool`, as any caller of a task tool: seen when an ask reaches the
    elicitation handler, or when the call returns its result."""

    async def on_ask(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        if message == f"ok? {call.key}":
            call.seen = call.seen or time.monotonic()
        return {}

    async with Client(
        call.engine.url, timeout=call.seconds + DEADLINE_S, elicitation_handler=on_ask
    ) as client:
        tool, arguments = call.arguments()
        result = await client.call_tool(tool, arguments)
        if call.scenario == "close":
            call.seen = time.monotonic()
            assert result.data == f"done:{call.key}", result


async def _poll(call: Call) -> None:
    """Submit, then read with `tasks/get` at the client kind's cadence until a read shows the change."""
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(call.engine.url, timeout=60))
        tool, arguments = call.arguments()
        task = await call_tool_task(client, tool, arguments)
        if call.scenario == "cancel":
            canceller = await stack.enter_async_context(Client(call.engine.url, timeout=60))
            cancelling = asyncio.create_task(_cancel_later(call, _modern_requests(canceller), task.task_id))
        if call.client == "fastmcp":  # a cancel: the transparent path's own poll loop
            with contextlib.suppress(Exception):
                await task.result()
            call.seen = time.monotonic()
        else:
            await _read_until_shown(call, client, task.task_id)
        if call.scenario == "cancel":
            await cancelling
        if call.scenario == "ask":
            await _answer(client, task.task_id)
        elif call.scenario == "progress":
            call.engine.marks.mark(call.key, "release")


class Sep1686Session:
    """A raw 2025-11-25 streamable-HTTP session, as a client of that era's tasks holds one."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        self._id = 0

    async def open(self) -> Sep1686Session:
        info = {"name": "sep1686-bench", "version": "1"}
        await self.request(
            "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}
        )
        self.headers["Mcp-Protocol-Version"] = "2025-11-25"
        await self.http.post(
            self.url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        return self

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._id += 1
        message = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        response = await self.http.post(self.url, headers=self.headers, json=message)
        if (session_id := response.headers.get("mcp-session-id")) is not None:
            self.headers["Mcp-Session-Id"] = session_id
        data = [line for line in response.text.splitlines() if line.startswith("data:")] or [response.text]
        answer = json.loads(data[-1].removeprefix("data:"))
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]


async def _poll_sep1686(call: Call) -> None:
    """A 2025-11-25 task: submit with `params.task`, `tasks/get` at each advertised `pollInterval`
    until a read shows the change; then `tasks/result` for a close, `tasks/cancel` for an ask."""
    async with httpx2.AsyncClient(timeout=DEADLINE_S) as http:
        session = await Sep1686Session(http, call.engine.url).open()
        tool, arguments = call.arguments()
        created = await session.request("tools/call", {"name": tool, "arguments": arguments, "task": {}})
        task_id = created["task"]["taskId"]
        if call.scenario == "cancel":
            canceller = await Sep1686Session(http, call.engine.url).open()
            cancelling = asyncio.create_task(_cancel_later(call, canceller.request, task_id))
        while not call.shows(
            status := _as_task_status(await session.request("tasks/get", {"taskId": task_id}))
        ):
            if status.status in ("completed", "failed", "cancelled"):
                raise RuntimeError(f"{call.key} closed {status.status} before its change: {status}")
            await asyncio.sleep((status.poll_interval_ms or DEFAULT_POLL_S * 1000) / 1000)
        call.seen = time.monotonic()
        if call.scenario == "close":
            await session.request("tasks/result", {"taskId": task_id})
        elif call.scenario == "cancel":
            await cancelling
        elif call.scenario == "ask":
            await session.request("tasks/cancel", {"taskId": task_id})
        else:
            call.engine.marks.mark(call.key, "release")


def _as_task_status(task: dict[str, Any]) -> ClientGetTaskResult:
    """A 2025-11-25 `Task` read as the fields `Call.shows` compares."""
    fields = {"ttlMs": task.get("ttl"), "pollIntervalMs": task.get("pollInterval"), "resultType": "complete"}
    return ClientGetTaskResult.model_validate({**task, **fields})


async def _read_until_shown(call: Call, client: Client, task_id: str) -> None:
    while True:
        status = await tasks_get(client, task_id)
        if call.shows(status):
            call.seen = time.monotonic()
            return
        if status.status in ("completed", "failed", "cancelled"):
            raise RuntimeError(f"{call.key} closed {status.status} before its change: {status}")
        advertised = (status.poll_interval_ms or DEFAULT_POLL_S * 1000) / 1000
        await asyncio.sleep(advertised if call.client == "fixed-interval" else DEFAULT_POLL_S)


async def _cancel_later(
    call: Call, cancel: Callable[[str, dict[str, Any]], Awaitable[Any]], task_id: str
) -> None:
    """Cancel through another client (its `cancel(method, params)`) once the body has run
    `call.seconds`; when it was acknowledged."""
    await call.engine.marks.wait_started(call.key, timeout=DEADLINE_S)
    await asyncio.sleep(call.seconds)
    await cancel("tasks/cancel", {"taskId": task_id})
    call.changed = time.monotonic()


def _modern_requests(client: Client) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """`client`'s `tasks/cancel` as a `(method, params)` call, for `_cancel_later`."""

    async def request(method: str, params: dict[str, Any]) -> Any:
        assert method == "tasks/cancel"
        return await tasks_cancel(client, params["taskId"])

    return request


async def _answer(client: Client, task_id: str) -> None:
    """Accept the ask (the server names its questions: read them back), so the task can end."""
    await tasks_update(client, task_id, accept_every_ask(await tasks_get(client, task_id)))


def build_calls(engines: list[Engine], scenario: str, args: argparse.Namespace) -> list[Call]:
    """`--calls` calls per engine and client kind, their changes spread over `--phase` seconds."""
    clients = [c for c in args.clients if not (scenario == "progress" and c == "fastmcp")]
    return [
        Call(
            engine,
            client,
            scenario,
            f"{scenario}-{engine.kind}-{client}-{i}",
            args.body + args.phase * i / args.calls,
        )
        for engine in engines
        for client in clients
        if not (client == "sep1686" and engine.kind != "temporal")
        for i in range(args.calls)
    ]


async def run_scenario(engines: list[Engine], scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every call of `scenario` at once; freshness by engine and client kind, and Temporal requests."""
    calls = build_calls(engines, scenario, args)
    before = {engine.kind: await engine.calls() for engine in engines}
    began = time.monotonic()
    outcomes = await asyncio.gather(*(run_call(call) for call in calls), return_exceptions=True)
    elapsed = time.monotonic() - began
    failures = [
        f"{call.key}: {outcome!r}"[:300] for call, outcome in zip(calls, outcomes) if outcome is not None
    ]
    report: dict[str, Any] = {"seconds": round(elapsed, 1), "failures": failures[:10], "engines": {}}
    for engine in engines:
        ours = [call for call in calls if call.engine is engine]
        report["engines"][engine.kind] = {
            "freshness_s": {
                client: percentiles(
                    [c.seen - c.changed for c in ours if c.client == client and c.seen and c.changed]
                )
                for client in args.clients
                if any(c.client == client for c in ours)
            },
            **await _requests(engine, before[engine.kind], len(ours), elapsed),
        }
    return report


async def _requests(
    engine: Engine, before: dict[str, dict[str, int]], tasks: int, seconds: float
) -> dict[str, Any]:
    """Temporal requests of `engine` since `before`, per task per 30 s by kind (all, and the API server's)."""
    if not engine.metrics:
        return {}
    by_role = {role: Counter(ops) - Counter(before[role]) for role, ops in (await engine.calls()).items()}
    every = sum(by_role.values(), Counter())
    return {
        "temporal_requests_by_process": {role: dict(sorted(ops.items())) for role, ops in by_role.items()},
        "per_task_per_30s_by_kind": per_task_per_30s_by_kind(every, tasks, seconds),
        "per_task_per_30s_by_kind_api_server": per_task_per_30s_by_kind(
            by_role["api server"], tasks, seconds
        ),
        "per_task_per_30s": round(sum(every.values()) * 30 / seconds / tasks, 3),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "freshness-children.log"
    log.write_text("")
    engines: list[Engine] = []
    slots = args.calls * len(args.clients) + 10
    async with dev_server() as dev:
        backends = Backends(dev.address, process_tree(dev.server.pid), None, [])
        try:
            for kind in args.engines:
                engines.append(await start_engine(kind, backends, dev.state / kind, log, slots))
            report: dict[str, Any] = {"scenarios": {}}
            for scenario in args.changes:
                print(f"change {scenario}", flush=True)
                report["scenarios"][scenario] = await run_scenario(engines, scenario, args)
                print(json.dumps(report["scenarios"][scenario]["engines"]), flush=True)
            return report
        finally:
            for engine in engines:
                await engine.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--body", type=float, default=75.0, help="seconds a body runs before its change")
    parser.add_argument("--calls", type=int, default=8, help="calls per engine, client kind and change")
    parser.add_argument("--phase", type=float, default=5.0, help="seconds the calls' changes spread over")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument(
        "--changes", "--scenarios", dest="changes", nargs="+", choices=SCENARIOS, default=list(SCENARIOS)
    )
