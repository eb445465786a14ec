"""How fast does a parked task resume once its caller answers?

Runs one task through ROUNDS in-task input rounds on a fresh local Temporal dev server
(started here, stopped in `finally`), with the worker in this process and a real
`fastmcp.Client` over the in-memory transport. For each round it measures, from the
moment `tasks/update` returned its ack for the final answer:

- to the next leg's tool body starting (clock read inside the body, same process);
- to the first `tasks/get` reporting `working` (tight polling).

It also reports the ack itself (update sent -> ack). The ack waits until the workflow
shows the answer applied, so the leg may start before the ack returns; that shows up
as a negative "ack -> leg start".

    .venv/bin/python bench/input_roundtrip.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from mcp_types import ElicitRequest, InputRequiredResult, Result

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver._server import start_dev_server

ROUNDS = 30
LEG_HOLD = 0.1  # each resumed leg stays `working` this long before asking again
POLL = 0.002


def _ask(n: int) -> InputRequiredResult:
    return InputRequiredResult(
        result_type="input_required",
        input_requests={
            "q": ElicitRequest(
                method="elicitation/create",
                params={
                    "mode": "form",
                    "message": f"round {n}?",
                    "requestedSchema": {"type": "object", "properties": {"value": {"type": "string"}}},
                },
            )
        },
        request_state=str(n),
    )


async def _measure(address: str) -> dict[str, list[float]]:
    leg_started: list[float] = []

    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}"))

    @mcp.tool(task=True)
    async def rounds(ctx: Context) -> str | InputRequiredResult:
        leg_started.append(time.perf_counter())
        done = int(ctx.request_state or 0)
        if done:
            await asyncio.sleep(LEG_HOLD)
        return _ask(done + 1) if done < ROUNDS else "done"

    figures: dict[str, list[float]] = {
        "update sent -> ack": [],
        "ack -> leg start": [],
        "ack -> get working": [],
    }
    async with Client(mcp) as client:
        task = await call_tool_task(client, "rounds")
        answered: set[str] = set()
        for n in range(ROUNDS):
            while True:
                current = await task.status()
                keys = set(current.input_requests or {}) - answered
                if current.status == "input_required" and keys:
                    break
                await asyncio.sleep(POLL)
            (key,) = keys
            answered.add(key)
            update = UpdateTaskRequest(
                params=UpdateTaskRequestParams(
                    task_id=task.task_id,
                    input_responses={key: {"action": "accept", "content": {"value": "y"}}},
                )
            )
            sent = time.perf_counter()
            await client.session.send_request(update, Result)
            acked = time.perf_counter()
            while (await task.status()).status != "working":
                await asyncio.sleep(POLL)
            working = time.perf_counter()
            while len(leg_started) < n + 2:
                await asyncio.sleep(POLL)
            figures["update sent -> ack"].append(acked - sent)
            figures["ack -> leg start"].append(leg_started[n + 1] - acked)
            figures["ack -> get working"].append(working - acked)
        final = await task.wait(timeout=60)
        assert final.status == "completed", final
    return figures


def _report(figures: dict[str, list[float]]) -> None:
    print(f"{ROUNDS} rounds, one task, worker in process, local dev server")
    for name, samples in figures.items():
        ms = [s * 1000 for s in samples]
        p95 = statistics.quantiles(ms, n=20, method="inclusive")[18]
        print(f"  {name:<20} p50 {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms   max {max(ms):7.1f} ms")


def main() -> None:
    server = start_dev_server(ui=False)
    try:
        _report(asyncio.run(_measure(server.address)))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
