"""The benchmarks: `python -m bench list`, `python -m bench run SCENARIO [--quick]`, from the repo's root.

Every process the bench starts has the repository's root on `PYTHONPATH` (`harness.bench_env`), so
the toolkit's modules import one another as `bench.<module>` everywhere.
"""
