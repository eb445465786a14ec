"""When a dev server is ready: its namespace answers DescribeNamespace.

What it guarantees: ``wait_ready`` returns only once the namespace answers, and otherwise
raises, naming the binary, the address and what the server wrote, as soon as the server
exits or the start-up timeout passes. ``describe`` never hangs on a port that accepts but
does not speak gRPC.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import IO

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal.devserver._errors import DevServerError
from fastmcp_temporal.devserver._output import output_tail

_PROBE_TIMEOUT = 2.0
_POLL_INTERVAL = 0.05


async def wait_ready(
    address: str,
    namespace: str,
    process: subprocess.Popen[bytes],
    binary: Path,
    output: IO[bytes],
    log_path: Path | None,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            raise DevServerError(
                f"{binary} server start-dev exited with code {code} before it was ready at {address}."
                f"{output_tail(output, log_path)}"
            )
        if await describe(address, namespace) is not None:
            return
        if time.monotonic() >= deadline:
            raise DevServerError(
                f"Temporal dev server ({binary}) at {address} did not answer for namespace {namespace!r} "
                f"within {timeout:g}s; raise startup_timeout if the machine is busy.{output_tail(output, log_path)}"
            )
        await asyncio.sleep(_POLL_INTERVAL)


async def describe(address: str, namespace: str) -> Client | None:
    """Return a client if ``address`` is a Temporal server that knows ``namespace``, else None.

    Bounded by _PROBE_TIMEOUT: a socket that accepts but never speaks gRPC (say, another
    program on the port) would otherwise hold ``Client.connect`` for 30 s.
    """

    async def connect_and_describe() -> Client:
        client = await Client.connect(address, namespace=namespace)
        request = DescribeNamespaceRequest(namespace=namespace)
        await client.workflow_service.describe_namespace(request)
        return client

    try:
        return await asyncio.wait_for(connect_and_describe(), _PROBE_TIMEOUT)
    except (RuntimeError, RPCError, asyncio.TimeoutError):
        return None
