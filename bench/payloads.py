"""What a task costs in history events, and how large its payloads may be.

    .venv/bin/python bench/payloads.py events            # history events of a trivial task
    .venv/bin/python bench/payloads.py limits            # largest sizes each store/key keeps
    .venv/bin/python bench/payloads.py run STORE KEY KIND N [STORE KEY KIND N ...]

`limits` applies the engine's own size checks (no server). `run` proves a size end to
end on a fresh dev server with a real `fastmcp.Client`: STORE is `none`, a folder
(`file:///path`) or `s3://bucket/prefix` (AWS_* variables point at the endpoint), KEY
is `key` or `no`, KIND is `argument`, `answer` or `result`, N characters.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from mcp_types import ElicitRequest, InputRequiredResult
from temporalio.api.enums.v1 import EventType

from fastmcp_temporal import TemporalTasksExtension
from fastmcp_temporal.connection._converter import encrypted_data_converter
from fastmcp_temporal.connection._sizes import encoded_size, limits_of
from fastmcp_temporal.devserver import start_dev_server
from fastmcp_temporal.server._scope import ANONYMOUS_SCOPE_TAG, workflow_id
from fastmcp_temporal.workflows.models import InputAnswers, LegOutcome, LegPolicy, TaskInput, ToolCall

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
            schema = {"type": "object", "properties": {"v": {"type": "string"}}}
            question = ElicitRequest(
                method="elicitation/create",
                params={"mode": "form", "message": "?", "requestedSchema": schema},
            )
            return InputRequiredResult(result_type="input_required", input_requests={"q": question})
        return str(len(blob) + len(ctx.input_responses["q"].content["v"]))

    return mcp


def _extension(address: str, **settings: Any) -> TemporalTasksExtension:
    return TemporalTasksExtension(
        address=address, task_queue=f"bench-{uuid.uuid4().hex[:8]}", shutdown_grace=timedelta(0), **settings
    )


async def events(address: str) -> None:
    extension = _extension(address)
    async with Client(_server(extension, [])) as client:
        task = await call_tool_task(client, "square", {"n": 3})
        await task.result()
        assert extension.client is not None
        handle = extension.client.get_workflow_handle(workflow_id(ANONYMOUS_SCOPE_TAG, task.task_id))
        history = await handle.fetch_history()
    names = [EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events]
    print(f"{len(names)} events: {', '.join(names)}")


async def limits() -> None:
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
            print(
                f"{store:8} key={'yes' if key else 'no':3}  argument {argument_max:>11,}  "
                f"answer {answer_max:>11,}  result {result_max:>11,}  (characters)"
            )


async def _largest(fits: Any) -> int:
    low, high = 0, 200 * MIB
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if await fits(middle) else (low, middle - 1)
    return low


async def run(address: str, store: str, key: str, kind: str, size: int) -> None:
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
    print(
        f"{store} key={key} {kind} {size:,}: {outcome}; body ran {len(runs)}x, {time.monotonic() - started:.1f}s"
    )


def main(argv: list[str]) -> None:
    command, rest = argv[0], argv[1:]
    if command == "limits":
        asyncio.run(limits())
        return
    server = start_dev_server(ui=False)
    try:
        if command == "events":
            asyncio.run(events(server.address))
        for index in range(0, len(rest) if command == "run" else 0, 4):
            store, key, kind, size = rest[index : index + 4]
            asyncio.run(run(server.address, store, key, kind, int(size)))
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or ["events"])
