"""How an operator command (`tasks`, `payloads`) reaches Temporal, and how it stops.

It connects with its options over the `FASTMCP_TEMPORAL_*` environment the extension
reads, never with the server's metrics or tracing, and starts no Temporal of its own: with
no address anywhere it stops and asks for one. Whatever stops a command (`OperatorError`,
a payload store's or Temporal's error) ends it with its message on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from fastmcp_temporal._settings import UI_URL_VARIABLE, TemporalTasksSettings
from fastmcp_temporal.cli._options import setting_overrides
from fastmcp_temporal.connection._client import TemporalConnectionError, connect, resolve_profile
from fastmcp_temporal.connection._stores import PayloadStoreError

DEFAULT_UI_URL = "http://localhost:8233"

Command = Callable[[Client, str], Awaitable[None]]
"""An operator command's body: given the client and the Temporal UI's base URL."""


class OperatorError(Exception):
    """A command cannot do what was asked; the message says why and what to do."""


def execute(args: argparse.Namespace, command: Command) -> None:
    """Connect, run the command, and turn a failure into a message and exit code 1."""
    try:
        asyncio.run(_connected(args, command))
    except (OperatorError, PayloadStoreError, RPCError) as exc:
        sys.exit(f"error: {exc}")


async def _connected(args: argparse.Namespace, command: Command) -> None:
    settings = operator_settings(args)
    try:
        profile = resolve_profile(settings)
        if not profile.address:
            raise OperatorError(
                "No Temporal address: pass --address host:port or set FASTMCP_TEMPORAL_ADDRESS or "
                "TEMPORAL_ADDRESS (an embedded dev server logs its address when it starts)."
            )
        client = await connect(profile, settings)
    except TemporalConnectionError as exc:
        raise OperatorError(str(exc)) from None
    ui_url = (getattr(args, "ui_url", None) or os.environ.get(UI_URL_VARIABLE) or DEFAULT_UI_URL).rstrip("/")
    await command(client, ui_url)


def operator_settings(args: argparse.Namespace) -> TemporalTasksSettings:
    """The connection from the options over `FASTMCP_TEMPORAL_*`; never the server's metrics or tracing."""
    try:
        settings = TemporalTasksSettings(**setting_overrides(args))
    except ValidationError as exc:
        raise OperatorError(str(exc)) from None
    return settings.model_copy(update={"metrics_address": None, "tracing": False})
