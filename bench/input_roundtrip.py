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

Then, end to end through `client.call_tool` with an elicitation handler (the client
polls and answers as any FastMCP client does), `SAMPLES` times each: a tool whose legs
run `LEG_SECONDS` and ask, `ASKS` times, before a last leg returns (1.2 s of legs); and
a tool that asks at once, then returns (one round, no leg time).

    .venv/bin/python bench/input_roundtrip.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from mcp_types import ElicitRequest, InputRequiredResult, Result

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.devserver import start_dev_server

ROUNDS = 30
LEG_HOLD = 0.1  # each resumed leg stays `working` this long before asking again
POLL = 0.002
SAMPLES = 7
ASKS = 4
LEG_SECONDS = 0.3


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


def _server(address: str) -> FastMCP:
    """A FastMCP server with the extension and its worker, on a task queue of its own."""
    mcp = FastMCP("bench")
    mcp.add_extension(TemporalTasksExtension(address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}"))
    return mcp


async def _measure(address: str) -> dict[str, list[float]]:
    leg_started: list[float] = []

    mcp = _server(address)

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


async def _end_to_end(address: str) -> dict[str, list[float]]:
    """Seconds from `call_tool` to its result, for the two tools that ask, through an elicitation handler."""
    mcp = _server(address)

    @mcp.tool(task=True)
    async def four_rounds(ctx: Context) -> str | InputRequiredResult:
        done = int(ctx.request_state or 0)
        if done == ASKS:
            return "done"
        await asyncio.sleep(LEG_SECONDS)
        return _ask(done + 1)

    @mcp.tool(task=True)
    async def asks_at_once(ctx: Context) -> str | InputRequiredResult:
        return "done" if ctx.request_state else _ask(1)

    async def answer(message: str, response_type: Any, params: Any, context: Any) -> dict[str, str]:
        return {"value": "y"}

    figures: dict[str, list[float]] = {f"{ASKS} rounds of {LEG_SECONDS} s legs": [], "asks at once": []}
    async with Client(mcp, elicitation_handler=answer) as client:
        for _ in range(SAMPLES):
            for name, tool in zip(figures, ("four_rounds", "asks_at_once")):
                began = time.perf_counter()
                result = await client.call_tool(tool)
                figures[name].append(time.perf_counter() - began)
                assert result.data == "done", result
    return figures


def _report(figures: dict[str, list[float]]) -> None:
    print(f"{ROUNDS} rounds, one task, worker in process, local dev server")
    for name, samples in figures.items():
        ms = [s * 1000 for s in samples]
        p95 = statistics.quantiles(ms, n=20, method="inclusive")[18]
        print(f"  {name:<20} p50 {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms   max {max(ms):7.1f} ms")


def _report_end_to_end(figures: dict[str, list[float]]) -> None:
    print(f"end to end through an elicitation handler, {SAMPLES} calls each")
    for name, samples in figures.items():
        print(f"  {name:<24} p50 {statistics.median(samples):5.2f} s   max {max(samples):5.2f} s")


def main() -> None:
    server = start_dev_server(ui=False)
    try:
        _report(asyncio.run(_measure(server.address)))
        _report_end_to_end(asyncio.run(_end_to_end(server.address)))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
