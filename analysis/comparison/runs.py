"""The runs a task diff compares: a task's steps as plain rows (`DStep`, `Run`), and a run cut
into turns, with each leaf's critical-path time and each turn's idle time (`anatomy`). Pure: no
Django, no I/O. What a turn is: docs/analysis.md, "Compare with typical, compare two tasks"."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from analysis.engine.critical_path import critical_path


class DStep(NamedTuple):
    """A step as the comparison needs it; times in ms since its task started."""
    step_id: str
    parent_step_id: str
    kind: str
    name: str
    start_ms: float
    end_ms: float
    status: str = "ok"
    model: str = ""
    device: str = ""
    ttft_ms: float | None = None
    tool_name: str = ""
    args: str = ""  # canonical tool arguments; "" when none

    @property
    def duration_ms(self) -> float:
        d = self.end_ms - self.start_ms
        return d if d > 0.0 else 0.0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass
class Run:
    task_id: str
    duration_ms: float
    steps: list[DStep]


@dataclass
class Turn:
    index: int
    steps: list[DStep]
    start_ms: float
    idle_ms: float = 0.0
    idle_before_ms: float = 0.0  # the part of idle_ms right before the turn's first step
    labels: list[str] = field(default_factory=list)
    signature: tuple[str, ...] = ()


@dataclass
class Anatomy:
    """A run cut into turns, with each leaf's critical-path time and each turn's idle time."""
    run: Run
    turns: list[Turn]
    path_ms: dict[str, float]

    @property
    def duration_ms(self) -> float:
        return self.run.duration_ms


_START_ORDER = attrgetter("start_ms", "end_ms", "step_id")


def anatomy(run: Run) -> Anatomy:
    parents = {s.parent_step_id for s in run.steps if s.parent_step_id and s.parent_step_id != s.step_id}
    leaves = sorted((s for s in run.steps if s.step_id not in parents), key=_START_ORDER)
    turns: list[Turn] = []
    for s in leaves:
        if not turns or s.kind == "llm":
            turns.append(Turn(len(turns), [], s.start_ms))
        turns[-1].steps.append(s)
    if not turns:
        turns.append(Turn(0, [], 0.0))
    for t in turns:
        t.labels = [f"{s.kind}:{s.name}" for s in t.steps]
        t.signature = tuple(sorted(t.labels))
    turn_of = {s.step_id: t.index for t in turns for s in t.steps}
    path: dict[str, float] = defaultdict(float)
    segments = critical_path(list(run.steps), 0.0, max(run.duration_ms, 0.0))
    pending: list = []  # idle segments waiting for the step after them
    for seg in segments:
        if seg.step is None:
            pending.append(seg)
            continue
        path[seg.step.step_id] += seg.length
        turn = turns[turn_of.get(seg.step.step_id, len(turns) - 1)]
        for gap in pending:
            turn.idle_ms += gap.length
            if abs(gap.end_ms - turn.start_ms) < 1e-6 or gap.end_ms <= turn.start_ms:
                turn.idle_before_ms += gap.length
        pending = []
    for gap in pending:  # after the last step
        turns[-1].idle_ms += gap.length
    return Anatomy(run, turns, dict(path))


def turn_calls(turn: Turn) -> list[DStep]:
    """A turn's calls: its steps that are not LLM calls."""
    return [s for s in turn.steps if s.kind != "llm"]
