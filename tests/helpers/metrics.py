"""Reading a Prometheus text scrape: the tests check metrics by name and labels, not by line."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match["value"])
    return total
