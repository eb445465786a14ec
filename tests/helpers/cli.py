"""The `fastmcp-temporal` command, run as an operator runs it: a fresh process per call.

Each call reaches the given dev server through FASTMCP_TEMPORAL_ADDRESS, without the
test process's encryption key, and returns its exit code, stdout and stderr; `listed`
retries `tasks list --json` until visibility has caught up with what a test expects.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import anyio

from fastmcp_temporal.devserver import DevServer
from helpers.waits import DEADLINE


async def fastmcp_temporal_cli(server: DevServer, *args: str) -> tuple[int, str, str]:
    """Run `fastmcp-temporal ARGS` against `server` in a fresh process; exit code, stdout, stderr."""
    environment = {k: v for k, v in os.environ.items() if k != "FASTMCP_TEMPORAL_ENCRYPTION_KEY"}
    environment["FASTMCP_TEMPORAL_ADDRESS"] = server.address
    command = [sys.executable, "-m", "fastmcp_temporal.cli", *args]
    done = await anyio.run_process(command, env=environment, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def cli(server: DevServer, *args: str) -> tuple[int, str, str]:
    """Run `fastmcp-temporal tasks ARGS` in a fresh process (without blocking the worker's loop)."""
    return await fastmcp_temporal_cli(server, "tasks", *args)


async def listed(
    server: DevServer, *args: str, until: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """`tasks list --json ARGS` once visibility shows what `until` expects."""
    with anyio.fail_after(DEADLINE * 2):
        while True:
            code, out, err = await cli(server, "list", "--json", *args)
            assert code == 0, err
            rows = json.loads(out)
            if until(rows):
                return rows
            await anyio.sleep(0.2)
