"""The one runner: `python -m bench list`, `python -m bench run SCENARIO [--quick] [--out NAME] [options]`.

`run` stamps the run (`result.py`), runs the scenario, and writes its result under
`bench/results/`; `--quick` runs it small, with the option values the scenario's `QUICK` names
(options given on the command line win).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from bench import registry, result


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("list", "run"):
        sys.exit("usage: python -m bench list | run SCENARIO [--quick] [--out NAME] [options]")
    if argv[0] == "list":
        for name in registry.SCENARIOS:
            print(f"{name}: {registry.load(name).QUESTION}")
        return
    if len(argv) < 2:
        sys.exit("usage: python -m bench run SCENARIO [--quick] [--out NAME] [options]")
    name, options = argv[1], argv[2:]
    scenario = registry.load(name)
    parser = argparse.ArgumentParser(prog=f"python -m bench run {name}", description=scenario.QUESTION)
    parser.add_argument("--quick", action="store_true", help=f"run small: {scenario.QUICK}")
    parser.add_argument(
        "--out", help="a file name under bench/results/, or a path (default: SCENARIO-STAMP.json)"
    )
    scenario.add_arguments(parser)
    if "--quick" in options:
        parser.set_defaults(**scenario.QUICK)
    args = parser.parse_args(options)
    stamp = result.stamp_start()
    figures = asyncio.run(scenario.run(args))
    run = {
        "scenario": name,
        "question": scenario.QUESTION,
        "quick": args.quick,
        "settings": vars(args),
        "stamp": result.stamp_end(stamp),
        "figures": figures,
    }
    path = result.write(run, args.out)
    if hasattr(scenario, "report"):
        scenario.report(figures, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
