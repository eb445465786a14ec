"""One OpenTelemetry trace from the client's `tools/call` through Temporal into the tool body.

FastMCP's client span carries the trace in `_meta`; the server's `tools/call` span is
current when the task's workflow starts; temporalio's `TracingInterceptor` carries it
through the workflow and the leg activity, where the tool body opens its own span.
Spans are collected by the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastmcp import Client, FastMCP
from fastmcp_tasks.client import call_tool_task
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helpers.waits import DEADLINE

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (installed once) exporting into memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


def _lineage(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The names of `span`'s ancestors, nearest first."""
    by_id = {s.context.span_id: s for s in spans}
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_the_tool_body_span_descends_from_the_clients_tools_call(make_extension, exporter) -> None:
    mcp = FastMCP("traced")
    mcp.add_extension(make_extension(tracing=True))

    @mcp.tool(task=True)
    async def crunch(n: int) -> int:
        with trace.get_tracer("tool").start_as_current_span("crunch body"):
            return n * 2

    exporter.clear()
    async with Client(mcp) as client:
        with trace.get_tracer("agent").start_as_current_span("agent turn"):
            task = await call_tool_task(client, "crunch", {"n": 21})
            assert (await task.wait(timeout=DEADLINE)).status == "completed"
    spans = list(exporter.get_finished_spans())

    (body,) = [s for s in spans if s.name == "crunch body"]
    (turn,) = [s for s in spans if s.name == "agent turn"]
    assert _lineage(body, spans) == [
        "RunActivity:run_tool_leg",
        "StartActivity:run_tool_leg",
        "StartWorkflow:McpTaskWorkflow",
        "tools/call",  # FastMCP's SERVER span
        "MCP send tools/call crunch",
        "tools/call",  # FastMCP's CLIENT span
        "agent turn",
    ]
    polls = [s for s in spans if s.name == "tasks/get" and s.kind == trace.SpanKind.SERVER]
    assert polls, "the client polled tasks/get"
    assert {s.context.trace_id for s in polls} == {body.context.trace_id} == {turn.context.trace_id}
    assert "agent turn" in _lineage(polls[-1], spans)
