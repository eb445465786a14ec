"""An upgrade of FastMCP or fastmcp-tasks that moves what this package relies on fails at start-up.

Proves that:

- the installed versions pass the start-up check, and every private use of theirs lives
  in the adapters (`fastmcp_temporal/_fastmcp_private.py`) or the check that verifies them
  (`fastmcp_temporal/_upstream_check.py`);
- creating a `TemporalTasksExtension` or a `McpTasksPlugin` fails, naming the installed
  FastMCP and fastmcp-tasks versions and what moved, when a symbol is gone;
- the changes that would otherwise break a task silently are caught too: answers that no
  longer reach `ctx.input_responses`, progress FastMCP no longer reads from Docket's
  `current_execution`, message texts matched word for word, and error texts a task writes
  as FastMCP's inline call, the reference's tasks and Docket write them;
- checking those texts, which calls FastMCP with tools that raise, leaves no log and no span;
- the check runs once per process: a construction after the first does not run it again,
  and a failed check fails every construction after it.

Each test starts and ends with the check's cached result cleared, so what a test breaks on
purpose is checked, and not reported to the tests after it.
"""

from __future__ import annotations

import ast
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import docket.dependencies
import docket.worker
import fastmcp.server.dependencies
import fastmcp.server.server
import fastmcp.telemetry
import fastmcp_tasks.context
import fastmcp_tasks.input_loop
import pytest
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.context import Context
from fastmcp.tools.function_tool import FunctionTool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import fastmcp_temporal
from fastmcp_temporal import McpTasksPlugin, TemporalTasksExtension, _fastmcp_private, _upstream_check
from fastmcp_temporal._fastmcp_private import UpstreamChanged
from fastmcp_temporal._upstream_check import check_upstream, upstream_failure
from fastmcp_temporal.worker._progress import LegProgress

ROOT = Path(fastmcp_temporal.__file__).parent
OURS = [
    *ROOT.rglob("*.py"),
    *(ROOT.parent / "activities").rglob("*.py"),
    *(ROOT.parent / "workflows").rglob("*.py"),
]
UPSTREAM = ("fastmcp", "fastmcp_tasks", "docket", "mcp")
# The adapters, and the check that verifies them: the only modules that name an upstream internal.
COMPATIBILITY = {ROOT / "_fastmcp_private.py", ROOT / "_upstream_check.py"}
# What fastmcp_tasks exports from its package; its modules are internals.
FASTMCP_TASKS_EXPORTS = {"TasksExtension", "ToolTask", "call_tool_task", "__version__"}


@pytest.fixture(autouse=True)
def fresh_check() -> Iterator[None]:
    upstream_failure.cache_clear()
    yield
    upstream_failure.cache_clear()


def test_the_installed_fastmcp_has_everything_this_package_relies_on() -> None:
    check_upstream()
    assert len(_upstream_check.RELIANCES) >= 30


def test_private_upstream_names_are_used_only_in_the_adapters_and_their_check() -> None:
    offenders = []
    for path in OURS:
        if path in COMPATIBILITY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or (node.module or "").split(".")[0] not in UPSTREAM:
                continue
            names = {alias.name for alias in node.names}
            private = {name for name in names if name.startswith("_")}
            internal_module = node.module.startswith(("fastmcp_tasks.", "docket"))
            unexported = node.module == "fastmcp_tasks" and names - FASTMCP_TASKS_EXPORTS
            if private or internal_module or unexported:
                offenders.append(
                    f"{path.relative_to(ROOT.parent)}: from {node.module} import {sorted(names)}"
                )
            if node.module == "fastmcp.server.context" and "Context" in names and _subclasses_context(path):
                offenders.append(f"{path.relative_to(ROOT.parent)}: subclasses Context")
    assert not offenders, "\n".join(offenders)


def _subclasses_context(path: Path) -> bool:
    classes = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]
    return any(ast.unparse(base) == "Context" for cls in classes for base in cls.bases)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (fastmcp.server.dependencies, "_is_client_tool_call"),
        (fastmcp_tasks.context, "_apply_snapshot_to_context"),
        (docket.dependencies, "current_execution"),
    ],
)
def test_a_missing_symbol_fails_the_extension_at_creation(
    monkeypatch: pytest.MonkeyPatch, module: object, name: str
) -> None:
    monkeypatch.delattr(module, name)
    with pytest.raises(UpstreamChanged) as raised:
        TemporalTasksExtension(worker=False)
    message = str(raised.value)
    assert f"{module.__name__}:{name}: {module.__name__}:{name} is gone" in message
    slim, tasks = metadata.version("fastmcp-slim"), metadata.version("fastmcp-tasks")
    assert f"fastmcp-slim {slim}, fastmcp-tasks {tasks}" in message
    # what to install instead: the declared ranges, and the lowest release in them as a command
    declared = r"ranges it declares \(fastmcp\[tasks\]\S+, fastmcp-slim\S+, fastmcp-tasks[<>=]"
    assert re.search(declared, message)
    assert re.search(r'pip install "fastmcp\[tasks\]==\d+\.\d+\.\d+"', message)


def test_a_missing_symbol_fails_the_plugin_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FastMCP("plugged")
    server.add_extension(TemporalTasksExtension(worker=False))
    upstream_failure.cache_clear()
    monkeypatch.delattr(fastmcp_tasks.context, "_resolve_owning_server")
    with pytest.raises(UpstreamChanged, match=r"_resolve_owning_server is gone.*mounted tools run"):
        McpTasksPlugin(server)


