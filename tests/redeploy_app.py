"""A FastMCP server in two releases, for the tests of tools that change under their tasks.

`fastmcp-temporal worker tests/redeploy_app.py` loads the release named by
$REDEPLOY_RELEASE ("before" by default, or "after"); the tests build the API-only
"before" twin with `build_server("before", worker=False, ...)` to submit and read tasks.
It is fault_app's server (its settings: 2 s heartbeat timeout, unlimited attempts)
with these tools, each changed one way by the "after" release:

- `removed`, `held`: gone;
- `old_name`: renamed `new_name`;
- `disabled`: still defined, but disabled on the server;
- `versioned`: versions "1" and "2" before, "2" only after;
- `reshaped`, `held_reshaped`: a new required parameter `mode`;
- `retyped`: its `size` parameter goes from `str` to `int`.

The guards ask once and finish on their second leg; `held*` run a minute, so a test
can kill the worker under them. Every body appends a "start" line with its leg to
fault_app's attempt log, so the tests count the bodies that ran.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastmcp import Context, FastMCP
from mcp_types import InputRequiredResult

from fault_app import build_server as build_fault_server
from fault_app import record
from helpers.wire import ask

RELEASES = ("before", "after")


def build_server(release: str, **extension_options: Any) -> FastMCP:
    """fault_app's server with the redeploy tools of `release`."""
    if release not in RELEASES:
        raise ValueError(f"REDEPLOY_RELEASE must be one of {RELEASES}, not {release!r}")
    server = build_fault_server(**extension_options)
    if release == "before":
        tools = {"removed": guard, "held": held, "reshaped": guard, "held_reshaped": held, "retyped": sized}
        tools["old_name"] = guard
        server.tool(guard, name="versioned", version="1", task=True)
    else:
        tools = {"reshaped": guard_with_mode, "held_reshaped": held_with_mode, "retyped": counted}
        tools["new_name"] = guard
        server.disable(names={"disabled"})
    for name, body in {**tools, "disabled": guard}.items():
        server.tool(body, name=name, task=True)
    server.tool(guard, name="versioned", version="2", task=True)
    return server


async def guard(key: str, ctx: Context) -> str | InputRequiredResult:
    """Ask once, finish on the second leg."""
    leg = 1 if ctx.input_responses is None else 2
    record("start", key, leg=leg)
    return ask("go") if leg == 1 else key


async def guard_with_mode(key: str, mode: str, ctx: Context) -> str | InputRequiredResult:
    return await guard(key, ctx)


async def sized(key: str, size: str, ctx: Context) -> str | InputRequiredResult:
    return await guard(key, ctx)


async def counted(key: str, size: int, ctx: Context) -> str | InputRequiredResult:
    return await guard(key, ctx)


async def held(key: str) -> str:
    """Run a minute, so a test can kill its worker under it."""
    record("start", key, leg=1)
    await asyncio.sleep(60)
    return key


async def held_with_mode(key: str, mode: str) -> str:
    return await held(key)


mcp = build_server(os.environ.get("REDEPLOY_RELEASE", "before"))
