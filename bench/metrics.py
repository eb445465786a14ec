"""The bench's one metrics layer: latency percentiles, CPU, memory, Temporal requests and Actions.

Every scenario summarises a latency sample with `percentiles` (keys `p50`, `p95`, `p99`, `max`,
`n`, in the sample's own unit), and reads the rest from outside the processes it measures:
CPU and memory from `/proc`, so a process is measured the same way whether it is this one or
another; Temporal requests by operation from each process's SDK metrics (served for
Prometheus, or kept in memory by `CallCounter`); the dev server's own count of requests by
operation and of billable Actions from its metrics port (`dev_server_counts`).
"""

from __future__ import annotations

import collections
import os
import re
import runpy
import statistics
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_RPC_SAMPLE = re.compile(r"^temporal_(?:long_)?request(?:_total)?\{([^}]*)\} (\S+)$", re.MULTILINE)
_OPERATION = re.compile(r'operation="([^"]+)"')
_SERVER_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$", re.MULTILINE)
# What a request is for, by operation; anything else is `other`. The SDK counts a history long
# poll (`wait_new_event`) as an ordinary request, so `history` holds long polls and plain reads.
_KINDS = {
    "DescribeWorkflowExecution": "describe",
    "GetWorkflowExecutionHistory": "history",
    "GetWorkflowExecutionHistoryReverse": "history",
    "ListWorkflowExecutions": "list/visibility",
    "CountWorkflowExecutions": "list/visibility",
    "ScanWorkflowExecutions": "list/visibility",
    "SignalWorkflowExecution": "signal",
    "SignalWithStartWorkflowExecution": "signal",
    "UpdateWorkflowExecution": "update",
    "PollWorkflowExecutionUpdate": "update",
    "QueryWorkflow": "query",
    "StartWorkflowExecution": "start",
    "RequestCancelWorkflowExecution": "cancel",
    "TerminateWorkflowExecution": "cancel",
    "RecordActivityTaskHeartbeat": "heartbeat",
    "RecordActivityTaskHeartbeatById": "heartbeat",
    "PollWorkflowTaskQueue": "worker poll",
    "PollActivityTaskQueue": "worker poll",
    "PollNexusTaskQueue": "worker poll",
    "RecordWorkerHeartbeat": "worker heartbeat",
}


def percentiles(samples: list[float], digits: int = 2) -> dict[str, float]:
    """The p50, p95, p99 and max of a latency sample, and its size, rounded to `digits`.

    Args:
        samples: the measured values, in one unit (the scenario names it in its keys).
        digits: decimal places kept.
    """
    if not samples:
        return {"n": 0}
    if len(samples) == 1:
        only = round(samples[0], digits)
        return {"p50": only, "p95": only, "p99": only, "max": only, "n": 1}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50": round(statistics.median(samples), digits),
        "p95": round(cuts[94], digits),
        "p99": round(cuts[98], digits),
        "max": round(max(samples), digits),
        "n": len(samples),
    }


def percentiles_ms(seconds: list[float], digits: int = 2) -> dict[str, float]:
    """`percentiles` in milliseconds of a sample taken in seconds."""
    return percentiles([s * 1000 for s in seconds], digits)


async def timed_ms(rounds: int, action: Callable[[], Awaitable[object]]) -> list[float]:
    """Milliseconds each of `rounds` sequential runs of `action` took."""
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU the processes have used so far, all their threads included.

    Args:
        pids: the processes to add up; one that has exited counts 0.
    """
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS_PER_S


def rss_mb(pids: list[int]) -> float:
    """Resident memory of the processes, in MB.

    Args:
        pids: the processes to add up.
    """
    total_kb = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the Temporal dev server runs under a watchdog).

    Args:
        pid: the root process.
    """
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            children = (task / "children").read_text().split()
            pending += [int(child) for child in children]
    return tree


async def temporal_calls(endpoints: list[str]) -> dict[str, int]:
    """Temporal RPCs made so far by the processes serving these metrics, by operation.

    Args:
        endpoints: `host:port` of each process's Prometheus metrics.
    """
    totals: collections.Counter[str] = collections.Counter()
    async with httpx.AsyncClient(timeout=10) as http:
        for endpoint in endpoints:
            text = (await http.get(f"http://{endpoint}/metrics")).text
            for labels, value in _RPC_SAMPLE.findall(text):
                operation = _OPERATION.search(labels)
                totals[operation.group(1) if operation else "?"] += int(float(value))
    return dict(totals)


