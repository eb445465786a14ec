"""Run a dev server and end it when the process that owns it goes away, however it dies.

Why it exists: a server process killed by SIGKILL, or by a SIGTERM that skips its
cleanup, cannot stop the ``temporal`` process it started, which would then run on as
an orphan holding the state folder. ``_process`` starts this script as the leader
of the dev server's process group, with its stdin a pipe whose write end only the
owner holds. The kernel closes that end when the owner exits for any reason; the
script reads end-of-file and stops the server.

What it guarantees: the command runs in the script's process group; it gets SIGTERM
(SIGKILL after a grace period) when stdin reaches end-of-file or the script receives
SIGTERM, SIGINT or SIGHUP; the script exits with the command's exit code (128 + the
signal's number when a signal ended it, as a shell reports it), never with an abort of
its own: it reads its stdin unbuffered and leaves without finalizing the interpreter,
whose shutdown would otherwise die on the buffer lock the reading thread holds. Standard
library only, run by path, so it starts in a few tens of milliseconds.

Usage: python _watchdog.py COMMAND [ARG...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.2


def main(command: list[str]) -> int:
    owner_gone = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: owner_gone.set())
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    threading.Thread(target=_wait_for_eof, args=(owner_gone,), daemon=True).start()
    while child.poll() is None and not owner_gone.wait(_POLL_SECONDS):
        pass
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
    code = child.wait()
    return code if code >= 0 else 128 - code


def _wait_for_eof(owner_gone: threading.Event) -> None:
    """Block until the owner's end of the pipe closes (it never writes)."""
    while os.read(sys.stdin.fileno(), 4096):
        pass
    owner_gone.set()


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(status)
