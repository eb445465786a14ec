"""`workflows/` and `activities/` ship inside `fastmcp_temporal`, never as top-level packages.

A user's own `workflows` package (common in Temporal projects) must not be shadowed
by ours, in a built wheel or in an editable install. The wheel's metadata lets it install
beside the FastMCP a user has (ranges, not pins), and states its licence the way setuptools
keeps accepting (an SPDX expression and the licence file), the Pythons it runs on, and that
it is typed (PEP 561). `fastmcp_temporal` names its version and the errors a program catches.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout built as a wheel, with the build backend pyproject.toml asks for."""
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO), cwd=out)
    (built,) = out.glob("fastmcp_temporal-*.whl")
    return built


def test_wheel_ships_workflows_and_activities_inside_the_namespace(wheel: Path, tmp_path: Path) -> None:
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


def test_wheel_metadata_ranges_licence_and_pythons(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (metadata_name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in archive.namelist())
    pythons = {c.rsplit(" :: ", 1)[1] for c in metadata.get_all("Classifier") if c.startswith("Programming")}
    assert {"3.10", "3.11", "3.12", "3.13"} <= pythons
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    assert "fastmcp_temporal/py.typed" in archive.namelist()  # PEP 561: checkers read our annotations
    assert metadata["Author"] == "The fastmcp-temporal authors"
    assert {"fastmcp", "mcp", "temporal"} <= set(metadata["Keywords"].split(","))
    upstream = {
        r.name: r.specifier
        for r in map(Requirement, metadata.get_all("Requires-Dist"))
        if r.name in ("fastmcp", "fastmcp-slim", "fastmcp-tasks", "mcp")
    }
    assert set(upstream) == {"fastmcp", "fastmcp-slim", "fastmcp-tasks", "mcp"}
    for name, specifier in upstream.items():
        assert not any(spec.operator == "==" for spec in specifier), f"{name} is pinned: {specifier}"
        # a user's newer FastMCP in the same line installs (4.2.x), the next major does not
        assert specifier.contains("4.2.3" if name != "mcp" else "2.9.0"), f"{name}{specifier}"


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


def test_the_version_and_the_errors_a_user_catches_are_importable_from_the_package() -> None:
    import fastmcp_temporal

    assert fastmcp_temporal.__version__ == importlib.metadata.version("fastmcp-temporal")
    for name in ("TemporalConnectionError", "DevServerError", "UpstreamChanged", "PayloadStoreError",
                 "UnknownEncryptionKeyError"):
        assert name in fastmcp_temporal.__all__
        assert issubclass(getattr(fastmcp_temporal, name), Exception), name
