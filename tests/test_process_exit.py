"""No process of this package ends with a native abort, and each exits with the code it promises.

The SDK's Rust threads call back into Python when a call ends, a cancelled one too, and one
that does so while CPython finalizes aborts the process (temporalio/sdk-python#300): a server
that cannot reach Temporal gave up its connect at `connect_timeout` and then, now and then,
died with SIGABRT instead of its error. The dev server's watchdog read its stdin through a
buffer a thread held at exit, so every command that exited non-zero under it ended in an
abort instead of its own code. Each case runs as real processes, several at once, since the
race is intermittent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastmcp_temporal.devserver import _process
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
