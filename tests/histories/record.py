"""Record a release's task histories, which every later release must replay.

A task in flight replays its history on whatever code the next deploy brings, so the
histories of every task shape, recorded on each release that changes the workflow,
are committed under `tests/histories/<version>/` and replayed by
`tests/test_replay.py`. Run on a checkout of the release, from the repo's root:

    .venv/bin/python tests/histories/record.py 0.2.0 [FOLDER]

It starts its own dev server (stopped when it ends) and writes one JSON history per
shape to FOLDER (default `tests/histories/<version>/`; another for histories not to
commit, such as those `python -m bench run actions` counts); a shape whose task continued as new
writes one file per run. It uses only the public API (and the dev server launcher,
wherever the release keeps it), so it runs on an older release's code too: put its
unpacked wheel first on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client, Context, FastMCP
from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from mcp_types import ElicitRequest, InputRequiredResult, Result
from temporalio.client import Client as TemporalClient

from fastmcp_temporal import TemporalTasksExtension, execution_policy

try:
    from fastmcp_temporal.devserver._server import start_dev_server
except ImportError:  # 0.2.0 kept it at the package's top
    from fastmcp_temporal._devserver import start_dev_server  # type: ignore[no-redef]


class NoTasksClient(Client):
    """A client that does not opt in to tasks: its calls are durable synchronous calls."""

    _auto_internal_extensions = False


def ask(*keys: str, state: str | None = None) -> InputRequiredResult:
    schema = {"type": "object", "properties": {"value": {"type": "string"}}}
    questions = {key: ElicitRequest(method="elicitation/create", params={"mode": "form", "message": key,
                                                                         "requestedSchema": schema})
                 for key in keys}
    return InputRequiredResult(result_type="input_required", input_requests=questions, request_state=state)


async def tasks_update(client: Client, task_id: str, responses: dict[str, Any]) -> Result:
    params = UpdateTaskRequestParams(task_id=task_id, input_responses=responses)
    return await client.session.send_request(UpdateTaskRequest(params=params), Result)


def accept(value: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"value": value}}


async def square(n: int) -> int:
    return n * n


async def stall() -> str:
    """Blocks the event loop past the heartbeat timeout: its outcome arrives late, by signal."""
    time.sleep(4)
    return "stalled"


async def greet(ctx: Context) -> str | InputRequiredResult:
    if not ctx.input_responses:
        return ask("name")
    return f"hello {ctx.input_responses['name'].content['value']}"


async def three_rounds(ctx: Context) -> str | InputRequiredResult:
    round_ = int(ctx.request_state or 0)
    if round_ < 3:
        return ask(f"answer{round_}", state=str(round_ + 1))
    return "three answers"


async def five_questions(ctx: Context) -> str | InputRequiredResult:
    """Answered one question per update, past the recorder's 20-event limit: partial answers,
    and (from 0.3.0) a task that continues as new inside the round."""
    if not ctx.input_responses:
        return ask("q1", "q2", "q3", "q4", "q5")
    return f"{len(ctx.input_responses)} answers"


async def is_error() -> str:
    raise RuntimeError("the tool failed")


@execution_policy(start_to_close_timeout=timedelta(seconds=1), maximum_attempts=1)
async def overran() -> str:
    await anyio.sleep(30)
    return "never"


async def sleeper() -> str:
    await anyio.sleep(60)
    return "late"


@execution_policy(leg="local")
async def local_square(n: int) -> int:
    return n * n


async def answer_all(client: Client, task_id: str, task: Any, rounds: int) -> None:
    for _ in range(rounds):
        status = await task.wait(state="input_required", timeout=30)
        (key,) = status.input_requests
        await tasks_update(client, task_id, {key: accept("Ada")})


async def answer_one_by_one(client: Client, task_id: str, task: Any) -> None:
    status = await task.wait(state="input_required", timeout=30)
    for key in status.input_requests:
        await tasks_update(client, task_id, {key: accept("Ada")})
    await task.wait(timeout=30)


def main(version: str, folder: Path | None = None) -> None:
    server = start_dev_server(ui=False)
    try:
        asyncio.run(record(folder or Path(__file__).parent / version, server.address))
    finally:
        server.stop()


async def record(folder: Path, address: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if True:
        options: dict[str, Any] = {
            "address": address,
            "task_queue": f"record-{uuid.uuid4().hex[:8]}",
            "heartbeat_timeout": timedelta(seconds=2),
            "shutdown_grace": timedelta(0),
        }
        main = TemporalTasksExtension(**options, task_ttl=timedelta(seconds=3), history_events_limit=20,
                                      sync_calls="workflow")
        mcp = FastMCP("record")
        mcp.add_extension(main)
        for tool in (square, greet, three_rounds, is_error, overran, sleeper, local_square):
            mcp.tool(tool, task=True)
        shapes: dict[str, tuple[str, str]] = {}
        async with Client(mcp) as client:
            done = await call_tool_task(client, "square", {"n": 3})
            errored = await call_tool_task(client, "is_error")
            failed = await call_tool_task(client, "overran")
            local = await call_tool_task(client, "local_square", {"n": 4})
            one = await call_tool_task(client, "greet")
            three = await call_tool_task(client, "three_rounds")
            parked = await call_tool_task(client, "greet")
            expired = await call_tool_task(client, "greet")
            running = await call_tool_task(client, "sleeper")
            await answer_all(client, one.task_id, one, 1)
            await answer_all(client, three.task_id, three, 3)
            await parked.wait(state="input_required", timeout=30)
            await parked.cancel()
            await running.wait(state="working", timeout=30)
            await anyio.sleep(1)  # the leg has started: this records a cancel of a running leg
            await running.cancel()
            for name, task in [("completed", done), ("is_error", errored), ("failed", failed),
                               ("local_leg", local), ("one_round", one), ("three_rounds_continued", three),
                               ("cancelled_parked", parked), ("expired_parked", expired),
                               ("cancelled_running", running)]:
                shapes[name] = ("task", task.task_id)
            temporal = await TemporalClient.connect(address)
            for name, (kind, task_id) in shapes.items():  # while this server's worker still runs them
                await write_runs(temporal, folder, name, f"mcp-{kind}/anon/{task_id}")
        async with NoTasksClient(mcp) as plain:
            result = await plain.call_tool("square", {"n": 5})
            assert result.data == 25
        calls = [w async for w in temporal.list_workflows(f"TaskQueue='{options['task_queue']}'")]
        (call,) = [w for w in calls if w.id.startswith("mcp-call/")]
        await write_runs(temporal, folder, "sync_call", call.id)
        # With the default TTL: a round answered one update at a time may take longer than 3 s.
        questions = FastMCP("record-questions")
        queue = f"questions-{uuid.uuid4().hex[:8]}"
        questions.add_extension(TemporalTasksExtension(**{**options, "task_queue": queue}, history_events_limit=20))
        questions.tool(five_questions, task=True)
        async with Client(questions) as client:
            five = await call_tool_task(client, "five_questions")
            await answer_one_by_one(client, five.task_id, five)
            await write_runs(temporal, folder, "five_answers_one_by_one", f"mcp-task/anon/{five.task_id}")
        # Alone, since it blocks the whole process: the outcome of a leg Temporal gave up on.
        stalling = FastMCP("record-late")
        stalling.add_extension(TemporalTasksExtension(**{**options, "task_queue": f"late-{uuid.uuid4().hex[:8]}"}))
        stalling.tool(stall, task=True)
        async with Client(stalling) as client:
            late = await call_tool_task(client, "stall")
            await late.result()
        await write_runs(temporal, folder, "late_leg_outcome", f"mcp-task/anon/{late.task_id}")


async def write_runs(temporal: TemporalClient, folder: Path, name: str, wf_id: str) -> None:
    """Every run of the workflow, once its last run has closed."""
    with contextlib.suppress(Exception):
        await temporal.get_workflow_handle(wf_id).result()
    runs = [w async for w in temporal.list_workflows(f"WorkflowId='{wf_id}'")]
    runs.sort(key=lambda w: w.start_time)
    for index, run in enumerate(runs):
        history = await temporal.get_workflow_handle(wf_id, run_id=run.run_id).fetch_history()
        suffix = f"-run{index + 1}" if len(runs) > 1 else ""
        (folder / f"{name}{suffix}.json").write_text(history.to_json())
        print(f"{name}{suffix}: {len(history.events)} events")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else None)
