"""What the workers of one test run share: a temporary folder and locks in it.

Under pytest-xdist each worker has its own temporary folder inside the run's; without it the
run's folder is the session's own. A lock here is an flock on a file in the run's folder, so it
holds across the workers' processes and is let go when a worker dies.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every worker of this run sees."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def run_once_lock(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    """Held by one worker of the run at a time, for the work the run does once under `name`."""
    with (run_folder(tmp_path_factory) / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def machine_share(tmp_path_factory: pytest.TempPathFactory, *, alone: bool) -> Iterator[None]:
    """Held while one test runs: by any number of tests at once, or by one test `alone`.

    Every test passes a turnstile first, and a test that must run alone holds it while it waits for
    the running ones to end, so the tests queued behind it cannot keep it waiting for ever.
    """
    folder = run_folder(tmp_path_factory)
    with (folder / "turnstile.lock").open("w") as turnstile, (folder / "running.lock").open("w") as running:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
