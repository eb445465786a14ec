"""How fast a pushed status reaches a listening client: the tool's return -> `notifications/tasks`.

    .venv/bin/python bench/push_latency.py [--rounds 20] [--batch 50] [--watched-tasks N]
        [--out bench/results/push_latency.json]

Starts its own dev server and one FastMCP server with the extension and its embedded
worker, served over streamable HTTP on loopback; the Python `mcp` client calls a task
tool, opens `subscriptions/listen` for the task's id, answers the pushed ask with
`tasks/update`, and never sends `tasks/get`.
Measures to the matching `notifications/tasks` arriving at the client, on one machine's
clock, from the change in Temporal (`from_temporal`: the time of the history event that
records it, the ask's memo upsert or the close) and from the tool body's return
(`from_tool`: also the worker's and the workflow's turn): `--rounds` single tasks, one at a
time (one task on the server), then `--batch` tasks at once whose ends are spread over 5 s.
`--watched-tasks 1` lets the server long-poll one task's history at a time, so every other
listened task is followed through the change feed (one visibility query per
`change_feed_interval` for the tasks that changed), as a server past its long-poll cap
follows its tasks. Target, from the change in Temporal: p50 <= 0.3 s, p95 <= 1 s (issue 38).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timezone
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp_types import (
    ElicitRequest,
    InputRequiredResult,
    NotificationParams,
    Result,
    SubscriptionFilter,
    SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id

SPREAD = 5.0
temporal: TemporalClient
returned: dict[tuple[str, str], float] = {}  # (key, "ask" | "close") -> when the body returned


class _Params(NotificationParams):
    model_config = ConfigDict(extra="allow")


class Arrivals(ClientExtension):
    identifier = "com.example/push-bench"

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], float] = {}  # (task id, status) -> first arrival
        self.asks: dict[str, list[str]] = {}  # task id -> the keys of its pushed ask

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=_Params, handler=self._arrived)]

    async def _arrived(self, params: _Params) -> None:
        extra = params.model_extra or {}
        self.at.setdefault((extra["taskId"], extra["status"]), time.time())
        if extra["status"] == "input_required":
            self.asks[extra["taskId"]] = list(extra["inputRequests"])


async def asks_then_sleeps(ctx: Context, key: str, delay: float) -> str | InputRequiredResult:
    """Asks at once; once answered, sleeps `delay` and returns."""
    if ctx.input_responses is None:
        returned[(key, "ask")] = time.time()
        question = ElicitRequest(method="elicitation/create", params={
            "mode": "form", "message": "go?", "requestedSchema": {"type": "object", "properties": {}}})
        return InputRequiredResult(result_type="input_required", input_requests={"go": question})
    await anyio.sleep(delay)
    returned[(key, "close")] = time.time()
    return "done"


async def listen(client: Client, task_id: str) -> None:
    notifications = SubscriptionFilter.model_validate({"taskIds": [task_id]})
    request = SubscriptionsListenRequest(params=SubscriptionsListenRequestParams(notifications=notifications))
    await client.session.send_request(request, SubscriptionsListenResult)


async def one_task(client: Client, arrivals: Arrivals, key: str, delay: float) -> dict[str, float]:
    """The ask's and the close's push latency for one task, from the tool and from Temporal."""
    task = await call_tool_task(client, "asks_then_sleeps", {"key": key, "delay": delay})
    async with anyio.create_task_group() as group:
        group.start_soon(listen, client, task.task_id)
        with anyio.fail_after(60):
            while (task.task_id, "input_required") not in arrivals.at:
                await anyio.sleep(0.005)
        asked = arrivals.at[(task.task_id, "input_required")]
        (go,) = arrivals.asks[task.task_id]
        answer = UpdateTaskRequestParams(task_id=task.task_id, input_responses={go: {"action": "accept", "content": {}}})
        await client.session.send_request(UpdateTaskRequest(params=answer), Result)
        with anyio.fail_after(60):
            while (task.task_id, "completed") not in arrivals.at:
                await anyio.sleep(0.005)
        group.cancel_scope.cancel()
    closed = arrivals.at[(task.task_id, "completed")]
    ask_event, close_event = await change_times(task.task_id, returned[(key, "ask")])
    return {"ask_from_tool": asked - returned[(key, "ask")], "close_from_tool": closed - returned[(key, "close")],
            "ask_from_temporal": asked - ask_event, "close_from_temporal": closed - close_event}


async def change_times(task_id: str, asked_at: float) -> tuple[float, float]:
    """When Temporal recorded the task's ask (its memo upsert) and its close."""
    handle = temporal.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task_id))
    events = (await handle.fetch_history()).events
    times = [(event.event_type, event.event_time.ToDatetime(tzinfo=timezone.utc).timestamp()) for event in events]
    ask = min(t for kind, t in times if kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED and t >= asked_at)
    close = next(t for kind, t in times if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    return ask, close


@asynccontextmanager
async def serving(address: str, settings: dict[str, Any]) -> AsyncIterator[str]:
    import uvicorn

    server = FastMCP("push-bench")
    server.add_extension(TemporalTasksExtension(address=address, task_queue="push-bench", **settings))
    server.tool(asks_then_sleeps, task=True)
    sock = socket.create_server(("127.0.0.1", 0))
    web = uvicorn.Server(uvicorn.Config(server.http_app(), log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as group:
        group.start_soon(web.serve, [sock])
        while not web.started:
            await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        web.should_exit = True


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], 1), "max_ms": round(ms[-1], 1)}


async def main(address: str, rounds: int, batch: int, out: Path, settings: dict[str, Any]) -> None:
    global temporal
    temporal = await TemporalClient.connect(address)
    arrivals = Arrivals()
    results: dict[str, Any] = {"settings": settings}
    async with serving(address, settings) as url:
        client = Client(StreamableHttpTransport(url), extensions=[arrivals])
        async with client:
            single = [await one_task(client, arrivals, f"single-{n}", 0.5) for n in range(rounds)]
            spread: list[dict[str, float]] = []

            async def spread_one(n: int) -> None:
                spread.append(await one_task(client, arrivals, f"batch-{n}", 1 + SPREAD * n / batch))

            async with anyio.create_task_group() as group:
                for n in range(batch):
                    group.start_soon(spread_one, n)
    for name, rows in (("one_task", single), (f"{batch}_tasks", spread)):
        results[name] = {measure: summary([row[measure] for row in rows]) for measure in rows[0]}
    out.write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--watched-tasks", type=int, help="the setting: tasks past it are followed through the feed")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "push_latency.json")
    args = parser.parse_args()
    settings = {} if args.watched_tasks is None else {"watched_tasks": args.watched_tasks}
    dev = start_dev_server(ui=False)
    try:
        anyio.run(main, dev.address, args.rounds, args.batch, args.out, settings)
    finally:
        dev.stop()
