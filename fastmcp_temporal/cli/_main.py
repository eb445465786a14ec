"""`fastmcp-temporal`: the commands that run beside FastMCP servers whose tasks run on Temporal.

Every command that talks to Temporal shares the connection options of
`_options.py`; a command defined in its own module registers in `_COMMANDS`.
A worker process loads the same server definition as the MCP server (FastMCP's
`path/to/server.py[:object]` spec), enters its full lifespan so tools see the same
`lifespan_context`, and polls the task queue until SIGINT or SIGTERM, then stops
gracefully: running legs get the configured grace, then are retried elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn

from fastmcp.utilities.cli import load_and_merge_config
from pydantic import ValidationError

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.cli._codec_server import add_codec_server_command
from fastmcp_temporal.cli._dev_server import add_dev_server_command
from fastmcp_temporal.cli._options import Parser, add_connection_options, setting_overrides
from fastmcp_temporal.cli._payloads import add_payloads_command
from fastmcp_temporal.cli._tasks import add_tasks_command
from fastmcp_temporal.connection._client import TemporalConnectionError
from fastmcp_temporal.connection._process_exit import end_process
from fastmcp_temporal.connection._search_attributes import SearchAttributeSetupError
from fastmcp_temporal.devserver import DevServerError
from fastmcp_temporal.server._extension import TemporalTasksExtension
from fastmcp_temporal.worker._plugin import tasks_extension

if TYPE_CHECKING:
    from typing import TypeAlias

    Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

logger = logging.getLogger("fastmcp_temporal")

# What stops a command before it can run, each with a message that names the fix.
STARTUP_FAILURES = (
    TemporalConnectionError, DevServerError, SearchAttributeSetupError, _fastmcp_private.UpstreamChanged
)


def main(argv: list[str] | None = None) -> NoReturn:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        args.run(args)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop)
    except STARTUP_FAILURES as failure:
        # Its message says what failed and what to do; a traceback would bury it.
        print(f"fastmcp-temporal: {failure}", file=sys.stderr)
        code = 1
    end_process(code)


def _exit_code(stop: SystemExit) -> int:
    """What the interpreter would exit with for `stop`, printing its message as it would."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fastmcp-temporal", description=__doc__.splitlines()[0])
    version = f"%(prog)s {metadata.version('fastmcp-temporal')}"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(commands)
    return parser


def _add_worker(commands: Commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="Run a worker for a server's task tools.",
        description="Run a Temporal worker for the task tools of a FastMCP server definition.",
    )
    worker.add_argument("server_spec", help="path/to/server.py[:object], as for `fastmcp run`")
    worker.add_argument(
        "--task-queue",
        help="task queue to poll [FASTMCP_TEMPORAL_TASK_QUEUE] (default: the server's setting, else "
        f"{_setting_default('task_queue')})",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        help="tool legs run at once [FASTMCP_TEMPORAL_MAX_CONCURRENT_ACTIVITIES] (default: the server's "
        f"setting, else {_setting_default('max_concurrent_activities')})",
    )
    worker.add_argument(
        "--max-activities-per-second",
        type=float,
        metavar="RATE",
        help="tool legs this worker starts per second at most [FASTMCP_TEMPORAL_MAX_ACTIVITIES_PER_SECOND] "
        "(default: the server's setting, else no limit)",
    )
    worker.add_argument(
        "--max-task-queue-activities-per-second",
        type=float,
        metavar="RATE",
        help="tool legs the whole task queue starts per second at most, enforced by Temporal "
        "[FASTMCP_TEMPORAL_MAX_TASK_QUEUE_ACTIVITIES_PER_SECOND] "
        "(default: the server's setting, else no limit)",
    )
    worker.add_argument(
        "--deployment-name",
        help="Temporal Worker Deployment this worker belongs to (with --build-id) "
        "[FASTMCP_TEMPORAL_DEPLOYMENT_NAME] (default: the server's setting, else none: no Worker Versioning)",
    )
    worker.add_argument(
        "--build-id",
        help="this build of the server's code (with --deployment-name) [FASTMCP_TEMPORAL_BUILD_ID] "
        "(default: the server's setting, else none)",
    )
    add_connection_options(worker, embedded=True)
    worker.set_defaults(run=_run_worker)


# One entry per sub-command; a command defined in its own module adds one line here.
_COMMANDS: list[Callable[[Commands], None]] = [
    _add_worker,
    add_codec_server_command,
    add_dev_server_command,
    add_tasks_command,
    add_payloads_command,
]


def _setting_default(name: str) -> object:
    return TemporalTasksSettings.model_fields[name].default


def _run_worker(args: argparse.Namespace) -> None:
    config, _ = load_and_merge_config(args.server_spec)
    server = asyncio.run(config.source.load_server())
    try:
        extension = tasks_extension(server)
    except ValueError as exc:
        sys.exit(f"{args.server_spec}: {exc}")
    assert isinstance(extension, TemporalTasksExtension)  # the only TasksHost there is
    overrides: dict[str, Any] = {
        "task_queue": args.task_queue,
        "max_concurrent_activities": args.concurrency,
        "max_activities_per_second": args.max_activities_per_second,
        "max_task_queue_activities_per_second": args.max_task_queue_activities_per_second,
        "deployment_name": args.deployment_name,
        "build_id": args.build_id,
        "worker": True,
    }
    try:
        extension.configure(**{k: v for k, v in overrides.items() if v is not None}, **setting_overrides(args))
    except ValidationError as exc:
        sys.exit(f"fastmcp-temporal worker: {exc}")
    asyncio.run(_serve_until_signalled(server, extension))


async def _serve_until_signalled(server: Any, extension: TemporalTasksExtension) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with _fastmcp_private.lifespan_manager(server):
        settings = extension.temporal_settings
        logger.info(
            "Worker for %s polling task queue %r in namespace %r (up to %d legs at once)",
            server.name,
            settings.task_queue,
            extension.client.namespace if extension.client else None,
            settings.max_concurrent_activities,
        )
        await stop.wait()
        logger.info("Stopping worker")

