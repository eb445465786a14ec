"""Whether other callers' small requests are served while stalled uploads hold sockets open, and how fast.

    .venv/bin/python -m bench run stalled_uploads [--stalls 0,2,16,32] [--calls 40] [--before TREE]

On the run's dev server (in memory), starts this file as an HTTP MCP server process (embedded worker, default
settings, two bearer tokens) for each code tree: the installed package ("after") and, with
`--before`, a folder holding an older `fastmcp_temporal` package, put first on the server's
PYTHONPATH ("before"; e.g. `git archive <commit> fastmcp_temporal workflows activities | tar -x
-C TREE`, then link TREE/workflows and TREE/activities into TREE/fastmcp_temporal). Both trees
run in one invocation, one after the other, on the same dev server.

For each count N in `--stalls` and each kind of stall, caller A opens N uploads on raw sockets
that send part of a body and then nothing, held open while caller B, from a real
`fastmcp.Client` session opened before them, makes `--calls` sequential `tools/call`s of a plain
tool and then one task call:

- `declared`: Content-Length 64 MiB (the default `http_request_limit`), 10 bytes sent: the
  server holds 10 bytes per socket;
- `sending`: Content-Length 64 MiB, 4 MiB sent: bytes the server really holds.

It reports, per tree, kind and N: how many of B's calls were served, their latency (median,
95th percentile and slowest, in ms), whether B's task completed, and the host's load average.
With `--before`, the older tree is the paired baseline, in the same run.
The uploads stay open for the whole measurement: far less than the default
`request_body_timeout`, so no upload is cut while B is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.abc import SocketStream
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp_tasks.client import call_tool_task

from bench.harness import dev_server, http_server_process
from bench.metrics import percentiles
from fastmcp_temporal import TemporalTasksExtension

QUESTION = "Are other callers' small requests served while stalled uploads hold sockets open, and how fast?"
QUICK = {"stalls": "0,2", "calls": 5}
MIB = 1024 * 1024
DECLARED = 64 * MIB
KINDS = {"declared": 10, "sending": 4 * MIB}
"""What each kind of stalled upload sends of its declared 64 MiB before it stops."""
TOKENS = {"token-a": {"client_id": "caller-a"}, "token-b": {"client_id": "caller-b"}}
_CALL_DEADLINE = 30.0
_SETTLE = 1.0
"""How long the uploads are given to reach the server before B's calls start."""


def _server() -> FastMCP:
    mcp = FastMCP("bench-stalled-uploads", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TemporalTasksExtension(ui=False))

    @mcp.tool
    async def ping() -> str:
        return "pong"

    @mcp.tool(task=True)
    async def square(n: int) -> int:
        return n * n

    return mcp


def serve() -> None:
    port = int(os.environ["PORT"])
    _server().run(transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="warning")


@contextlib.asynccontextmanager
async def _stalled_uploads(port: int, count: int, sent: int) -> AsyncIterator[list[SocketStream]]:
    """`count` POSTs as caller A that declare 64 MiB, send `sent` bytes, then nothing; held open."""
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nAuthorization: Bearer token-a\r\n"
        f"Content-Length: {DECLARED}\r\n\r\n"
    ).encode()
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for _ in range(count):
            stream = await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", port))
            with anyio.move_on_after(_CALL_DEADLINE):  # a refused upload may no longer be read
                await stream.send(head + b" " * sent)
            streams.append(stream)
        yield streams


def _client(url: str) -> Client:
    return Client(StreamableHttpTransport(url, auth="token-b"))


async def _calls(client: Client, calls: int) -> tuple[list[float], list[str]]:
    """The latency (ms) of each served call, and the error of each refused one."""
    served, refused = [], []
    for _ in range(calls):
        started = time.perf_counter()
        try:
            with anyio.fail_after(_CALL_DEADLINE):
                assert (await client.call_tool("ping", {})).data == "pong"
            served.append((time.perf_counter() - started) * 1000)
        except Exception as error:  # noqa: BLE001 - a refusal, whatever its form, is what is counted
            refused.append(f"{type(error).__name__}: {error}"[:200])
    return served, refused


async def _task_served(client: Client) -> bool:
    try:
        with anyio.fail_after(_CALL_DEADLINE):
            task = await call_tool_task(client, "square", {"n": 7})
            return (await task.result()).data == 49
    except Exception:  # noqa: BLE001 - a task that is not served, whatever the error
        return False


async def _scenario(url: str, kind: str, stalls: int, calls: int) -> dict[str, Any]:
    port = int(url.split(":")[2].split("/")[0])
    async with _client(url) as client:
        await client.list_tools()
        async with _stalled_uploads(port, stalls, KINDS[kind]):
            await anyio.sleep(_SETTLE)
            served, refused = await _calls(client, calls)
            task_served = await _task_served(client)
    return {
        "kind": kind,
        "stalled_uploads": stalls,
        "calls": calls,
        "served": len(served),
        "served_rate": round(len(served) / calls, 3),
        "latency_ms": percentiles(served, digits=1),
        "task_served": task_served,
        "first_refusal": refused[0] if refused else None,
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stalls", default="0,2,16,32", help="counts of stalled uploads, comma-separated")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--before", help="a folder holding an older fastmcp_temporal package")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    trees = {"before": args.before, "after": None} if args.before else {"after": None}
    counts = [int(count) for count in args.stalls.split(",")]
    report: dict[str, Any] = {}
    async with dev_server(in_memory=True) as temporal:
        for name, tree in trees.items():
            with http_server_process(__file__, temporal.address, {}, tree) as (_, url):
                report[name] = [
                    await _scenario(url, kind, stalls, args.calls) for kind in KINDS for stalls in counts
                ]
    return report


if __name__ == "__main__":  # the server process `harness.http_server_process` starts
    serve()
