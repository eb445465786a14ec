"""`fastmcp-temporal payloads gc`: the one thing that deletes stored payloads, and only unreadable ones.

The store keeps each task's payloads under its workflow id (`_stores`). A task is
readable while Temporal has its workflow, so deleting by age alone can take a live
task's data; gc deletes by Temporal's own answer instead. It guarantees: a task's
payloads go only when its workflow is NOT_FOUND and its newest payload is older than
the grace; any other error from Temporal stops it before anything is removed;
payloads not under a task's name are never removed; nothing is removed without
`--delete`; and nothing is removed from a store whose marker (`_store_marker`) names
another cluster or namespace, or that holds tasks but no marker: there every task is
NOT_FOUND because the store is not this cluster's, and gc would take them all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client

from fastmcp_temporal.cli._operator import OperatorError, execute, operator_settings
from fastmcp_temporal.cli._options import DefaultsShownRawDescription, add_connection_options
from fastmcp_temporal.cli._reading import describe
from fastmcp_temporal.connection._client import embedded_payload_folder
from fastmcp_temporal.connection._store_marker import StoreIdentity, StoreMarker, store_identity
from fastmcp_temporal.connection._stores import (
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
per-task names, shared by tasks) are counted and never removed. A store whose marker
names another Temporal cluster or namespace, or that holds tasks but no marker, is
refused. Without --delete nothing is removed. Run it daily, from cron or a scheduled job."""


def add_payloads_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `payloads gc` under the `fastmcp-temporal` CLI."""
    payloads = commands.add_parser("payloads", help="Look after the payload store (operators).")
    verbs = payloads.add_subparsers(required=True, metavar="VERB")
    gc = verbs.add_parser(
        "gc",
        help="Remove stored payloads of tasks whose workflow Temporal no longer has (dry run by default).",
        description=GC_DESCRIPTION,
        formatter_class=DefaultsShownRawDescription,
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
        driver, identity = _store(args), await store_identity(client)
        with _store_failure("list"):
            contents = await driver.contents(client.namespace)
            marker = await driver.marker(client.namespace)
        _refuse_another_store(identity, marker, driver.marker_location(client.namespace), contents)
        verdicts = await _verdicts(client, contents.tasks, args.grace)
        for task in verdicts.unreadable:
            if args.delete:
                with _store_failure(f"remove the payloads of {task.workflow_id} from"):
                    await driver.remove(task)
            print(f"{'removed' if args.delete else 'would remove'}  {_summary(task)}")
        _report(args, client.namespace, contents, verdicts)

    execute(args, run)


def _store(args: argparse.Namespace) -> FolderStorageDriver | TaskS3StorageDriver:
    """The store the settings name, resolved as servers and workers resolve it ('auto': the state folder)."""
    settings = operator_settings(args)
    folder = embedded_payload_folder(settings)
    driver = store_driver(settings.payload_store, folder, settings.stored_payload_limit)
    if driver is None:
        raise OperatorError(
            "No payload store to collect: FASTMCP_TEMPORAL_PAYLOAD_STORE is 'none'. Pass --payload-store "
            "(or set the variable) to the store the servers and workers of the queue use."
        )
    return driver


def _refuse_another_store(
    identity: StoreIdentity, marker: StoreMarker | None, where: str, contents: StoreContents
) -> None:
    """Stop unless the store's marker names this cluster and namespace (a store with no tasks needs none)."""
    if marker is None and contents.tasks:
        raise OperatorError(
            f"The payload store holds {len(contents.tasks)} task(s) of namespace {identity.namespace!r} but "
            f"no marker ({where}), so gc cannot tell it is this cluster's store; nothing was removed. A "
            "server or worker of this release marks it at its first stored payload: run gc after that, and "
            "check that --payload-store and --address name the same deployment."
        )
    if marker is not None and not marker.names(identity):
        raise OperatorError(
            f"The payload store belongs to {marker.owner()} ({where}), not to Temporal cluster "
            f"{identity.cluster_id!r}, namespace {identity.namespace!r} that gc is connected to. Its "
            "tasks are not in this Temporal, so gc would remove every one of them; nothing was removed. "
            "Point --payload-store at this cluster's store, or --address / --namespace at the store's."
        )


@contextlib.contextmanager
def _store_failure(doing: str) -> Iterator[None]:
    """A store that fails (unreachable, access denied) stops gc with what it was doing."""
    try:
        yield
    except Exception as exc:
        raise OperatorError(
            f"Could not {doing} the payload store: {exc}. Fix access and run gc again."
        ) from exc


@dataclass
class _Verdicts:
    unreadable: list[StoredTask] = field(default_factory=list)
    """Temporal no longer has the workflow, and nothing was written within the grace."""
    live: list[StoredTask] = field(default_factory=list)
    """Temporal still has the workflow: running, or closed within the retention."""
    young: list[StoredTask] = field(default_factory=list)
    """Temporal does not have the workflow (yet), but a payload was written within the grace."""


async def _verdicts(client: Client, tasks: list[StoredTask], grace: timedelta) -> _Verdicts:
    limit = asyncio.Semaphore(_CONCURRENT_DESCRIBES)

    async def exists(task: StoredTask) -> bool:
        async with limit:
            return await describe(client, task.workflow_id) is not None

    found = await asyncio.gather(*(exists(task) for task in tasks))
    oldest_kept = datetime.now(timezone.utc) - grace
    verdicts = _Verdicts()
    for task, present in zip(tasks, found):
        kind = (
            verdicts.live if present else verdicts.young if task.newest > oldest_kept else verdicts.unreadable
        )
        kind.append(task)
    return verdicts


def _summary(task: StoredTask) -> str:
    count = f"{len(task.names)} payload{'s' * (len(task.names) != 1)}"
    return (
        f"{task.workflow_id}  {count}, {task.size:,} bytes, last written {task.newest:%Y-%m-%d %H:%M:%S} UTC"
    )


def _report(args: argparse.Namespace, namespace: str, contents: StoreContents, verdicts: _Verdicts) -> None:
    freed = sum(task.size for task in verdicts.unreadable)
    kept = sum(task.size for task in verdicts.live)
    verb = "Removed" if args.delete else "Would remove"
    print(
        f"{verb} the payloads of {len(verdicts.unreadable)} task(s) gone from {namespace!r}: {freed:,} bytes."
    )
    print(f"Kept {len(verdicts.live)} task(s) Temporal still has ({kept:,} bytes).")
    print(f"Kept {len(verdicts.young)} task(s) not in Temporal but written within the grace of {args.grace}.")
    if contents.shared_count:
        print(
            f"Never removed by gc: {contents.shared_count} payload(s), {contents.shared_size:,} bytes, "
            "not under a task's name (earlier versions shared them across tasks). Delete them by hand once "
            "every task started before the upgrade is past its TTL and the namespace retention."
        )
    if verdicts.unreadable and not args.delete:
        print("Dry run: nothing removed. Pass --delete to remove them.")
