"""`fastmcp-temporal worker` runs extra workers; `codec-server` lets the UI decrypt payloads.

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
from typing import Any

from fastmcp.utilities.cli import load_and_merge_config
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID

from fastmcp_temporal import _fastmcp_private
from fastmcp_temporal._codec import EncryptionCodec, codec_app
from fastmcp_temporal._extension import TemporalTasksExtension
from fastmcp_temporal._operator import add_tasks_command
from fastmcp_temporal._settings import TemporalTasksSettings

logger = logging.getLogger("fastmcp_temporal")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastmcp-temporal", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    worker = commands.add_parser("worker", help="Run a worker for a server's task tools.")
    worker.add_argument("server_spec", help="path/to/server.py[:object], as for `fastmcp run`")
    worker.add_argument("--address", help="Temporal frontend host:port (default: the server's setting)")
    worker.add_argument("--namespace", help="Temporal namespace")
    worker.add_argument("--task-queue", help="Task queue to poll")
    worker.add_argument("--concurrency", type=int, help="Tool legs run at once by this worker")
    worker.set_defaults(run=_run_worker)
    codec = commands.add_parser(
        "codec-server", help="Let the Temporal UI decrypt task payloads (needs FASTMCP_TEMPORAL_ENCRYPTION_KEY)."
    )
    codec.add_argument("--host", default="127.0.0.1")
    codec.add_argument("--port", type=int, default=8081)
    codec.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="Origin of the Temporal UI allowed to call it, e.g. http://127.0.0.1:8233 (repeatable)",
    )
    codec.set_defaults(run=_run_codec_server)
    add_tasks_command(commands)
    return parser


def _run_worker(args: argparse.Namespace) -> None:
    config, _ = load_and_merge_config(args.server_spec)
    server = asyncio.run(config.source.load_server())
    extension = _fastmcp_private.registered_extension(server, TASKS_EXTENSION_ID)
    if not isinstance(extension, TemporalTasksExtension):
        sys.exit(
            f"{args.server_spec} has no TemporalTasksExtension; add "
            "`mcp.add_extension(TemporalTasksExtension(...))` to the server first."
        )
    overrides: dict[str, Any] = {
        "address": args.address,
        "namespace": args.namespace,
        "task_queue": args.task_queue,
        "max_concurrent_activities": args.concurrency,
        "worker": True,
    }
    extension.configure(**{k: v for k, v in overrides.items() if v is not None})
    asyncio.run(_serve_until_signalled(server, extension))


def _run_codec_server(args: argparse.Namespace) -> None:
    import uvicorn

    key = TemporalTasksSettings().encryption_key
    if key is None:
        sys.exit("Set FASTMCP_TEMPORAL_ENCRYPTION_KEY to the key your servers and workers use.")
    app = codec_app(EncryptionCodec(key.get_secret_value()), args.cors_origin)
    uvicorn.run(app, host=args.host, port=args.port)


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
            settings.namespace,
            settings.max_concurrent_activities,
        )
        await stop.wait()
        logger.info("Stopping worker")


if __name__ == "__main__":
    main()