async def dev_server_counts(metrics_url: str) -> dict[str, dict[str, float]]:
    """What a dev server started with a metrics port counts so far, from its own metrics.

    `actions`: its billable estimate (`action`, namespace default), under `all`;
    `requests`: the frontend's requests by operation (`service_requests`); `pending`: the
    frontend's long-running requests in flight by operation as the last one arrived
    (`service_pending_requests`, what it holds against `frontend.namespaceCount`);
    `resource_exhausted`: the frontend's refusals by cause.

    Args:
        metrics_url: the server's `http://127.0.0.1:<metrics port>/metrics`.
    """
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(metrics_url)).text
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for name, labels, value in _SERVER_SAMPLE.findall(text):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if name == "action" and found.get("namespace") == "default":
            counts["actions"]["all"] += float(value)
        elif found.get("service_name") != "frontend":
            continue
        elif name == "service_requests":
            counts["requests"][found.get("operation", "?")] += float(value)
        elif name == "service_pending_requests":  # a gauge, recorded as each such request arrives
            operation = found.get("operation", "?")
            counts["pending"][operation] = max(counts["pending"][operation], float(value))
        elif name == "service_errors_resource_exhausted":
            counts["resource_exhausted"][found.get("resource_exhausted_cause", "?")] += float(value)
    return {kind: dict(values) for kind, values in counts.items()}


def scrape(metrics_url: str) -> str:
    """The text a Prometheus endpoint serves now."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples in a scrape whose labels include `labels` (the tests' own reading)."""
    helper = Path(__file__).parents[1] / "tests" / "helpers" / "metrics.py"
    return runpy.run_path(str(helper))["sample"](text, name, **labels)


def heartbeats_recorded(metrics_url: str) -> float:
    """Heartbeats a dev server's frontend has answered since it started, in every namespace."""
    return sample(
        scrape(metrics_url),
        "service_requests",
        operation="RecordActivityTaskHeartbeat",
        service_name="frontend",
    )


def namespace_counts(text: str, namespace: str) -> dict[str, float]:
    """Billed Actions, heartbeats and history reads of `namespace` so far, from a scrape of a dev server."""
    namespace = namespace.replace("-", "_")  # as Prometheus labels spell it
    frontend = {"service_name": "frontend", "namespace": namespace}
    return {
        "actions": sample(text, "action", namespace=namespace),
        "heartbeats": sample(text, "service_requests", operation="RecordActivityTaskHeartbeat", **frontend),
        "history_reads": sample(
            text, "client_requests", operation="HistoryClientGetWorkflowExecutionHistory", **frontend
        ),
    }


def per_second(counts: dict[str, float], seconds: float) -> dict[str, float]:
    """Each nonzero count over `seconds`, by its key, in the keys' order."""
    return {key: round(n / seconds, 2) for key, n in sorted(counts.items()) if n}


def request_kind(operation: str) -> str:
    """What a Temporal request was for (`describe`, `history`, `list/visibility`, `signal`,
    `worker poll`, ...), from its operation's name."""
    if operation.startswith("Respond"):
        return "worker respond"
    return _KINDS.get(operation, "other")


def per_task_per_30s_by_kind(calls: dict[str, int], tasks: int, seconds: float) -> dict[str, float]:
    """Requests per task per 30 s, by `request_kind`, from a count of `calls` by operation over `seconds`."""
    kinds: collections.Counter[str] = collections.Counter()
    for operation, n in calls.items():
        kinds[request_kind(operation)] += n
    return {kind: round(n * 30 / seconds / tasks, 3) for kind, n in sorted(kinds.items()) if n}


class CallCounter:
    """Temporal RPCs this process makes, by operation, from the SDK's metrics kept in memory.

    For scripts where client and worker share this process; `temporal_calls` reads
    other processes.
    """

    def __init__(self) -> None:
        from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

        self.buffer = MetricBuffer(1_000_000)
        self.runtime = Runtime(telemetry=TelemetryConfig(metrics=self.buffer))
        self.totals: collections.Counter[str] = collections.Counter()
        self.failures: collections.Counter[str] = collections.Counter()  # of those, the ones that failed

    def snapshot(self) -> dict[str, int]:
        """The calls made so far on clients created with `self.runtime`, by operation; `self.failures`
        gets those that failed (the SDK retries some, and counts each attempt)."""
        for update in self.buffer.retrieve_updates():
            name, operation = update.metric.name, str(update.attributes.get("operation"))
            if name in ("temporal_request", "temporal_long_request"):
                self.totals[operation] += int(update.value)
            elif name in ("temporal_request_failure", "temporal_long_request_failure"):
                self.failures[operation] += int(update.value)
        return dict(self.totals)
