"""docs/analysis.md keeps one table of the dependency evidence's thresholds: it must say what the
code says, so the two cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.engine import learned
from analysis.engine.detectors import dependencies, parallelizable_calls

MODULES = {"learned.py": learned, "dependencies.py": dependencies, "parallelizable_calls.py": parallelizable_calls}


def test_the_threshold_table_matches_the_constants():
    text = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
    table = text.split("### Thresholds of the dependency evidence", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (\S+) \|", table, flags=re.M)
    assert len(rows) >= 10
    for name, value, module in rows:
        assert float(value) == float(getattr(MODULES[module], name)), f"{name}: the docs say {value}"
