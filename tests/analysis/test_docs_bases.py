"""docs/analysis.md gives the closed list of evidence bases a finding rests on ("Evidence bases"):
it must say what analysis/engine/detectors/bases.py says, and every basis a detector writes must be
on it, so the docs, the code and the findings cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.engine.detectors import bases, dependencies, parallelizable_calls, repeated_tool_call


def _table() -> list[tuple[str, str, str, str]]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
    section = text.split("### Evidence bases\n", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"^\| `(\w+)` \| (\w+) \| (.+?) \| (high|medium|low) \|$", section, flags=re.M)


def test_the_bases_table_in_the_docs_is_the_closed_list_in_the_code():
    rows = _table()
    assert [code for code, *_ in rows] == list(bases.BASES)
    for code, kind, meaning, confidence in rows:
        basis = bases.BASES[code]
        assert (kind, meaning, confidence) == (basis.kind, basis.meaning, basis.confidence), code


def test_every_basis_a_detector_writes_is_on_the_list_with_a_reason():
    link_bases = {v for k, v in vars(dependencies).items() if k.isupper() and isinstance(v, str) and v in bases.BASES}
    assert set(dependencies.STRENGTH) == link_bases
    assert {code for code, b in bases.BASES.items() if b.kind == "parallelizable_calls"} == link_bases
    assert {code for code, b in bases.BASES.items() if b.kind == "repeated_tool_call"} == set(repeated_tool_call.REASONS)
    independent_or_unknown = {c for c in link_bases if bases.BASES[c].verdict != bases.DEPENDENT}
    assert independent_or_unknown <= set(parallelizable_calls.REASONS)


def test_only_a_basis_of_something_seen_supports_an_asserted_finding():
    absences = {"no_flow_seen", "learned_no_flow", "learned_unknown", "nothing_recorded", "common_value",
                "shared_value", "requested_together_acting", "no_answers", "action_between", "acts"}
    assert {code for code, b in bases.BASES.items() if b.confidence == "low"} >= absences
    assert all(bases.BASES[code].verdict != bases.INDEPENDENT for code in absences)
