"""The one runner: `python -m bench list`, `python -m bench run SCENARIO [--quick] [--out NAME] [options]`.

`run` stamps the run (`result.py`), runs the scenario, and writes its result under
`bench/results/`; `--quick` runs it small, with the option values the scenario's `QUICK` names
(options given on the command line win).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from types import ModuleType

from bench import registry, result

USAGE = "usage: python -m bench list | run SCENARIO [--quick] [--out NAME] [options]"


def main(argv: list[str]) -> None:
    if argv[:1] == ["list"]:
        for name in registry.SCENARIOS:
            print(f"{name}: {registry.load(name).QUESTION}")
    elif argv[:1] == ["run"] and len(argv) > 1:
        run(argv[1], argv[2:])
    else:
        sys.exit(USAGE)


def run(name: str, options: list[str]) -> None:
    """Run scenario `name` with its command-line `options`, and write its stamped result."""
    scenario = registry.load(name)
    args = _arguments(name, scenario, options)
    stamp = result.stamp_start()
    figures = asyncio.run(scenario.run(args))
    path = result.write(
        {
            "scenario": name,
            "question": scenario.QUESTION,
            "quick": args.quick,
            "settings": vars(args),
            "stamp": result.stamp_end(stamp),
            "figures": figures,
        },
        args.out,
    )
    if hasattr(scenario, "report"):
        scenario.report(figures, path)
    print(f"wrote {path}")


def _arguments(name: str, scenario: ModuleType, options: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m bench run {name}", description=scenario.QUESTION)
    parser.add_argument("--quick", action="store_true", help=f"run small: {scenario.QUICK}")
    parser.add_argument(
        "--out", help="a file name under bench/results/, or a path (default: SCENARIO-STAMP.json)"
    )
    scenario.add_arguments(parser)
    if "--quick" in options:
        parser.set_defaults(**scenario.QUICK)
    return parser.parse_args(options)


if __name__ == "__main__":
    main(sys.argv[1:])
