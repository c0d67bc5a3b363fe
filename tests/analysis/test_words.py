"""One word, one meaning (docs/ui.md, "Words"): "turn" is only ever the user's (a task of a
session). The task comparison, which aligns runs by LLM call and the tools it led to, says "round";
its headline once read "+33.2 s from 11 extra turns" against a typical run of "1 turns, 21 calls"
while the Sessions page beside it counted user turns."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TURN = re.compile(r"\bturns?\b", re.IGNORECASE)
# Where "turn" would mean something else than the user's: the comparison's texts and its pages.
COMPARISON_TEMPLATES = ["templates/analysis/_typical.html", "templates/analysis/task_compare.html"]
COMPARISON_CODE = ["analysis/comparison/explanation.py"]


def _strings(path: Path) -> list[str]:
    """The string literals a user can read: not docstrings, not dict keys of the code's own."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append(node.value)
    return out


def test_the_comparison_never_says_turn():
    for name in COMPARISON_TEMPLATES:
        text = re.sub(r"{[%#{].*?[%#}]}", "", (ROOT / name).read_text(), flags=re.S)  # the words, not the tags
        assert not TURN.search(text), (name, TURN.findall(text))
    for name in COMPARISON_CODE:
        said = [s for s in _strings(ROOT / name) if TURN.search(s) and " " in s.strip()]
        assert not said, (name, said)


def test_the_glossary_defines_each_word_once():
    doc = (ROOT / "docs/ui.md").read_text()
    table = doc[doc.index("## Words"):doc.index("## Numbers and units")]
    words = re.findall(r"^\| ([a-zA-Z ]+?) \|", table, re.M)[1:]  # past the header row
    assert len(words) == len(set(words)) and {"turn", "round", "LLM call", "finding", "wasted time"} <= set(words)
