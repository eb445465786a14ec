"""`fastmcp-temporal tasks`: list, inspect, cancel and terminate MCP tasks from a terminal.

Durable synchronous calls (`sync_calls="workflow"`) run as the same workflow under
`mcp-call/...` ids; every command handles them too, and `list` distinguishes the two
kinds (a `kind` column, `--kind task|call`). An operator holds the Temporal namespace,
not a caller's token, so every command works across scopes (`_reading.py` finds a task
by its id in any scope). `cancel` has the semantics of `tasks/cancel`; `terminate` ends
a task now, without running its cleanup (and `cancel` terminates a task no worker runs,
as `tasks/cancel` does: `server/_stalled.py`). `show` reads the task's history
(`_inspect.py`); `list --stuck` finds what no worker can move, with the reason and the
fix (`_stuck.py`). `--json` output is stable (docs/operations.md); tables are `_printing.py`'s.

This module wires the verbs to argparse and runs them; the connection options are
the ones every command shares (`_options.py`), read over the same `FASTMCP_TEMPORAL_*`
environment as the extension (`_operator.py`).
"""

from __future__ import annotations

import argparse

from temporalio.client import Client
from temporalio.client import WorkflowExecutionStatus as Status

from fastmcp_temporal._settings import UI_URL_VARIABLE
from fastmcp_temporal.cli._inspect import inspect
from fastmcp_temporal.cli._operator import DEFAULT_UI_URL, OperatorError, execute
from fastmcp_temporal.cli._options import add_connection_options
from fastmcp_temporal.cli._printing import print_json, print_rows, print_task
from fastmcp_temporal.cli._reading import KINDS, TEMPORAL_CLOCK, find, list_query, row
from fastmcp_temporal.cli._stuck import stuck_rows
from fastmcp_temporal.connection._temporal_clock import TemporalClock
from fastmcp_temporal.server._stalled import StalledTasks
from fastmcp_temporal.server._status import MCP_STATUSES

_DEFAULT_SCAN_LIMIT = 10_000


def add_tasks_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `tasks list|show|cancel|terminate` under the `fastmcp-temporal` CLI."""
    tasks = commands.add_parser("tasks", help="List, inspect, cancel or terminate MCP tasks (operators).")
    verbs = tasks.add_subparsers(required=True, metavar="VERB")

    listing = verbs.add_parser("list", help="Tasks, newest first.")
    listing.add_argument("--tool", help="Only tasks of this tool (default: every tool)")
    listing.add_argument("--status", choices=MCP_STATUSES, help="Only tasks in this MCP status (default: any)")
    listing.add_argument("--scope", help="Only tasks of this caller scope tag, McpScope (default: every scope)")
    listing.add_argument(
        "--kind", choices=KINDS, help="Only tasks ('task') or durable synchronous calls ('call'); default both"
    )
    listing.add_argument("--limit", type=_positive, default=50, help="At most this many tasks (default 50)")
    listing.add_argument(
        "--stuck",
        action="store_true",
        help="Only running tasks whose workflow task keeps failing (no worker moves them), with the reason",
    )
    listing.add_argument(
        "--scan-limit",
        type=_positive,
        default=_DEFAULT_SCAN_LIMIT,
        help=f"Newest running tasks --stuck checks (default {_DEFAULT_SCAN_LIMIT})",
    )
    listing.add_argument("--json", action="store_true", help="A JSON array instead of a table")
    listing.set_defaults(run=_list)

    show = verbs.add_parser("show", help="One task: status, legs, input rounds, result or error.")
    show.add_argument("--json", action="store_true", help="A JSON object instead of a table")
    cancel = verbs.add_parser("cancel", help="Cancel a task, as tasks/cancel does.")
    terminate = verbs.add_parser("terminate", help="End a task now, without cleanup.")
    terminate.add_argument("--reason", required=True, help="Recorded in the workflow's history")
    for verb, run in ((show, _show), (cancel, _cancel), (terminate, _terminate)):
        verb.add_argument("task_id", help="The MCP taskId (or the full workflow id)")
        verb.add_argument(
            "--scope", help="The task's scope tag, to skip the search across scopes (default: search them)"
        )
        verb.add_argument(
            "--scan-limit",
            type=_positive,
            default=_DEFAULT_SCAN_LIMIT,
            help=f"Newest tasks searched for the id when the scope is unknown (default {_DEFAULT_SCAN_LIMIT})",
        )
        verb.set_defaults(run=run)

    for verb in (listing, show, cancel, terminate):
        verb.add_argument(
            "--ui-url", help=f"Temporal UI base URL for links ({UI_URL_VARIABLE}, default {DEFAULT_UI_URL})"
        )
        add_connection_options(verb)


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def _list(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        await TEMPORAL_CLOCK.read_once(client)
        if args.stuck:
            rows = await stuck_rows(client, args)
        else:
            rows = [row(e) async for e in client.list_workflows(list_query(args), limit=args.limit)]
        rows.sort(key=lambda listed: listed["createdAt"], reverse=True)
        rows = rows[: args.limit]
        if args.json:
            print_json(rows)
        else:
            print_rows(rows, stuck=args.stuck)

    execute(args, run)


def _show(args: argparse.Namespace) -> None:
    async def run(client: Client, ui_url: str) -> None:
        await TEMPORAL_CLOCK.read_once(client)
        task = await find(client, args.task_id, args.scope, args.scan_limit)
        shown = await inspect(client, task, ui_url)
        if args.json:
            print_json(shown)
        else:
            print_task(shown)

    execute(args, run)


def _cancel(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        task = await find(client, args.task_id, args.scope, args.scan_limit)
        if task.description.status != Status.RUNNING:
            print(f"Task {task.task_id} already ended ({task.status()}); nothing to cancel.")
            return
        if not task.description.raw_description.workflow_extended_info.cancel_requested:
            await task.handle.cancel()
        if await StalledTasks(client, TemporalClock()).close_cancelled(task.handle):
            print(f"Cancelled task {task.task_id}: no worker could run its cancel, so it was ended in Temporal.")
            return
        print(f"Cancellation requested for task {task.task_id}; it reports 'cancelled' from now on.")

    execute(args, run)


def _terminate(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        task = await find(client, args.task_id, args.scope, args.scan_limit)
        if task.description.status != Status.RUNNING:
            raise OperatorError(f"Task {task.task_id} already ended ({task.status()}); nothing to terminate.")
        await task.handle.terminate(reason=args.reason)
        print(f"Terminated task {task.task_id}; it reports 'failed' from now on.")

    execute(args, run)
