"""`workflows/` and `activities/` ship inside `fastmcp_temporal`, never as top-level packages.

A user's own `workflows` package (common in Temporal projects) must not be shadowed
by ours, in a built wheel or in an editable install.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_wheel_ships_workflows_and_activities_inside_the_namespace(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO), cwd=tmp_path)
    (wheel,) = tmp_path.glob("fastmcp_temporal-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"fastmcp_temporal"}
    assert "fastmcp_temporal/workflows/task.py" in names
    assert "fastmcp_temporal/activities/tool_leg.py" in names

    target = tmp_path / "site"
    _run(sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel), cwd=tmp_path)
    installed = {p.name for p in target.iterdir() if not p.name.endswith(".dist-info")}
    assert "workflows" not in installed and "activities" not in installed
    assert (target / "fastmcp_temporal" / "workflows" / "task.py").is_file()


def test_installed_package_imports_the_repo_code_and_no_top_level_workflows(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, fastmcp_temporal.workflows as w, fastmcp_temporal.activities as a;"
        "print(w.__file__); print(a.__file__);"
        "print(importlib.util.find_spec('workflows'), importlib.util.find_spec('activities'))"
    )
    workflows_file, activities_file, shadows = _run(sys.executable, "-c", probe, cwd=tmp_path).splitlines()
    assert Path(workflows_file) == REPO / "workflows" / "__init__.py"
    assert Path(activities_file) == REPO / "activities" / "__init__.py"
    assert shadows == "None None"
