"""OpenTelemetry traces that follow a call from `tools/call` into the tool body.

With `tracing` on (`FASTMCP_TEMPORAL_TRACING=1`, needs the `[otel]` extra) the client
we connect carries temporalio's `TracingInterceptor`, which workers built on that
client apply too. FastMCP's own SERVER span for `tools/call` (a child of the
caller's CLIENT span, carried in `_meta`) is current when the task's workflow is
started, so the workflow, the leg activity and every span the tool body opens
land in the caller's trace. Spans are exported by whatever tracer provider the
process installs; nothing here configures exporters.

temporalio calls this interceptor its legacy approach; its `OpenTelemetryPlugin` is kept
off on purpose: it is experimental, and its workers refuse to start unless the process's
global tracer provider is temporalio's replay-safe one, which would make every user of
`tracing` change how they install OpenTelemetry. What it would add (workflow spans with
real durations) matters little here: the work is the tool body, which runs in an
activity, where plain OpenTelemetry spans already nest under the caller's trace.
"""

from __future__ import annotations

from temporalio.client import Interceptor

from fastmcp_temporal._settings import TemporalTasksSettings


def client_interceptors(settings: TemporalTasksSettings) -> list[Interceptor]:
    """The interceptors a client we connect carries; empty with tracing off."""
    if not settings.tracing:
        return []
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as exc:
        raise RuntimeError(
            "FASTMCP_TEMPORAL_TRACING is on but OpenTelemetry's SDK is missing: "
            "pip install 'fastmcp-temporal[otel]', or turn tracing off."
        ) from exc
    return [TracingInterceptor()]
