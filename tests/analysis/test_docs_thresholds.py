"""docs/analysis.md keeps one table of the thresholds findings rest on: it must say what the code
says, so the two cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.engine import baselines, learned, verdicts
from analysis.engine.detectors import (
    base,
    context_growth,
    dependencies,
    parallelizable_calls,
    repeated_tool_call,
    serial_gap,
    slow_step,
)

MODULES = {m.__name__.rpartition(".")[2] + ".py": m
           for m in (baselines, learned, verdicts, base, context_growth, dependencies, parallelizable_calls,
                     repeated_tool_call, serial_gap, slow_step)}


def test_the_threshold_table_matches_the_constants():
    text = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
    table = text.split("### Thresholds\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (\S+) \|", table, flags=re.M)
    assert len(rows) >= 30
    for name, value, module in rows:
        assert float(value) == float(getattr(MODULES[module], name)), f"{name}: the docs say {value}"