def test_a_construction_after_the_first_does_not_run_the_check_again(monkeypatch: pytest.MonkeyPatch) -> None:
    TemporalTasksExtension(worker=False)
    monkeypatch.delattr(fastmcp_tasks.context, "_resolve_owning_server")
    TemporalTasksExtension(worker=False)
    upstream_failure.cache_clear()
    with pytest.raises(UpstreamChanged, match="_resolve_owning_server is gone"):
        TemporalTasksExtension(worker=False)


def test_a_failed_check_fails_every_construction_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FastMCP("plugged")
    server.add_extension(TemporalTasksExtension(worker=False))
    upstream_failure.cache_clear()
    monkeypatch.delattr(fastmcp_tasks.context, "_resolve_owning_server")
    with pytest.raises(UpstreamChanged) as first:
        TemporalTasksExtension(worker=False)
    monkeypatch.undo()
    with pytest.raises(UpstreamChanged) as again:
        McpTasksPlugin(server)
    assert str(again.value) == str(first.value)


def test_answers_that_would_no_longer_reach_the_tool_fail_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Context, "input_responses", property(lambda self: None))
    with pytest.raises(UpstreamChanged, match="answers stop reaching the tool"):
        check_upstream()


def test_progress_fastmcp_would_no_longer_read_from_docket_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def report_progress(self: Context, progress: float, total: float | None = None) -> None:
        """A FastMCP whose progress goes somewhere else."""

    monkeypatch.setattr(Context, "report_progress", report_progress)
    with pytest.raises(
        UpstreamChanged, match=r"Context.report_progress: it no longer reads current_execution"
    ):
        check_upstream()


async def _rewritten(*args: object, **kwargs: object) -> None:
    """An upgraded FastMCP's version of a function, which words its errors differently."""


@pytest.mark.parametrize(
    ("owner", "name", "target"),
    [
        (FunctionTool, "_run_body", "fastmcp.tools.function_tool:FunctionTool"),
        (fastmcp.server.dependencies, "_resolve_fastmcp_dependencies", "fastmcp.server.dependencies"),
        (docket.worker.Worker, "_execute", "docket.worker:Worker"),
    ],
)
def test_a_message_matched_word_for_word_that_fastmcp_no_longer_says_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch, owner: object, name: str, target: str
) -> None:
    monkeypatch.setattr(owner, name, _rewritten)
    with pytest.raises(UpstreamChanged, match=f"{target}: its code no longer says"):
        check_upstream()


def _reworded(call_tool: Callable[..., Any]) -> Callable[..., Any]:
    """An upgraded FastMCP's `call_tool`, whose core path (the one that runs the tool, past the
    middleware) words the error of a tool that raised otherwise."""

    async def call_tool_reworded(
        self: FastMCP, *args: Any, run_middleware: bool = True, **kwargs: Any
    ) -> Any:
        try:
            return await call_tool(self, *args, run_middleware=run_middleware, **kwargs)
        except ToolError as error:
            if run_middleware:
                raise
            raise ToolError(f"The tool failed: {error}") from error

    return call_tool_reworded


def test_an_inline_error_text_fastmcp_words_otherwise_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(FastMCP, "call_tool", _reworded(FastMCP.call_tool))
    reported = (
        "FastMCP.call_tool: rate_limited (masked=True): inline 'The tool failed: Rate limited by upstream "
        "API, please retry later', durable 'Rate limited by upstream API, please retry later'"
    )
    with pytest.raises(UpstreamChanged, match=re.escape(reported)):
        check_upstream()


def test_an_upstream_timeout_fastmcp_no_longer_tells_apart_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fastmcp.server.server, "is_timeout_error", lambda exc: False)
    reported = (
        "timed_out (masked=True): inline \"Error calling tool 'timed_out'\", "
        "durable 'Upstream request timed out, please retry'"
    )
    with pytest.raises(UpstreamChanged, match=re.escape(reported)):
        check_upstream()


def test_a_task_error_text_the_reference_words_otherwise_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error_result = fastmcp_tasks.input_loop._error_result
    monkeypatch.setattr(
        fastmcp_tasks.input_loop, "_error_result", lambda name, exc: error_result(f"tasks.{name}", exc)
    )
    reported = "_error_result: masked=True: the reference's \"Error calling tool 'tasks.failed'\""
    with pytest.raises(UpstreamChanged, match=re.escape(reported)):
        check_upstream()


def test_checking_the_error_texts_leaves_no_log_and_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    records: list[logging.LogRecord] = []
    collector = logging.Handler()
    collector.emit = records.append  # type: ignore[method-assign]
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    monkeypatch.setattr(fastmcp.telemetry, "otel_get_tracer", provider.get_tracer)
    server_log = logging.getLogger(FastMCP.__module__)
    server_log.addHandler(collector)
    try:
        check_upstream()
    finally:
        server_log.removeHandler(collector)
    assert [record.getMessage() for record in records] == []
    assert [span.name for span in spans.get_finished_spans()] == []


def test_the_leg_progress_has_what_fastmcp_calls_on_a_docket_execution() -> None:
    progress = LegProgress()
    assert all(hasattr(progress, member) for member in _fastmcp_private.DOCKET_PROGRESS_MEMBERS)


def test_an_upstream_deprecation_of_what_this_package_uses_fails_the_suite() -> None:
    """pyproject's filterwarnings: a deprecation attributed to our code (an upstream API we call
    warns with its caller's stack level) is an error; one inside third-party code is not."""
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit(
            "use the new API", DeprecationWarning, "x.py", 1, module="fastmcp_temporal.server"
        )
    with pytest.warns(DeprecationWarning):
        warnings.warn_explicit("use the new API", DeprecationWarning, "x.py", 1, module="botocore.client")
