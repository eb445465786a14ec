"""Every shape of task history replays on the workflow code: it is deterministic.

`McpTaskWorkflow` runs outside the workflow sandbox, so nothing at run time catches
non-deterministic code in it; replaying real histories does. Tasks that complete,
fail, ask and are answered, and are cancelled run on a real Temporal server; their
histories then replay with `Replayer`, which fails on any command that differs.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from fastmcp import Client, Context
from fastmcp_tasks.client import call_tool_task
from mcp_types import InputRequiredResult
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from fastmcp_temporal import encrypted_data_converter
from fastmcp_temporal.workflows.task import McpTaskWorkflow
from helpers.servers import server_with, square
from helpers.temporal import task_handle, workflow_closed
from helpers.waits import eventually, finished
from helpers.wire import accept, ask, tasks_update

pytestmark = pytest.mark.anyio


async def test_histories_of_every_task_shape_replay(make_extension) -> None:
    started: list[str] = []

    async def greet(ctx: Context) -> str | InputRequiredResult:
        responses = ctx.input_responses
        if not responses:
            return ask("name")
        return f"hello {responses['name'].content['value']}"

    async def broken() -> str:
        raise RuntimeError("boom")

    async def sleeper() -> str:
        started.append("sleeper")
        await anyio.sleep(60)
        return "late"

    extension = make_extension()
    async with Client(server_with(extension, square, greet, broken, sleeper)) as client:
        done = await call_tool_task(client, "square", {"n": 3})
        failed = await call_tool_task(client, "broken")
        asked = await call_tool_task(client, "greet")
        cancelled = await call_tool_task(client, "sleeper")
        await finished(done)
        await finished(failed)
        status = await asked.wait(state="input_required")
        (key,) = status.input_requests
        await tasks_update(client, asked.task_id, {key: accept("Ada")})
        await finished(asked)
        await eventually(lambda: "sleeper" in started)
        await cancelled.cancel()
        tasks = [done, failed, asked, cancelled]
        for task in tasks:
            await workflow_closed(extension, task.task_id)
        temporal = extension.client
        assert temporal is not None
        histories: list[WorkflowHistory] = []
        for task in tasks:
            handle = task_handle(temporal, task.task_id)
            histories.append(await handle.fetch_history())

    replayer = Replayer(workflows=[McpTaskWorkflow], data_converter=temporal.data_converter)
    for history in histories:
        await replayer.replay_workflow(history)


RELEASE_HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))


@pytest.mark.parametrize("recorded", RELEASE_HISTORIES, ids=lambda path: f"{path.parent.name}/{path.stem}")
async def test_every_release_history_replays_on_the_current_code(recorded: Path) -> None:
    """A task in flight during an upgrade replays its history, recorded by an older release."""
    history = WorkflowHistory.from_json(f"recorded/{recorded.stem}", recorded.read_text())
    replayer = Replayer(workflows=[McpTaskWorkflow], data_converter=encrypted_data_converter(None))
    await replayer.replay_workflow(history)


def test_every_release_has_recorded_histories() -> None:
    assert {path.parent.name for path in RELEASE_HISTORIES} >= {"0.2.0", "0.3.0-dev"}
    # a round answered one question per update that continues as new inside it (asks written once)
    assert {path.stem for path in RELEASE_HISTORIES if path.parent.name == "0.3.0-dev"} >= {
        "five_answers_one_by_one-run1", "five_answers_one_by_one-run2"
    }
    assert len([path for path in RELEASE_HISTORIES if path.parent.name == "0.2.0"]) == 12
