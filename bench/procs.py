"""What a benchmark process costs, read from outside it: CPU time, memory, Temporal calls.

`compare.py` runs each engine as one or more processes (API server, worker, client) and
charges every process its own share of a burst. CPU and memory come from `/proc`, so a
process is measured the same way whether it is this one or another; Temporal calls come
from each process's SDK metrics served for Prometheus (`temporal_request` and
`temporal_long_request`, by operation).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_STARTUP_DEADLINE = 60.0
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


@contextlib.contextmanager
def http_server_process(script: str, env: dict[str, str], port: int) -> Iterator[tuple[int, str]]:
    """Run `script serve` as a process, wait until it answers HTTP on `port`, and stop it by PID after.

    Args:
        script: a bench script whose `serve` argument runs its MCP server on `PORT`.
        env: the process's whole environment, `PORT` included.
        port: the loopback port it serves on.

    Yields:
        The process's PID and its MCP URL.
    """
    process = subprocess.Popen([sys.executable, script, "serve"], env=env)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + _STARTUP_DEADLINE
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"The server exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url, timeout=1)
                break
            if time.monotonic() > deadline:
                raise TimeoutError("The server did not start")
            time.sleep(0.2)
        yield process.pid, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
