"""fastmcp-temporal against fastmcp-tasks and bare Temporal, in one run on one dev server.

    .venv/bin/python -m bench run compare [--quick] [--shape production|same-process] [--parked 10000]
        [--profile] [--engines ...] [--baseline ../other-checkout]

Starts one sqlite-WAL Temporal dev server (as the project's launcher does) and, when
`redis-server` is installed, one throwaway Redis; then runs every engine in each shape
(`bench/deploy.py`), production's first:

- `tasks-memory`: fastmcp-tasks (FastMCP's own engine) on Docket `memory://`;
- `tasks-redis`: fastmcp-tasks on that Redis (skipped, with a note, without one);
- `bare`: a Temporal workflow running one activity, with the same worker settings,
  timeouts and heartbeat cadence as a fastmcp-temporal leg (`bench/bare_engine.py`);
- `bare-mcp`: the MCP floor over bare Temporal: that workflow behind two plain MCP tools
  (no tasks extension), `bare_start` and `bare_result`, the two requests any MCP tasks
  client must make; the least an MCP tasks engine on Temporal could cost (end to end,
  submit, the plain-call floor and burst only: no task reads, cancel, history or parking).
  Its burst runs again with a third call between the two, `bare_status` (no Temporal
  call): the FastMCP client's first `tasks/get`, which it sends at once and an engine
  that does not hold it answers;
- `temporal`: this project; its trivial tool also runs as a `leg="local"` tool (end to
  end, burst and history measured apart).

Shapes: `production` puts the client in its own process and the engine in others (an
API server with `worker=False` over streamable HTTP plus a `fastmcp-temporal worker`;
bare Temporal's worker process; fastmcp-tasks' server plus, on Redis, a Docket worker);
`same-process` runs client, server and worker in one. MCP engines are driven through an
unmodified `fastmcp.Client`, the bare engine through a `temporalio` client
(`bench/drivers.py`). Rounds are interleaved across engines, so noise on a shared
machine hits all alike. Measured: end to end, submit, `tasks/get` (bare: `describe()`)
on a running and on a finished task, `tasks/cancel` until the tool body sees
`CancelledError`, the MCP floors (a plain `tools/call`; a `tasks/get` that calls no
Temporal), the workflow's own duration in Temporal, throughput of a burst with the CPU
each process spent on it, Temporal RPCs, history events and billable Actions per trivial
task, and memory per parked task. Writes the run's result and, beside it, its chart
(`pip install -e ".[bench]"`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.deploy import SHAPES, Backends, Deployment, deploy, start_redis
from bench.harness import RESULTS, dev_server
from bench.metrics import percentiles, process_tree
from bench.report import chart, print_table

QUESTION = (
    "What does a task cost on fastmcp-temporal against fastmcp-tasks and bare Temporal (the paired "
    "baseline), same-process and in production's shape: latency, throughput, CPU, requests, Actions, memory?"
)
QUICK = {"passes": 1, "rounds": 10, "burst": 50, "parked": 200}
ENGINES = ("tasks-memory", "tasks-redis", "bare", "bare-mcp", "temporal", "temporal-baseline")
_UNPARKED = ("bare-mcp",)  # no parked shape: two plain tools cannot wait for input


async def run(args: argparse.Namespace) -> dict[str, Any]:
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / "compare-children.log"
    log.write_text("")
    args.shapes = SHAPES if args.shape == "both" else (args.shape,)
    report: dict[str, Any] = {
        "settings": {
            "rounds": args.rounds,
            "passes": args.passes,
            "burst": args.burst,
            "parked": args.parked,
        },
        "notes": [],
        "shapes": {},
    }
    async with dev_server() as temporal:
        state, server = temporal.state, temporal.server
        redis, redis_url = start_redis(state)
        if redis is None:
            report["notes"].append(
                "tasks-redis skipped: no redis-server on PATH (apt-get install redis-server)"
            )
        backends = Backends(
            server.address, process_tree(server.pid), redis_url, [redis.pid] if redis is not None else []
        )
        try:
            for shape in args.shapes:
                started = time.monotonic()
                print(f"shape {shape}", flush=True)
                engines = [kind for kind in args.engines if _available(kind, args, redis_url)]
                report["shapes"][shape] = await _run_shape(shape, engines, backends, state / shape, log, args)
                report["shapes"][shape]["seconds"] = round(time.monotonic() - started)
        finally:
            if redis is not None:
                redis.terminate()
                redis.wait(10)
    if "production" in args.shapes and "tasks-memory" in args.engines:
        report["notes"].append(
            "production shape, fastmcp-tasks (memory): memory:// reaches no other process, so its server "
            "runs the tools with its embedded Docket worker; the client is apart"
        )
    if "production" in args.shapes and "tasks-redis" in report["shapes"].get("production", {}).get(
        "engines", {}
    ):
        report["notes"].append(
            "production shape, fastmcp-tasks (Redis): a fastmcp-tasks server always runs a Docket worker, so "
            "tasks are shared between the server and the `fastmcp_tasks.worker_cli worker` process"
        )
    return report


def _available(kind: str, args: argparse.Namespace, redis_url: str | None) -> bool:
    if kind == "tasks-redis":
        return redis_url is not None
    return kind != "temporal-baseline" or args.baseline is not None


async def _run_shape(
    shape: str, engines: list[str], backends: Backends, state: Path, log: Path, args: argparse.Namespace
) -> dict[str, Any]:
    deployments: dict[str, Deployment] = {}
    try:
        for kind in engines:
            deployments[kind] = await deploy(kind, shape, backends, state / kind, log, args.baseline)
        return await _measure(args, deployments)
    finally:
        for deployment in deployments.values():
            await deployment.stop()


async def _measure(args: argparse.Namespace, deployments: dict[str, Deployment]) -> dict[str, Any]:
    order = list(deployments)
    samples: dict[str, dict[str, list[float]]] = {k: collections.defaultdict(list) for k in order}
    bursts: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
    for pass_ in range(args.passes):
        for round_ in range(args.rounds):
            shift = (pass_ * args.rounds + round_) % len(order)
            for kind in order[shift:] + order[:shift]:
                for metric, values in (await deployments[kind].call("round")).items():
                    samples[kind][metric].extend(values)
            print(f"\rpass {pass_ + 1}/{args.passes} round {round_ + 1}/{args.rounds}", end="", flush=True)
        for kind in order[pass_ % len(order) :] + order[: pass_ % len(order)]:
            bursts[kind].append(await deployments[kind].call("burst", n=args.burst))
    print()
    profile = {}
    if args.profile and "temporal" in deployments:  # an extra burst: py-spy slows the process it samples
        profile = await _profiled(deployments["temporal"], args.burst)
    history = {k: await deployments[k].call("history") for k in order if k.startswith(("bare", "temporal"))}
    parked = {}
    for kind in [k for k in order if k not in _UNPARKED] if args.parked else ():
        print(f"parking {args.parked} tasks on {kind}", flush=True)
        parked[kind] = await deployments[kind].call("park", n=args.parked)
    engines = {
        kind: _engine_entry(samples[kind], bursts[kind], history.get(kind), parked.get(kind))
        for kind in order
    }
    result: dict[str, Any] = {"engines": engines, "ratios": _ratios(engines)}
    if profile:
        result["profile"] = profile
    return result


def _engine_entry(
    samples: dict[str, list[float]],
    bursts: list[dict[str, Any]],
    history: dict[str, Any] | None,
    parked: dict[str, Any] | None,
) -> dict[str, Any]:
    """One engine's figures in one shape: latency summaries, then the bursts' medians."""
    entry: dict[str, Any] = {metric: percentiles(values) for metric, values in samples.items()}
    entry["throughput_tasks_per_s"] = round(statistics.median(b["tasks_per_s"] for b in bursts), 1)
    entry["throughput_by_pass"] = [round(b["tasks_per_s"], 1) for b in bursts]
    roles = bursts[-1]["cpu_ms_per_task"]
    cpu = {role: round(statistics.median(b["cpu_ms_per_task"][role] for b in bursts), 2) for role in roles}
    entry["cpu_ms_per_task"] = cpu
    entry["tasks_per_s_per_core"] = {
        role: round(1000 / ms, 1)
        for role, ms in cpu.items()
        if role in ("server", "worker", "engine") and ms > 0
    }
    if "task_reads_per_task" in bursts[-1]:
        entry["task_reads_per_task"] = statistics.median(b["task_reads_per_task"] for b in bursts)
    for burst_key, entry_key in (
        ("local_leg_tasks_per_s", "throughput_local_leg_tasks_per_s"),
        ("status_read_tasks_per_s", "throughput_status_read_tasks_per_s"),
    ):
        if burst_key in bursts[-1]:
            entry[entry_key] = round(statistics.median(b[burst_key] for b in bursts), 1)
    if "rpcs_per_task" in bursts[-1]:
        entry["temporal_rpcs_per_task"] = bursts[-1]["rpcs_per_task"]
        entry["heartbeats_per_task"] = bursts[-1]["rpcs_per_task"].get("RecordActivityTaskHeartbeat", 0)
    if history:
        entry["history"] = history
        entry["billable_actions_per_task"] = history["billable_events"] + entry.get("heartbeats_per_task", 0)
    if parked:
        entry["parked"] = parked
    return entry


async def _profiled(deployment: Deployment, n: int) -> dict[str, Any]:
    """py-spy each of the engine's processes (not the client) through one extra burst."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    roles = [role for role in ("engine", "server", "worker") if role in deployment.pids]
    raw = {role: RESULTS / f"profile-temporal-{deployment.shape}-{role}.txt" for role in roles}
    recorders = [
        await asyncio.create_subprocess_exec(
            *(spy, "record", "--pid", str(deployment.pids[role][0]), "--format", "raw", "--rate", "200"),
            *("-o", str(raw[role])),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role in roles
    ]
    await asyncio.sleep(1.0)
    await deployment.call("burst", n=n)
    for recorder in recorders:
        recorder.send_signal(2)
        await recorder.wait()
    return {role: _top_frames(raw[role]) for role in roles}


def _top_frames(raw: Path) -> dict[str, Any]:
    """The 25 frames with the most samples in a py-spy raw recording, by own and by total time."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    count = 0
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, weight = line.rpartition(" ")
        frames = stack.split(";")
        samples_ = int(weight)
        count += samples_
        own[_frame(frames[-1])] += samples_
        for frame in {_frame(f) for f in frames}:
            total[frame] += samples_
    top = lambda c: [(f, round(100 * n / max(count, 1), 1)) for f, n in c.most_common(25)]  # noqa: E731
    return {"samples": count, "top_own_pct": top(own), "top_total_pct": top(total)}


def _frame(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, _line = where.rpartition(":")
    marker = "site-packages/"
    path = path.split(marker, 1)[1] if marker in path else path.rsplit("/", 2)[-1]
    return f"{name} ({path})"


def _ratios(engines: dict[str, Any]) -> dict[str, Any]:
    metrics = ("end_to_end", "submit", "get_running", "get_finished", "cancel")
    ratios: dict[str, Any] = {}
    for base in ("bare", "bare-mcp", "tasks-memory", "temporal-baseline"):
        if base not in engines or "temporal" not in engines:
            continue
        ours, ref = engines["temporal"], engines[base]
        entry = {f"{m}_p50": round(ours[m]["p50"] / ref[m]["p50"], 2) for m in metrics if m in ref}
        entry["throughput"] = round(ours["throughput_tasks_per_s"] / ref["throughput_tasks_per_s"], 2)
        entry["throughput_paired"] = _paired(ours["throughput_by_pass"], ref["throughput_by_pass"])
        if base == "bare":  # the lowest ratio a request through the MCP stack could reach
            entry["submit_floor_p50"] = _over(
                ref["submit"]["p50"] + ours["mcp_call_floor"]["p50"], ref["submit"]
            )
            entry["get_running_floor_p50"] = _over(
                ref["get_running"]["p50"] + ours["get_finished"]["p50"], ref["get_running"]
            )
        if base == "bare" and "end_to_end_local_leg" in ours:  # a leg="local" tool against the bare default
            local_p50 = ours["end_to_end_local_leg"]["p50"]
            entry["end_to_end_local_leg_p50"] = round(local_p50 / ref["end_to_end"]["p50"], 2)
            entry["throughput_local_leg"] = round(
                ours["throughput_local_leg_tasks_per_s"] / ref["throughput_tasks_per_s"], 2
            )
        if base == "bare" and "bare-mcp" in engines:  # the floor's own throughput against bare
            entry["throughput_floor_status_read"] = round(
                engines["bare-mcp"]["throughput_status_read_tasks_per_s"] / ref["throughput_tasks_per_s"], 2
            )
            entry["throughput_floor"] = round(
                engines["bare-mcp"]["throughput_tasks_per_s"] / ref["throughput_tasks_per_s"], 2
            )
            entry["throughput_floor_paired"] = _paired(
                engines["bare-mcp"]["throughput_by_pass"], ref["throughput_by_pass"]
            )
        entry["cpu_ms_per_task"] = round(_engine_cpu(ours) / _engine_cpu(ref), 2)
        ratios[f"temporal/{base}"] = entry
    if "history" in engines.get("bare", {}) and "history" in engines.get("temporal", {}):
        ratios["history_events_extra"] = (
            engines["temporal"]["history"]["events"] - engines["bare"]["history"]["events"]
        )
    return ratios


def _paired(ours: list[float], ref: list[float]) -> dict[str, float]:
    """Throughput ratios of the bursts one pass ran back to back: a machine that speeds up
    or slows down between passes moves both sides of each, so their spread is the noise."""
    ratios = [o / r for o, r in zip(ours, ref)]
    return {
        "median": round(statistics.median(ratios), 2),
        "min": round(min(ratios), 2),
        "max": round(max(ratios), 2),
    }


def _over(value: float, base: dict[str, float]) -> float:
    return round(value / base["p50"], 2)


def _engine_cpu(entry: dict[str, Any]) -> float:
    """CPU ms per task in the engine's own processes (client, server, worker), backends aside."""
    return sum(
        ms
        for role, ms in entry["cpu_ms_per_task"].items()
        if role in ("engine", "client", "server", "worker")
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        choices=(*SHAPES, "both"),
        default="both",
        help="production (client, API server and worker in separate processes), same-process, or both",
    )
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument(
        "--parked", type=int, default=1000, help="tasks parked on input per engine (try 10000)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the fastmcp-temporal processes in an extra burst"
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=ENGINES,
        default=list(ENGINES),
        help="run only these engines (default: all available)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run the fastmcp_temporal package found in this folder (e.g. an older checkout), for A/B",
    )


def report(figures: dict[str, Any], path: Path) -> None:
    """Print the tables and draw the chart beside the result."""
    try:
        chart(figures, path.with_suffix(".png"))
    except ImportError:
        print('matplotlib missing: pip install -e ".[bench]" for the chart')
    print_table(figures)
