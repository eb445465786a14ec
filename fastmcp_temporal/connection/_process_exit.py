"""Leave a process that used Temporal's SDK without finalizing the interpreter.

Why it exists: the SDK runs its client on Rust threads that call back into Python when a
call ends, also a call that was cancelled (a connect abandoned at `connect_timeout`). One
that calls back while CPython finalizes aborts the whole process (SIGABRT, exit code 134,
"PyGILState_Release"; temporalio/sdk-python#300), so a server that could not reach
Temporal, or a command that ended cleanly, can die with a native abort instead of its
error. A process that skips finalization once its exit code is known never meets them.

`end_process` ends a process whose exit code its caller knows (the CLI). A server's
process belongs to whoever runs it (`fastmcp run`, `python server.py`, uvicorn), so
`end_without_finalizing_on_failure` only acts on the one exit whose code is certain: a
program ended by an uncaught exception exits with 1.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import NoReturn

_UNCAUGHT_EXCEPTION_CODE = 1
_registered = False


def end_process(code: int) -> NoReturn:
    """Flush what was written and exit with `code` now, skipping interpreter finalization."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(code)


def end_without_finalizing_on_failure() -> None:
    """Once per process: when an uncaught exception ends the program, exit with 1 after the
    exit handlers registered after this one, without finalizing (where the SDK's threads abort)."""
    global _registered
    if not _registered:
        atexit.register(_end_if_failed)
        _registered = True


def _end_if_failed() -> None:
    # The interpreter records the exception that ended the program before it runs exit handlers;
    # a normal return or `sys.exit(code)` leaves no trace of its code, so it finalizes as usual.
    if getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None:
        end_process(_UNCAUGHT_EXCEPTION_CODE)
