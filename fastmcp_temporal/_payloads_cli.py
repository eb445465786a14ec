"""`fastmcp-temporal payloads gc`: the one thing that deletes stored payloads, and only unreadable ones.

The store keeps each task's payloads under its workflow id (`_payloads`). A task is
readable while Temporal has its workflow, so deleting by age alone can take a live
task's data; gc deletes by Temporal's own answer instead. It guarantees: a task's
payloads go only when its workflow is NOT_FOUND and its newest payload is older than
the grace; any other error from Temporal stops it before anything is removed;
payloads not under a task's name are never removed; nothing is removed without
`--delete`.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime, timedelta, timezone

from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client

from fastmcp_temporal._cli_options import add_connection_options
from fastmcp_temporal._connection import embedded_payload_folder
from fastmcp_temporal._operator import OperatorError, _describe, _execute, _operator_settings
from fastmcp_temporal._payloads import (
    FolderStorageDriver,
    StoreContents,
    StoredTask,
    TaskS3StorageDriver,
    store_driver,
)

DEFAULT_GRACE = timedelta(days=1)
_CONCURRENT_DESCRIBES = 16
GC_DESCRIPTION = """\
Remove the stored payloads of tasks nobody can read any more, and print each with its size.

A task can be read while Temporal has its workflow: running, or closed and within the
namespace retention. gc lists the store's per-task folders (S3: prefixes), asks Temporal
for each task's workflow, and removes a task's payloads only when Temporal answers
NOT_FOUND and the newest of them is older than --grace (a client stores a task's
arguments just before it starts the workflow). Any other error from Temporal stops gc
before it removes anything. Payloads not under a task's name (stored by versions before
per-task names, shared by tasks) are counted and never removed. Without --delete
nothing is removed. Run it daily, from cron or a scheduled job."""


def add_payloads_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `payloads gc` under the `fastmcp-temporal` CLI."""
    payloads = commands.add_parser("payloads", help="Look after the payload store (operators).")
    verbs = payloads.add_subparsers(required=True, metavar="VERB")
    gc = verbs.add_parser(
        "gc",
        help="Remove stored payloads of tasks whose workflow Temporal no longer has (dry run by default).",
        description=GC_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gc.add_argument("--delete", action="store_true", help="Remove them (default: only print what would go)")
    gc.add_argument(
        "--grace",
        type=_duration,
        default=DEFAULT_GRACE,
        help="Keep a task whose newest payload is younger than this: seconds or ISO 8601 (default P1D)",
    )
    add_connection_options(gc)
    gc.set_defaults(run=_gc)


def _duration(text: str) -> timedelta:
    try:
        return timedelta(seconds=float(text))
    except ValueError:
        pass
    try:
        return TypeAdapter(timedelta).validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: use seconds (86400) or ISO 8601 (P1D)")


def _gc(args: argparse.Namespace) -> None:
    async def run(client: Client, _: str) -> None:
        driver = _store(args)
        contents = await driver.contents(client.namespace)
        unreadable, live, young = await _sorted_out(client, contents.tasks, args.grace)
        for task in unreadable:
            if args.delete:
                await driver.remove(task)
            print(f"{'removed' if args.delete else 'would remove'}  {_summary(task)}")
        _report(args, client.namespace, contents, unreadable, live, young)

    _execute(args, run)


def _store(args: argparse.Namespace) -> FolderStorageDriver | TaskS3StorageDriver:
    """The store the settings name, resolved as servers and workers resolve it ('auto': the state folder)."""
    settings = _operator_settings(args)
    driver = store_driver(settings.payload_store, embedded_payload_folder(settings), settings.stored_payload_limit)
    if driver is None:
        raise OperatorError(
            "No payload store to collect: FASTMCP_TEMPORAL_PAYLOAD_STORE is 'none'. Pass --payload-store "
            "(or set the variable) to the store the servers and workers of the queue use."
        )
    return driver


async def _sorted_out(
    client: Client, tasks: list[StoredTask], grace: timedelta
) -> tuple[list[StoredTask], list[StoredTask], list[StoredTask]]:
    """The tasks nobody can read any more; those Temporal still has; those gone but within the grace."""
    limit = asyncio.Semaphore(_CONCURRENT_DESCRIBES)

    async def exists(task: StoredTask) -> bool:
        async with limit:
            return await _describe(client, task.workflow_id) is not None

    found = await asyncio.gather(*(exists(task) for task in tasks))
    oldest_kept = datetime.now(timezone.utc) - grace
    unreadable: list[StoredTask] = []
    live: list[StoredTask] = []
    young: list[StoredTask] = []
    for task, present in zip(tasks, found):
        (live if present else young if task.newest > oldest_kept else unreadable).append(task)
    return unreadable, live, young


def _summary(task: StoredTask) -> str:
    count = len(task.names)
    return f"{task.workflow_id}  {count} payload{'s' * (count != 1)}, {task.size:,} bytes, last written {task.newest:%Y-%m-%d %H:%M:%S}Z"


def _report(
    args: argparse.Namespace,
    namespace: str,
    contents: StoreContents,
    unreadable: list[StoredTask],
    live: list[StoredTask],
    young: list[StoredTask],
) -> None:
    freed = sum(task.size for task in unreadable)
    verb = "Removed" if args.delete else "Would remove"
    print(f"{verb} the payloads of {len(unreadable)} task(s) no longer in namespace {namespace!r}: {freed:,} bytes.")
    print(f"Kept {len(live)} task(s) Temporal still has ({sum(t.size for t in live):,} bytes).")
    print(f"Kept {len(young)} task(s) not in Temporal but written within the grace of {args.grace}.")
    if contents.shared_count:
        print(
            f"Never removed by gc: {contents.shared_count} payload(s), {contents.shared_size:,} bytes, not under a "
            "task's name (earlier versions shared them across tasks). Delete them by hand once every task "
            "started before the upgrade is past its TTL and the namespace retention."
        )
    if unreadable and not args.delete:
        print("Dry run: nothing removed. Pass --delete to remove them.")
