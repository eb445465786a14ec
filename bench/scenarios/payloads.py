"""What a task costs in history events, and how large its payloads may be.

    .venv/bin/python -m bench run payloads [--limits]      # history events of a trivial task (and limits)
    .venv/bin/python -m bench run payloads --sizes STORE KEY KIND N [STORE KEY KIND N ...]

The events: a trivial task's history, event by event. The limits: the largest sizes each store
and key keep, by the engine's own size checks (no server). `--sizes` proves a size end to end on
the run's dev server with a real `fastmcp.Client`: STORE is `none`, a folder (`file:///path`) or
`s3://bucket/prefix` (AWS_* variables point at the endpoint), KEY is `key` or `no`, KIND is
`argument`, `answer` or `result`, N characters.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.api.enums.v1 import EventType

from bench.bench_server import ask_ok
from bench.harness import dev_server
from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._converter import encrypted_data_converter
from fastmcp_temporal.connection._sizes import encoded_size, limits_of
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from fastmcp_temporal.workflows.models import InputAnswers, LegOutcome, LegPolicy, TaskInput, ToolCall

QUESTION = (
    "How many history events does a trivial task make, and how large may its payloads be per store and key?"
)
QUICK: dict[str, Any] = {}
KEY = "a-bench-key-that-is-long-enough-for-fernet"
MIB = 1024 * 1024


def _server(extension: TemporalTasksExtension, runs: list[str]) -> FastMCP:
    mcp = FastMCP("bench-payloads")
    mcp.add_extension(extension)

    @mcp.tool(task=True)
    async def square(n: int) -> int:
        return n * n

    @mcp.tool(task=True)
    async def produce(size: int) -> str:
        runs.append("produce")
        return "r" * size

    @mcp.tool(task=True)
    async def echo(blob: str, ctx: Context) -> str | InputRequiredResult:
        runs.append("echo")
        if ctx.input_responses is None:
            return ask_ok("?", {"v": {"type": "string"}})
        return str(len(blob) + len(ctx.input_responses["q"].content["v"]))

    return mcp


def _extension(address: str, **settings: Any) -> TemporalTasksExtension:
    return TemporalTasksExtension(
        address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}", shutdown_grace=timedelta(0), **settings
    )


async def events(address: str) -> list[str]:
    extension = _extension(address)
    async with Client(_server(extension, [])) as client:
        task = await call_tool_task(client, "square", {"n": 3})
        await task.result()
        assert extension.client is not None
        handle = extension.client.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id))
        history = await handle.fetch_history()
    return [EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events]


async def limits() -> list[dict[str, Any]]:
    """The largest argument, answer and result (characters) each store and key keep."""
    found = []
    snapshot = "s" * 600  # about what an anonymous caller's encoded snapshot weighs
    for store in ("none", "a store"):
        for key in (None, KEY):
            converter = encrypted_data_converter(key, "none" if store == "none" else tempfile.gettempdir())
            bounds = limits_of(converter, 2 * MIB, 50 * MIB)

            def task(n: int) -> TaskInput:
                call = ToolCall("t" * 43, "tool:echo@", {"blob": "a" * n}, snapshot)
                return TaskInput(call, 900_000, LegPolicy(3600, 5))

            base = 0 if bounds.stored else await encoded_size(converter, task(0))

            async def fits(value: Any, extra: int = 0) -> bool:
                return bounds.refusal("x", await encoded_size(converter, value) + extra) is None

            def result(n: int) -> LegOutcome:
                text = "r" * n
                return LegOutcome(
                    result={
                        "content": [{"type": "text", "text": text}],
                        "structuredContent": {"result": text},
                    }
                )

            def answer(n: int) -> InputAnswers:
                return InputAnswers({"k" * 60: {"action": "accept", "content": {"value": "b" * n}}})

            argument_max = await _largest(lambda n: fits(task(n)))
            answer_max = await _largest(lambda n: fits(answer(n), base))
            result_max = await _largest(lambda n: fits(result(n)))
            found.append(
                {
                    "store": store,
                    "key": bool(key),
                    "argument": argument_max,
                    "answer": answer_max,
                    "result": result_max,
                }
            )
    return found


async def _largest(fits: Any) -> int:
    low, high = 0, 200 * MIB
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if await fits(middle) else (low, middle - 1)
    return low


async def one_size(address: str, store: str, key: str, kind: str, size: int) -> dict[str, Any]:
    """Whether a payload of `size` characters goes through end to end, and how many times the body ran."""
    runs: list[str] = []
    extension = _extension(
        address,
        payload_store=store,
        encryption_key=KEY if key == "key" else None,
        heartbeat_timeout=timedelta(seconds=30),
    )
    answer = "y" * (size if kind == "answer" else 10)

    async def answering(message, response_type, params, context):  # noqa: ANN001, ANN202
        return {"v": answer}

    started = time.monotonic()
    async with Client(_server(extension, runs), elicitation_handler=answering) as client:
        try:
            if kind == "result":
                task = await call_tool_task(client, "produce", {"size": size})
            else:
                task = await call_tool_task(
                    client, "echo", {"blob": "z" * (size if kind == "argument" else 10)}
                )
            result = await task.result()
            outcome = "ok" if not result.is_error else f"isError: {result.content[0].text[:100]}"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
    return {
        "store": store,
        "key": key,
        "kind": kind,
        "size": size,
        "outcome": outcome,
        "body_runs": len(runs),
        "seconds": round(time.monotonic() - started, 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limits", action="store_true", help="also find the largest sizes (a minute or more)"
    )
    parser.add_argument(
        "--sizes", nargs="*", default=[], help="STORE KEY KIND N, repeated: sizes proved end to end"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {"limits_characters": await limits()} if args.limits else {}
    async with dev_server(in_memory=True) as temporal:
        names = await events(temporal.address)
        figures["trivial_task_events"] = {"count": len(names), "events": names}
        figures["sizes"] = [
            await one_size(temporal.address, store, key, kind, int(size))
            for store, key, kind, size in zip(*[iter(args.sizes)] * 4)
        ]
    return figures
