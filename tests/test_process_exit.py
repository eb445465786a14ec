"""No process of this package ends with a native abort, and each exits with the code it promises.

The SDK's Rust threads call back into Python when a call ends, a cancelled one too, and one
that does so while CPython finalizes aborts the process (temporalio/sdk-python#300): a server
that cannot reach Temporal gave up its connect at `connect_timeout` and then, now and then,
died with SIGABRT instead of its error. The dev server's watchdog read its stdin through a
buffer a thread held at exit, so every command that exited non-zero under it ended in an
abort instead of its own code. Each case runs as real processes, several at once, since the
race is intermittent. Skipping finalization must not change the code a program that loads the
extension exits with: a test runner's own code, a death by SIGINT, `sys.exit(n)`'s `n`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fastmcp_temporal.devserver import DevServer, _process
from helpers.servers import WORKER_SERVER, silent_tcp_server

RUNS = 10
# What a native abort or a Rust thread's panic at exit leaves on stderr.
CRASH_MARKS = ("Fatal Python error", "panicked at", "Aborted")
STDIO_SERVER = WORKER_SERVER + '\n\nif __name__ == "__main__":\n    mcp.run(transport="stdio")\n'


def assert_no_crash(stderr: str) -> None:
    crashes = [mark for mark in CRASH_MARKS if mark in stderr]
    assert not crashes, stderr


def test_a_server_that_cannot_reach_temporal_exits_with_its_error_every_time(tmp_path: Path) -> None:
    spec = tmp_path / "server.py"
    spec.write_text(STDIO_SERVER)
    with silent_tcp_server() as address:
        env = {**os.environ, "FASTMCP_TEMPORAL_ADDRESS": address, "FASTMCP_TEMPORAL_CONNECT_TIMEOUT": "0.5"}
        started = [
            subprocess.Popen(
                [sys.executable, str(spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp_path,
            )
            for _ in range(RUNS)
        ]
        ended = [(process.communicate(timeout=300)[1], process.returncode) for process in started]
    for stderr, code in ended:
        assert code == 1, stderr
        assert f"Cannot reach Temporal namespace 'default' at {address}: no answer" in stderr
        assert_no_crash(stderr)


def test_the_watchdog_exits_with_its_commands_code() -> None:
    failing = [sys.executable, "-c", "import sys; sys.exit('temporal: the failure it names')"]
    for _ in range(RUNS):
        # The owner keeps the watchdog's stdin open, as `_process.spawn` does: the command ends first.
        watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_process.WATCHDOG), *failing],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        code = watchdog.wait(timeout=60)
        assert watchdog.stdin is not None and watchdog.stderr is not None
        watchdog.stdin.close()
        stderr = watchdog.stderr.read()
        watchdog.stderr.close()
        assert code == 1, stderr
        assert stderr.strip() == "temporal: the failure it names"


LOADED_PROGRAM = (
    "import asyncio\nimport sys\n\nfrom fastmcp import Client\n"
    + WORKER_SERVER
    + """

def serve_once() -> None:
    async def call() -> None:
        async with Client(mcp) as client:
            assert (await client.call_tool("square", {"n": 3})).data == 9

    asyncio.run(call())
"""
)
"""A program that runs the extension's lifespan (`serve_once`) before it ends as each test says."""

PYTEST_SUITE = """
import pytest

from program import serve_once


def test_serves() -> None:
    serve_once()


@pytest.mark.xfail(reason="a known failure", strict=True)
def test_known_failure() -> None:
    assert False
"""


def run_loaded(
    tmp_path: Path, address: str, *command: str, ending: str = ""
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "program.py").write_text(LOADED_PROGRAM + ending)
    env = {**os.environ, "FASTMCP_TEMPORAL_ADDRESS": address, "FASTMCP_TEMPORAL_TASK_QUEUE": tmp_path.name}
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )


def test_a_program_keeps_its_own_exit_code_with_the_extension_loaded(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    endings = {
        "serve_once()\nsys.exit(3)\n": 3,
        "serve_once()\nraise ValueError('the program failed')\n": 1,
        "serve_once()\nraise KeyboardInterrupt\n": -signal.SIGINT,
        "serve_once()\n": 0,
    }
    for ending, code in endings.items():
        ended = run_loaded(tmp_path, temporal_server.address, "program.py", ending=ending)
        assert ended.returncode == code, (ending, ended.stderr)
        assert_no_crash(ended.stderr)


def test_a_pytest_run_with_an_expected_failure_exits_0_with_the_extension_loaded(
    tmp_path: Path, temporal_server: DevServer
) -> None:
    (tmp_path / "test_suite.py").write_text(PYTEST_SUITE)
    ended = run_loaded(
        tmp_path, temporal_server.address, "-m", "pytest", "-p", "no:cacheprovider", "test_suite.py"
    )
    assert "1 passed, 1 xfailed" in ended.stdout, ended.stdout + ended.stderr
    assert ended.returncode == 0, ended.stdout + ended.stderr
