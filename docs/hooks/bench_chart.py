"""MkDocs hook: publish the benchmark's chart, which the `compare` scenario writes outside `docs/`.

The Performance page shows `bench/results/compare.png` as `bench/compare.png`, so a new
benchmark run (`python -m bench run compare --out compare.json`) updates the site without a copy
kept by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

CHART = Path(__file__).resolve().parents[2] / "bench" / "results" / "compare.png"


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the chart to the site's files, at `bench/compare.png`."""
    files.append(File.generated(config, "bench/compare.png", abs_src_path=str(CHART)))
    return files
