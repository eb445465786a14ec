"""npm packages a test drives, installed once per session into a temporary folder.

A machine that cannot reach the npm registry (or has no npm) skips the test, saying why,
instead of failing it: the packages are the test's client, not the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest


def npm_installed(folder: Path, packages: Sequence[str], *, module: bool = False) -> Path:
    """`folder` with `packages` installed in its `node_modules` (`module`: a package.json of
    `"type": "module"`, for scripts that `import`); skips the test when npm cannot install them."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"installing {', '.join(packages)} needs npm on PATH")
    package = '{"private": true, "type": "module"}' if module else '{"private": true}'
    (folder / "package.json").write_text(package)
    install = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", *packages],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )
    if install.returncode != 0:
        pytest.skip(f"npm could not install {', '.join(packages)} (registry unreachable?): {install.stderr[-500:]}")
    return folder


TYPESCRIPT_SDK = "@modelcontextprotocol/sdk@^1.32"


def node_script(folder: Path, script: Path) -> list[str]:
    """The command that runs `script` with node beside the packages installed in `folder` (its
    imports resolve there); skips the test without node."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"{script.name} needs node on PATH")
    shutil.copy(script, folder / script.name)
    return [node, str(folder / script.name)]
