"""Where a dev server writes, and what a failed start quotes from it.

What it guarantees: the output goes to the log file asked for (appended to, 0600), else
to an unnamed temporary file kept only while the server starts; either way a start that
fails can end its error with the last lines the server wrote.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from fastmcp_temporal.devserver._state import PRIVATE_FILE


@contextlib.contextmanager
def output_file(log_path: Path | None) -> Iterator[IO[bytes]]:
    """Where the server writes: ``log_path`` (appended to, 0600), else an unnamed temporary file
    kept only while it starts, so that a failed start can still say what the server wrote."""
    if log_path is None:
        with tempfile.TemporaryFile() as output:
            yield output
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    with open(descriptor, "ab") as output:
        yield output


def output_tail(output: IO[bytes], log_path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` the server wrote, and where the rest is."""
    output.flush()
    try:
        if log_path is None:
            output.seek(0)
            written = output.read()
        else:
            written = log_path.read_bytes()
    except OSError as exc:
        return f" (Its output cannot be read: {exc}.)"
    tail = written.decode(errors="replace").strip().splitlines()[-lines:]
    where = f" (all of it in {log_path})" if log_path is not None else ""
    if not tail:
        return f" It wrote nothing{where}."
    return f"\nIts last lines{where}:\n" + "\n".join(tail)
