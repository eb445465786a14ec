"""The `compare` scenario's tables and chart: one table per shape, production's first.

Latencies are p50 / p95 ms. CPU is milliseconds per task of a burst in each process of
the engine (the MCP client, the API server, the worker; `engine` where they share one
process; the Temporal dev server or Redis the engine used), and tasks/s per core is
1,000 divided by the CPU ms per task of an API server or worker: what one fully busy
core of that process would serve.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

LABELS = {
    "tasks-memory": "fastmcp-tasks (memory)",
    "tasks-redis": "fastmcp-tasks (Redis)",
    "bare": "bare Temporal",
    "bare-mcp": "bare Temporal + 2 MCP calls",
    "temporal": "fastmcp-temporal",
    "temporal-baseline": "fastmcp-temporal (baseline)",
}
COLORS = {
    "tasks-memory": "#9ecae1",
    "tasks-redis": "#d62728",
    "bare": "#7f7f7f",
    "bare-mcp": "#c7c7c7",
    "temporal": "#2ca02c",
    "temporal-baseline": "#98df8a",
}
ROLES = ("client", "server", "worker", "engine", "Temporal dev server", "Redis")
ROLE_COLORS = dict(zip(ROLES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#bbbbbb", "#e377c2")))
LATENCY_ROWS = (
    ("end to end", "end_to_end"),
    ("submit", "submit"),
    ("tasks/get running (bare: describe)", "get_running"),
    ("tasks/get finished (the floor under tasks/get: no Temporal call)", "get_finished"),
    ("cancel -> CancelledError", "cancel"),
    ("workflow duration in Temporal", "workflow_duration"),
    ("end to end, tool as a local activity", "end_to_end_local_activity"),
    ('end to end, `leg="local"` tool', "end_to_end_local_leg"),
    ("MCP floor: a tools/call of a plain tool", "mcp_call_floor"),
)


def print_table(report: dict[str, Any]) -> None:
    """Print every shape's table in Markdown, then its ratios, then the run's notes.

    Args:
        report: what the `compare` scenario measured.
    """
    for shape, result in report["shapes"].items():
        print(f"\n### {shape} ({result['seconds']} s)\n")
        _print_shape(result["engines"], report["settings"]["parked"])
        print(json.dumps(result["ratios"], indent=1))
    for note in report["notes"]:
        print("note:", note)


def _print_shape(engines: dict[str, Any], parked: int) -> None:
    kinds = list(engines)
    print("| p50 / p95 ms | " + " | ".join(LABELS[e] for e in kinds) + " |")
    print("| --- |" + " --- |" * len(kinds))
    for label, metric in LATENCY_ROWS:
        cells = [f"{v['p50']:.1f} / {v['p95']:.1f}" if (v := engines[e].get(metric)) else "—" for e in kinds]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, fmt in _figure_rows(engines, parked):
        print(f"| {label} | " + " | ".join(fmt(engines[e]) for e in kinds) + " |")


def _figure_rows(engines: dict[str, Any], parked: int) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("throughput (tasks/s)", lambda v: f"{v['throughput_tasks_per_s']:.0f}"),
        ('throughput, `leg="local"` tool (tasks/s)', _get("throughput_local_leg_tasks_per_s", "{:.0f}")),
        (
            "throughput, a third call per task: a status read (tasks/s)",
            _get("throughput_status_read_tasks_per_s", "{:.0f}"),
        ),
    ]
    roles = [role for role in ROLES if any(role in v["cpu_ms_per_task"] for v in engines.values())]
    rows += [(f"CPU ms per task (burst): {role}", _role(role, "cpu_ms_per_task", "{:.2f}")) for role in roles]
    rows += [
        (f"tasks/s per core of {role}", _role(role, "tasks_per_s_per_core", "{:.0f}"))
        for role in ("server", "worker", "engine")
        if role in roles
    ]
    rows += [
        ("MCP tasks/get requests per task (burst)", _get("task_reads_per_task", "{:.1f}")),
        ("history events per trivial task", lambda v: str(v["history"]["events"]) if "history" in v else "—"),
        (
            'history events, local activity / `leg="local"` tool',
            lambda v: _local_events(v.get("history", {})),
        ),
        ("billable Actions per trivial task", _get("billable_actions_per_task", "{:g}")),
        (
            "Temporal RPCs per task (burst)",
            lambda v: (
                f"{sum(v['temporal_rpcs_per_task'].values()):.1f}" if "temporal_rpcs_per_task" in v else "—"
            ),
        ),
    ]
    if parked:
        rows.append((f"MB per 1,000 parked, by process ({parked} parked)", _parked))
    return rows


def _get(key: str, form: str) -> Callable[[dict[str, Any]], str]:
    return lambda v: "—" if v.get(key) is None else form.format(v[key])


def _role(role: str, key: str, form: str) -> Callable[[dict[str, Any]], str]:
    return lambda v: "—" if role not in v.get(key, {}) else form.format(v[key][role])


def _parked(entry: dict[str, Any]) -> str:
    if "parked" not in entry:
        return "—"
    per_role = entry["parked"]["mb_per_1000"]
    return ", ".join(
        f"{role} {mb:.0f}" for role, mb in per_role.items() if role in ("server", "worker", "engine")
    )


def _local_events(history: dict[str, Any]) -> str:
    local = history.get("local_leg") or history.get("local_activity")
    return f"{local['events']} ({local['billable_events']} billable)" if local else "—"


def chart(report: dict[str, Any], path: Path) -> None:
    """Latency, throughput and CPU per process of every engine, one row of panels per shape.

    Args:
        report: what the `compare` scenario measured.
        path: the PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("end_to_end", "end to end, ms"),
        ("submit", "submit, ms"),
        ("get_running", "tasks/get (running), ms"),
        ("cancel", "cancel -> CancelledError, ms"),
        ("throughput_tasks_per_s", "throughput, tasks/s (higher is better)"),
        ("cpu_ms_per_task", "CPU ms per task, by process"),
    ]
    shapes = list(report["shapes"])
    fig, axes = plt.subplots(
        len(shapes), len(panels), figsize=(3.3 * len(panels), 4 * len(shapes)), squeeze=False
    )
    for row, shape in zip(axes, shapes):
        engines = report["shapes"][shape]["engines"]
        for ax, (metric, title) in zip(row, panels):
            if metric == "cpu_ms_per_task":
                _cpu_panel(ax, engines)
            else:
                _bar_panel(ax, engines, metric)
            ax.set_xticks(
                range(len(engines)), [LABELS[e] for e in engines], rotation=25, ha="right", fontsize=7
            )
            spread = "" if metric in ("throughput_tasks_per_s", "cpu_ms_per_task") else " (p50, bar to p95)"
            ax.set_title(f"{shape}: {title}{spread}", fontsize=8)
    fig.suptitle(
        "fastmcp-temporal vs fastmcp-tasks vs bare Temporal, one run, one sqlite-WAL dev server", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _bar_panel(ax: Any, engines: dict[str, Any], metric: str) -> None:
    heights, errors = [], []
    for engine in engines.values():
        value = engine.get(metric)
        if isinstance(value, dict):
            heights.append(value["p50"]), errors.append(value["p95"] - value["p50"])
        else:
            heights.append(value or 0), errors.append(0)
    spread = [[0] * len(errors), errors] if any(errors) else None
    ax.bar(range(len(engines)), heights, yerr=spread, color=[COLORS[e] for e in engines], capsize=3)


def _cpu_panel(ax: Any, engines: dict[str, Any]) -> None:
    bottoms = [0.0] * len(engines)
    for role in ROLES:
        heights = [engine["cpu_ms_per_task"].get(role, 0) for engine in engines.values()]
        if any(heights):
            ax.bar(range(len(engines)), heights, bottom=bottoms, color=ROLE_COLORS[role], label=role)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.legend(fontsize=6)
