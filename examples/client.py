"""Drive the demo server's tools as background tasks, the way an MCP client does.

    python examples/client.py [http://127.0.0.1:8000/mcp] [--ui http://127.0.0.1:8233]

Importing `fastmcp_tasks` opts this `fastmcp.Client` in to the tasks extension
(SEP-2663); without it the server runs every tool as a plain synchronous call and
nothing reaches Temporal. Each tool then runs as a Temporal workflow: the client
prints its task id and where to find it in the Temporal UI (`--ui`: the UI URL the
server logged), shows a live progress bar from the task's `statusMessage`, and
answers the task's question when it asks one.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any
from urllib.parse import quote

import fastmcp_tasks  # noqa: F401  (registers the tasks extension on every fastmcp.Client)
from fastmcp import Client
from fastmcp_tasks import ToolTask, call_tool_task
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.prompt import Prompt

console = Console(highlight=False)
# The wire carries progress only as text; the demo server writes it as "<done>/<total> ...".
FRACTION = re.compile(r"^(\d+)/(\d+)\b")


def show_task(task: ToolTask, tool: str, ui: str | None) -> None:
    # An unauthenticated caller's task is workflow `mcp-task/anon/<task id>` (docs/architecture.md).
    workflow_id = f"mcp-task/anon/{task.task_id}"
    console.print(f"{tool}: task {task.task_id}")
    if ui:
        query = quote(f'WorkflowId="{workflow_id}"')
        console.print(
            f"  Temporal UI: {ui.rstrip('/')}/namespaces/default/workflows?query={query}", soft_wrap=True
        )
    else:
        console.print(
            f"  Temporal workflow {workflow_id} (--ui <the UI URL the server logged> links it)",
            soft_wrap=True,
        )


async def follow_progress(task: ToolTask) -> None:
    """A progress bar fed by `tasks/get`, until the task stops working."""
    with Progress(TextColumn("  {task.description}"), BarColumn(), console=console) as progress:
        bar = progress.add_task("starting", total=None)
        while (status := await task.status()).status == "working":
            message = status.status_message or "working"
            if fraction := FRACTION.match(message):
                progress.update(bar, completed=int(fraction[1]), total=int(fraction[2]))
            progress.update(bar, description=message)
            await asyncio.sleep(0.2)
        total = progress.tasks[0].total or 1
        progress.update(bar, description=status.status, completed=total, total=total)


async def answer(message: str, response_type: Any, params: Any, context: Any) -> dict[str, str]:
    """The server's question, asked of the person at the terminal (or answered 'Ada' when none)."""
    if sys.stdin.isatty():
        name = await asyncio.to_thread(Prompt.ask, f"  server asks: {message}", default="Ada")
    else:
        name = "Ada"
        console.print(f"  server asks: {message} -> answering {name!r}")
    return {"name": name}


async def main(url: str, ui: str | None) -> None:
    async with Client(url, elicitation_handler=answer) as client:
        crunch = await call_tool_task(client, "crunch", {"n": 12})
        show_task(crunch, "crunch", ui)
        await follow_progress(crunch)
        console.print(f"crunch(12) = {(await crunch.result()).data}")

        greet = await call_tool_task(client, "greet", {})
        show_task(greet, "greet", ui)
        console.print((await greet.result()).data)  # answers the task's question through `answer`


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "url", nargs="?", default="http://127.0.0.1:8000/mcp", help="the demo server's MCP URL"
    )
    parser.add_argument("--ui", help="the Temporal UI URL the server logged, for links to the tasks")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.ui))
