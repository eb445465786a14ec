"""The README's demo: examples/server.py over HTTP, driven by examples/client.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fastmcp_temporal._devserver import DevServer, free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _wait_for_port(port: int, process: subprocess.Popen[bytes], deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"examples/server.py did not listen on {port}")


def test_the_demo_server_runs_tasks_for_the_demo_client(temporal_server: DevServer, task_queue: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "FASTMCP_TEMPORAL_ADDRESS": temporal_server.address,
        "FASTMCP_TEMPORAL_TASK_QUEUE": task_queue,
    }
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "server.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, server)
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "client.py"), f"http://127.0.0.1:{port}/mcp"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == [
        "crunch(12) = 144",
        "server asks: What is your name? -> answering 'Ada'",
        "Hello, Ada!",
    ]
