"""How much memory a server process holds for concurrent maximal requests, at peak and after.

    .venv/bin/python -m bench run request_memory [--calls 6] [--chars 45000000] [--budget BYTES] [--trace]
        [--code DIR] [--label NAME]

On the run's dev server (in memory), with a folder payload store, starts this file as an HTTP MCP server
process with an embedded worker (`serve`), and sends `--calls` concurrent `tools/call`s
of one `--chars`-character argument each from a real `fastmcp.Client` over streamable
HTTP, as tasks. A call refused for the request-memory budget (HTTP 503), or whose
connection dropped, is sent again after a second. It reports (in MiB) the server process's
peak resident memory (`VmHWM`
in /proc) over its resident memory before the calls, per call and as a multiple of what
was sent, its resident memory once every task has finished, 5 s and 30 s later, and after glibc's
`malloc_trim` (what is still held by live objects), with where that is (`smaps`). `--budget` sets the server's
`request_memory_budget` (a huge value measures the server without one); `--trace` traces
the server's Python allocations during the calls and prints where they peaked and what
they still hold once the tasks ended (much
slower: the workflow tasks of big arguments then time out and retry).

`--code` runs the server on another copy of the package (a folder holding a
`fastmcp_temporal` package, e.g. an earlier commit's, laid out as installed), so a change
is measured beside the code before it in one session; `--label` names the run in its settings
(`bench/results/request_memory.json` holds the labelled runs `docs/large-payloads.md` quotes).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import time
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import call_tool_task
from mcp.shared.exceptions import MCPError

from bench.harness import dev_server, http_server_process
from fastmcp_temporal import TemporalTasksExtension

QUESTION = "How much memory does a server process hold for concurrent maximal requests, at peak and after?"
QUICK = {"calls": 2, "chars": 2_000_000}
MIB = 1024 * 1024
_CALL_DEADLINE = 600.0


def _server() -> FastMCP:
    mcp = FastMCP("bench-request-memory")
    mcp.add_extension(TemporalTasksExtension(ui=False))

    @mcp.tool(task=True)
    async def weigh(blob: str) -> int:
        """The argument's length: the body keeps nothing."""
        return len(blob)

    @mcp.tool
    async def trim() -> None:
        """Hand the C allocator's free memory back to the system (glibc's malloc_trim)."""
        ctypes.CDLL("libc.so.6").malloc_trim(0)

    @mcp.tool
    async def start_tracing() -> None:
        """Trace Python allocations from now on, keeping a snapshot at each new high."""
        import tracemalloc

        tracemalloc.start(8)
        _PEAK_SNAPSHOT.append(asyncio.create_task(_watch_peak()))

    @mcp.tool
    async def allocations(top: int = 12, held: bool = False) -> list[str]:
        """Where this process's Python allocations peaked (or, `held`, what they hold now), when
        it runs under tracemalloc."""
        import tracemalloc

        if not tracemalloc.is_tracing():
            return []
        current, peak = tracemalloc.get_traced_memory()
        lines = [
            f"traced now {current / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB; {'held' if held else 'at the peak'}:"
        ]
        peaked = _PEAK_SNAPSHOT[1] if len(_PEAK_SNAPSHOT) > 1 and not held else None
        snapshot = peaked or tracemalloc.take_snapshot()
        for stat in snapshot.statistics("traceback")[:top]:
            lines.append(f"{stat.size / MIB:8.1f} MiB  {stat.count:6} blocks")
            lines.extend(f"      {frame}" for frame in stat.traceback.format(limit=6))
        return lines

    return mcp


_PEAK_SNAPSHOT: list[Any] = []
"""The watching task, then the snapshot at the highest traced total so far."""


async def _watch_peak() -> None:
    """Keep a snapshot of the allocations whenever the traced total reaches a new high."""
    import tracemalloc

    highest = 0
    while True:
        current, _ = tracemalloc.get_traced_memory()
        if current > highest * 1.05:
            highest = current
            _PEAK_SNAPSHOT[1:] = [tracemalloc.take_snapshot()]
        await asyncio.sleep(0.05)


def serve() -> None:
    _server().run(transport="http", host="127.0.0.1", port=int(os.environ["PORT"]), show_banner=False)


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _resident_by_kind(pid: int) -> dict[str, int]:
    """Where the process's resident memory is, in MiB: the main heap, anonymous mappings of
    32 MiB or more (a large buffer glibc maps by itself, or a thread's arena), the smaller
    anonymous ones, and files (code)."""
    kinds = {"heap": 0, "anonymous_32mib_or_more": 0, "anonymous_smaller": 0, "files": 0}
    name, size = "", 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            name, size = (fields[5] if len(fields) > 5 else ""), end - start
        elif fields[0] == "Rss:":
            if name == "[heap]":
                kind = "heap"
            elif name and not name.startswith("["):
                kind = "files"
            else:
                kind = "anonymous_32mib_or_more" if size >= 32 * MIB else "anonymous_smaller"
            kinds[kind] += int(fields[1])
    return {kind: round(kb / 1024) for kind, kb in kinds.items()}


