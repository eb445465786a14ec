"""Leave a process that used Temporal's SDK without finalizing the interpreter.

Why it exists: the SDK runs its client on Rust threads that call back into Python when a
call ends, also a call that was cancelled (a connect abandoned at `connect_timeout`). One
that calls back while CPython finalizes aborts the whole process (SIGABRT, exit code 134,
"PyGILState_Release"; temporalio/sdk-python#300), so a server that could not reach
Temporal, or a command that ended cleanly, can die with a native abort instead of its
error. A process that skips finalization once its exit code is known never meets them.

`end_process` ends a process whose exit code its caller knows (the CLI). A server's
process belongs to whoever runs it (`fastmcp run`, `python server.py`, uvicorn, a test
runner), so `end_without_finalizing_on_failure` only acts on the exits whose code is
certain and keeps that code: a program ended by an uncaught exception exits with 1, and one
ended by an uncaught `KeyboardInterrupt` dies by SIGINT, as CPython itself ends them.
Everything else (a normal return, `sys.exit(n)`, pytest's own codes) finalizes as usual.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import TracebackType
from typing import NoReturn

ExceptHook = Callable[[type[BaseException], BaseException, "TracebackType | None"], object]

_UNCAUGHT_EXCEPTION_CODE = 1
_SIGINT_SHELL_CODE = 128 + signal.SIGINT
_uncaught: list[type[BaseException]] = []
_registered = False


def end_process(code: int) -> NoReturn:
    """Flush what was written and exit with `code` now, skipping interpreter finalization."""
    _flush()
    os._exit(code)


def end_without_finalizing_on_failure() -> None:
    """Once per process: when an uncaught exception ends the program, end it as the interpreter
    would (exit 1, or death by SIGINT for Ctrl-C) after the exit handlers registered after this
    one, without finalizing (where the SDK's threads abort)."""
    global _registered
    if not _registered:
        sys.excepthook = _recording(sys.excepthook)
        atexit.register(_end_if_failed)
        _registered = True


def _recording(hook: ExceptHook) -> ExceptHook:
    # Only the interpreter calls `sys.excepthook`, and only for the exception that ends the
    # program; `sys.last_value` is no such sign, since test runners set it for every failed test.
    def record_then_report(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        _uncaught.append(kind)
        hook(kind, value, tb)

    return record_then_report


def _end_if_failed() -> None:
    if not _uncaught:
        return
    if issubclass(_uncaught[-1], KeyboardInterrupt):
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        os._exit(_SIGINT_SHELL_CODE)  # where the platform does not deliver it to ourselves at once
    end_process(_UNCAUGHT_EXCEPTION_CODE)


def _flush() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
