"""A FastMCP server for the fault tests: its tools log which process ran which attempt.

Loaded three ways (by this release's code, or by an earlier release's for the upgrade test): by `fastmcp-temporal worker tests/fault_app.py` (extra worker
processes), by `python tests/fault_app.py` (an HTTP MCP server with an embedded
worker, on $PORT), and imported by the tests, which build an API-only twin with
`build_server(worker=False)` to submit and read tasks.

Temporal comes from the environment (FASTMCP_TEMPORAL_ADDRESS, FASTMCP_TEMPORAL_TASK_QUEUE);
heartbeats time out after 2 s and attempts are unlimited, so a killed worker's leg is
retried quickly and never gives up. Every tool body appends one JSON line per event
(with a wall-clock `t`) to `$FAULT_LOG_DIR/<pid>.jsonl` (nothing when it is unset).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from mcp_types import ElicitRequest, InputRequiredResult
from temporalio import activity

import fastmcp_temporal
from fastmcp_temporal import TemporalTasksExtension, checkpoint, last_checkpoint

HEARTBEAT_TIMEOUT = timedelta(seconds=2)


def record(event: str, key: str, **fields: Any) -> None:
    """Append one event of this process to the attempt log."""
    log_dir = os.environ.get("FAULT_LOG_DIR")
    if not log_dir:
        return
    attempt = activity.info().attempt
    line = {
        "event": event, "key": key, "pid": os.getpid(), "attempt": attempt, "t": time.time(),
        "code": fastmcp_temporal.__file__, **fields,
    }
    with (Path(log_dir) / f"{os.getpid()}.jsonl").open("a") as log:
        log.write(json.dumps(line) + "\n")


def build_server(**extension_options: Any) -> FastMCP:
    options: dict[str, Any] = {
        "heartbeat_timeout": HEARTBEAT_TIMEOUT,
        "maximum_attempts": 0,
        "shutdown_grace": timedelta(0),
        "ui": False,
        **extension_options,
    }
    server = FastMCP("fault-app")
    server.add_extension(TemporalTasksExtension(**options))

    @server.tool(task=True)
    async def count(key: str, to: int, step: float = 0.25) -> dict[str, Any]:
        """Count to `to`, one step every `step` seconds, resuming from the last checkpoint."""
        resumed_from = last_checkpoint()
        record("start", key, resumed_from=resumed_from)
        for done in range((resumed_from or 0) + 1, to + 1):
            await asyncio.sleep(step)
            checkpoint(done)
            record("step", key, done=done)
        return {"key": key, "counted": to}

    @server.tool(task=True)
    async def confirm(key: str, ctx: Context) -> str | InputRequiredResult:
        """Ask for a word, then answer with it: one leg before the answer and one after."""
        record("start", key)
        if ctx.input_responses is None:
            schema = {"type": "object", "properties": {"value": {"type": "string"}}}
            word = ElicitRequest(method="elicitation/create", params={"mode": "form", "message": key,
                                                                      "requestedSchema": schema})
            return InputRequiredResult(result_type="input_required", input_requests={"word": word})
        return f"{key}: {ctx.input_responses['word'].content['value']}"

    @server.tool(task=True)
    async def chatty(key: str, steps: int, ctx: Context) -> str:
        """Log and report each step, then say it waits, until its caller has seen that (`<key>.seen`)."""
        record("start", key)
        for done in range(1, steps + 1):
            await ctx.debug(f"{key} debug {done}")
            await ctx.info(f"{key} step {done}")
            await ctx.report_progress(done, steps, f"{key} {done}/{steps}")
        await ctx.warning(f"{key} waits")
        await _seen(key)
        return f"{key} done"

    @server.tool(task=True)
    async def interview(key: str, ctx: Context) -> str | InputRequiredResult:
        """Two rounds: a name and a colour, then whether the caller is sure; answers with what it was told."""
        record("start", key, round=ctx.request_state)
        answers = ctx.input_responses
        if answers is None:
            asks = {"name": _question(f"{key} name?"), "colour": _question(f"{key} colour?")}
            return InputRequiredResult(result_type="input_required", input_requests=asks, request_state="round-2")
        said = ",".join(f"{tool_key}={_said(answer)}" for tool_key, answer in sorted(answers.items()))
        if ctx.request_state == "round-2":
            asks = {"sure": _question(f"{key} sure?")}
            return InputRequiredResult(result_type="input_required", input_requests=asks, request_state=said)
        return f"{ctx.request_state};{said}"

    @server.tool(task=True)
    async def square(n: int, work: float = 0.1) -> int:
        """n squared, after `work` seconds."""
        record("start", str(n))
        await asyncio.sleep(work)
        return n * n

    @server.tool(task=True)
    async def hold(key: str, seconds: float = 60) -> str:
        """Wait `seconds`, logging the moment a cancel reaches the body."""
        record("start", key)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            record("cancelled", key)
            raise
        return key

    @server.tool(task=True)
    async def stall(key: str, seconds: float) -> dict[str, Any]:
        """Block the event loop for `seconds` on the first run of `key` (a blocking driver call);
        any later run waits without blocking, so it can be cancelled."""
        first = _first_run(key)
        record("start", key, first=first)
        if first:
            time.sleep(seconds)
        else:
            try:
                await asyncio.sleep(DEADLINE_FOR_RETRIES)
            except asyncio.CancelledError:
                record("cancelled", key)
                raise
        record("finish", key)
        return {"pid": os.getpid(), "first": first}

    return server


DEADLINE_FOR_RETRIES = 30


def _question(text: str) -> ElicitRequest:
    schema = {"type": "object", "properties": {"value": {"type": "string"}}}
    return ElicitRequest(method="elicitation/create", params={"mode": "form", "message": text, "requestedSchema": schema})


def _said(answer: Any) -> str:
    return answer.content["value"] if answer.action == "accept" else answer.action


async def _seen(key: str) -> None:
    """Wait until the caller has written `<key>.seen` beside the attempt log (at once when there is none)."""
    log_dir = os.environ.get("FAULT_LOG_DIR")
    deadline = time.monotonic() + DEADLINE_FOR_RETRIES
    while log_dir and not (Path(log_dir) / f"{key}.seen").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the caller never saw {key!r} wait")
        await asyncio.sleep(0.05)


def _first_run(key: str) -> bool:
    """True for exactly one run of `key` across processes (a marker file beside the log)."""
    log_dir = os.environ.get("FAULT_LOG_DIR")
    if not log_dir:
        return True
    try:
        (Path(log_dir) / f"{key}.first").touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


mcp = build_server()


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(os.environ["PORT"]), show_banner=False)
