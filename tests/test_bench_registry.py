"""The bench's runner names every scenario, and every scenario module loads and answers the runner.

No dev server: `python -m bench list` imports each registered scenario and prints the question it
answers; each module under `bench/scenarios/` is registered, and has what `python -m bench run`
calls. Run as processes from the repository's root, as a developer runs the bench: `bench/` stays
off the tests' `sys.path`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]
SCENARIOS = REPO / "bench" / "scenarios"


def _bench(*arguments: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "bench", *arguments], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout


def test_bench_list_names_every_scenario_module_with_its_question() -> None:
    listed = dict(line.split(": ", 1) for line in _bench("list").splitlines())
    modules = {path.stem for path in SCENARIOS.glob("*.py") if not path.stem.startswith("_")}
    assert set(listed) == modules
    assert all(question.endswith("?") for question in listed.values()), listed


def test_every_scenario_has_what_the_runner_calls() -> None:
    check = (
        "from bench import registry\n"
        "for name in registry.SCENARIOS:\n"
        "    module = registry.load(name)\n"
        "    assert callable(module.add_arguments) and callable(module.run), name\n"
        "    assert isinstance(module.QUICK, dict), name\n"
    )
    subprocess.run([sys.executable, "-c", check], cwd=REPO, check=True)


def test_a_scenarios_help_shows_quick_and_its_own_options() -> None:
    usage = _bench("run", "latency", "--help")
    assert "--quick" in usage and "--rounds" in usage