def _reset_peak(pid: int) -> None:
    """Start VmHWM over from the current RSS (writing 5 to clear_refs, Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _patient(url: str) -> StreamableHttpTransport:
    """A transport that waits out a slow server: a loaded one reads a big body slowly."""

    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(**{**kwargs, "timeout": httpx2.Timeout(_CALL_DEADLINE)})

    return StreamableHttpTransport(url, httpx_client_factory=factory)


async def _call(url: str, chars: int, index: int) -> tuple[int, int, int]:
    """One call's result, how many times it was refused before it was taken, and how many
    times its connection dropped (each sent again)."""
    blob = chr(ord("a") + index) * chars
    refusals = drops = 0
    while True:
        try:
            async with Client(_patient(url)) as client:
                task = await call_tool_task(client, "weigh", {"blob": blob})
                result = await task.result()
            return int(result.data), refusals, drops
        except MCPError as error:
            if "REQUEST_MEMORY_BUDGET" not in error.error.message:
                raise
            refusals += 1
        except httpx2.TransportError:
            drops += 1
        await asyncio.sleep(1)


async def _measure(url: str, pid: int, calls: int, chars: int, trace: bool) -> dict[str, Any]:
    async with Client(url) as client:  # the session machinery warm before the baseline
        await client.list_tools()
        if trace:
            await client.call_tool("start_tracing", {})
    before_mib = _status_kb(pid, "VmRSS") / 1024
    _reset_peak(pid)
    started = time.monotonic()
    outcomes = await asyncio.gather(*(_call(url, chars, index) for index in range(calls)))
    elapsed = time.monotonic() - started
    assert all(length == chars for length, _, _ in outcomes), outcomes
    peak_mib = _status_kb(pid, "VmHWM") / 1024
    after_mib = _status_kb(pid, "VmRSS") / 1024
    await asyncio.sleep(5)
    settled_mib = _status_kb(pid, "VmRSS") / 1024
    await asyncio.sleep(25)
    later_mib = _status_kb(pid, "VmRSS") / 1024
    async with Client(url) as client:
        await client.call_tool("trim", {})
    trimmed_mib = _status_kb(pid, "VmRSS") / 1024
    held = _resident_by_kind(pid)
    sent_mib = calls * chars / MIB
    return {
        "calls": calls,
        "chars": chars,
        "sent_mib": round(sent_mib),
        "before_mib": round(before_mib),
        "peak_mib": round(peak_mib),
        "peak_over_before_per_call_mib": round((peak_mib - before_mib) / calls),
        "peak_over_before_per_sent_byte": round((peak_mib - before_mib) / sent_mib, 2),
        "after_mib": round(after_mib),
        "after_5s_mib": round(settled_mib),
        "after_malloc_trim_mib": round(trimmed_mib),
        "after_5s_over_before": round(settled_mib / before_mib, 2),
        "after_30s_mib": round(later_mib),
        "after_30s_over_before": round(later_mib / before_mib, 2),
        "after_malloc_trim_resident_by_kind_mib": held,
        "refusals": sum(refused for _, refused, _ in outcomes),
        "dropped_connections": sum(dropped for _, _, dropped in outcomes),
        "seconds": round(elapsed, 1),
    }


async def _allocations(url: str) -> list[str]:
    async with Client(url) as client:
        peak = (await client.call_tool("allocations", {})).data
        return peak + (await client.call_tool("allocations", {"held": True})).data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--chars", type=int, default=45_000_000)
    parser.add_argument("--trace", action="store_true", help="run the server under tracemalloc")
    parser.add_argument("--budget", help="FASTMCP_TEMPORAL_REQUEST_MEMORY_BUDGET for the server")
    parser.add_argument("--code", type=Path, help="run the server on the package in this folder")
    parser.add_argument("--label", default="", help="the run's name in its settings")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with dev_server(in_memory=True) as temporal:
        store = temporal.state / "payloads"
        settings = {"FASTMCP_TEMPORAL_PAYLOAD_STORE": str(store)}
        if args.budget is not None:
            settings["FASTMCP_TEMPORAL_REQUEST_MEMORY_BUDGET"] = args.budget
        with http_server_process(__file__, temporal.address, settings, args.code) as (pid, url):
            report = await _measure(url, pid, args.calls, args.chars, args.trace)
            if args.trace:
                report["allocations"] = await _allocations(url)
    return report | {"budget": args.budget or "default"}


if __name__ == "__main__":  # the server process `harness.http_server_process` starts
    serve()
