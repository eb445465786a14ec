"""The requests one Temporal client makes, counted from the SDK's own metrics.

A client connected through `TemporalRequests.connect` reports every call it makes
(each long poll too) to its own metric buffer, so a test counts what one server asked
of Temporal, apart from the worker and the test's own client.
"""

from __future__ import annotations

from collections import Counter

from temporalio.client import Client
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig

_REQUEST_METRICS = ("temporal_request", "temporal_long_request")


class TemporalRequests:
    """Counts, by operation, the requests of the clients connected through it."""

    def __init__(self) -> None:
        self._buffer = MetricBuffer(100_000)
        self._runtime = Runtime(telemetry=TelemetryConfig(metrics=self._buffer))
        self._totals: Counter[str] = Counter()

    async def connect(self, address: str) -> Client:
        """A client whose every request is counted.

        Args:
            address: host:port of the Temporal frontend.
        """
        return await Client.connect(address, runtime=self._runtime)

    def count(self) -> Counter[str]:
        """Requests so far, by operation (`DescribeWorkflowExecution`, ...)."""
        for update in self._buffer.retrieve_updates():
            if update.metric.name in _REQUEST_METRICS:
                self._totals[str(update.attributes.get("operation"))] += int(update.value)
        return Counter(self._totals)
