"""npm packages a test drives, installed once per test run into a temporary folder.

The install happens once however many pytest-xdist workers need it: the first worker to ask
installs under a lock in the run's shared temporary folder, the others wait for it and reuse it.
A machine that cannot reach the npm registry (or has no npm) skips the test, saying why,
instead of failing it: the packages are the test's client, not the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from helpers.shared import run_folder, run_once_lock


def npm_installed(
    tmp_path_factory: pytest.TempPathFactory, name: str, packages: Sequence[str], *, module: bool = False
) -> Path:
    """A folder of the run called `name` with `packages` installed in its `node_modules` (`module`: a
    package.json of `"type": "module"`, for scripts that `import`); skips the test when npm cannot install them."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"installing {', '.join(packages)} needs npm on PATH")
    folder = run_folder(tmp_path_factory) / name
    installed = folder / ".installed"
    with run_once_lock(tmp_path_factory, name):
        if not installed.exists():
            folder.mkdir(exist_ok=True)
            package = '{"private": true, "type": "module"}' if module else '{"private": true}'
            (folder / "package.json").write_text(package)
            install = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", *packages],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if install.returncode != 0:
                pytest.skip(
                    f"npm could not install {', '.join(packages)} (registry unreachable?): {install.stderr[-500:]}"
                )
            installed.touch()
    return folder


TYPESCRIPT_SDK = "@modelcontextprotocol/sdk@^1.32"


def placed(folder: Path, script: Path) -> Path:
    """A copy of `script` in `folder`, beside the packages installed there (its imports resolve
    there), swapped in whole: a worker placing it never truncates a copy another worker's node reads."""
    with tempfile.NamedTemporaryFile(dir=folder, suffix=script.suffix, delete=False) as copy:
        copy.write(script.read_bytes())
    target = folder / script.name
    os.replace(copy.name, target)
    return target


def node_script(folder: Path, script: Path) -> list[str]:
    """The command that runs `script` with node beside the packages installed in `folder`; skips the
    test without node."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"{script.name} needs node on PATH")
    return [node, str(placed(folder, script))]
