"""How fast does a parked task resume once its caller answers?

Runs one task through `--rounds` in-task input rounds on the run's dev server, with the
worker in this process and a real
`fastmcp.Client` over the in-memory transport. For each round it measures, from the
moment `tasks/update` returned its ack for the final answer:

- to the next leg's tool body starting (clock read inside the body, same process);
- to the first `tasks/get` reporting `working` (tight polling).

It also reports the ack itself (update sent -> ack). The ack waits until the workflow
shows the answer applied, so the leg may start before the ack returns; that shows up
as a negative "ack -> leg start".

Then, end to end through `client.call_tool` with an elicitation handler (the client
polls and answers as any FastMCP client does), `--samples` times each: a tool whose legs
run `LEG_SECONDS` and ask, `ASKS` times, before a last leg returns (1.2 s of legs); and
a tool that asks at once, then returns (one round, no leg time).

    .venv/bin/python -m bench run input_roundtrip [--rounds 30] [--samples 7]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult

from bench.bench_server import ask_ok
from bench.drivers import tasks_update
from bench.harness import dev_server, task_server
from bench.metrics import percentiles, percentiles_ms

QUESTION = (
    "How fast does a parked task resume once its caller answers, and what does a round of input cost "
    "end to end?"
)
QUICK = {"rounds": 5, "samples": 2}
LEG_HOLD = 0.1  # each resumed leg stays `working` this long before asking again
POLL = 0.002
ASKS = 4
LEG_SECONDS = 0.3


def _ask(n: int) -> InputRequiredResult:
    return ask_ok(f"round {n}?", {"value": {"type": "string"}}, request_state=str(n))


def _server(address: str) -> FastMCP:
    """A FastMCP server with the extension and its worker, on a task queue of its own."""
    return task_server(address=address)


async def _measure(address: str, rounds_of_input: int) -> dict[str, list[float]]:
    leg_started: list[float] = []

    mcp = _server(address)

    @mcp.tool(task=True)
    async def rounds(ctx: Context) -> str | InputRequiredResult:
        leg_started.append(time.perf_counter())
        done = int(ctx.request_state or 0)
        if done:
            await asyncio.sleep(LEG_HOLD)
        return _ask(done + 1) if done < rounds_of_input else "done"

    figures: dict[str, list[float]] = {
        "update sent -> ack": [],
        "ack -> leg start": [],
        "ack -> get working": [],
    }
    async with Client(mcp) as client:
        task = await call_tool_task(client, "rounds")
        answered: set[str] = set()
        for n in range(rounds_of_input):
            while True:
                current = await task.status()
                keys = set(current.input_requests or {}) - answered
                if current.status == "input_required" and keys:
                    break
                await asyncio.sleep(POLL)
            (key,) = keys
            answered.add(key)
            answer = {key: {"action": "accept", "content": {"value": "y"}}}
            sent = time.perf_counter()
            await tasks_update(client, task.task_id, answer)
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


async def _end_to_end(address: str, samples: int) -> dict[str, list[float]]:
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
        for _ in range(samples):
            for name, tool in zip(figures, ("four_rounds", "asks_at_once")):
                began = time.perf_counter()
                result = await client.call_tool(tool)
                figures[name].append(time.perf_counter() - began)
                assert result.data == "done", result
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=30, help="input rounds of the one measured task")
    parser.add_argument("--samples", type=int, default=7, help="end-to-end calls of each tool")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server() as temporal:
        rounds = await _measure(temporal.address, args.rounds)
        end_to_end = await _end_to_end(temporal.address, args.samples)
    return {
        "rounds_ms": {name: percentiles_ms(samples) for name, samples in rounds.items()},
        "end_to_end_s": {name: percentiles(samples, digits=3) for name, samples in end_to_end.items()},
    }
