"""The typical run of a task name, for the task diff: every run aligned to a reference run, turn
by turn, and per position and per turn the medians (`typical_profile`); or another task in that
role (`task_as_typical`). Pure. Which runs, which reference, what is kept: docs/analysis.md,
"Compare with typical, compare two tasks" (the typical run)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from analysis.comparison.alignment import align_steps, align_turns
from analysis.comparison.runs import Anatomy, DStep, Run, Turn, anatomy, turn_calls

# A turn or a position belongs to the typical run when at least half the runs have it.
TYPICAL_SHARE = 0.5


class Slot(NamedTuple):
    """One position of the typical run (or of the other task)."""
    label: str
    kind: str
    name: str
    share: float            # of the runs, how many have a step here
    median_ms: float        # duration, where present
    median_path_ms: float   # critical-path time, where present
    median_ttft_ms: float | None
    start_ms: float         # median start since the task started (for drawing)
    step_id: str = ""       # the other task's step; "" for a typical run


@dataclass(frozen=True)
class TypicalTurn:
    share: float
    slots: tuple[Slot, ...]
    idle_ms: float          # median idle path time in the turn
    other_path_ms: float    # median path time of calls at no typical position in the turn
    other_calls: float      # median number of such calls
    overlap: float          # median (calls' path time / their summed durations); 1 = one after another
    start_ms: float

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.slots]

    @property
    def signature(self) -> tuple[str, ...]:
        return tuple(sorted(s.label for s in self.slots))

    @property
    def expected_ms(self) -> float:
        return sum(s.median_path_ms for s in self.slots) + self.other_path_ms + self.idle_ms


@dataclass(frozen=True)
class Typical:
    name: str
    release: str
    scope: str              # "release", "window" (all releases in the baseline window) or "task"
    runs: int
    duration_ms: float      # median task duration
    turns: tuple[TypicalTurn, ...]
    median_turns: float
    median_calls: float
    task_id: str = ""       # scope "task": the other task
    # Per label, wherever it ran: median duration and TTFT. A step with no typical position (in an
    # extra turn, or a call the typical run does not make there) is still "slower" against these.
    labels: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    turn_idle_ms: float = 0.0  # the median idle of a typical turn (what an extra turn may idle)

    def summary(self) -> dict:
        out = {"name": self.name, "release": self.release, "scope": self.scope, "runs": self.runs,
               "duration_ms": round(self.duration_ms, 3), "turns": self.median_turns, "calls": self.median_calls,
               "task_id": self.task_id}
        if self.scope != "task":  # another task's positions are its steps: the rows have them
            out["positions"] = [{"turn": t + 1, "label": s.label, "share": round(s.share, 3),
                                 "median_ms": round(s.median_ms, 3), "median_path_ms": round(s.median_path_ms, 3)}
                                for t, turn in enumerate(self.turns) for s in turn.slots]
        return out


def _median(values: Sequence[float], default: float = 0.0) -> float:
    return float(statistics.median(values)) if values else default


def _overlap(turn: Turn, path: Mapping[str, float]) -> float | None:
    calls = turn_calls(turn)
    busy = sum(s.duration_ms for s in calls)
    if len(calls) < 2 or busy <= 0:
        return None
    return sum(path.get(s.step_id, 0.0) for s in calls) / busy


def _medoid(anatomies: list[Anatomy]) -> Anatomy:
    """The run the others are aligned to: one with the median number of turns (a shape common
    among short runs would make every longer run look like extra turns), of the most common
    shape (turn signatures) among those when one repeats, else of their most common step count;
    of those, the one nearest the median duration."""
    median_ms = _median([a.duration_ms for a in anatomies])
    turns = int(statistics.median_low([len(a.turns) for a in anatomies]))
    pool = [a for a in anatomies if len(a.turns) == turns]
    shapes = Counter(tuple(t.signature for t in a.turns) for a in pool)
    shape, count = shapes.most_common(1)[0]
    if count >= 2:
        pool = [a for a in pool if tuple(t.signature for t in a.turns) == shape]
    else:
        steps = Counter(sum(len(t.steps) for t in a.turns) for a in pool).most_common(1)[0][0]
        pool = [a for a in pool if sum(len(t.steps) for t in a.turns) == steps]
    return min(pool, key=lambda a: (abs(a.duration_ms - median_ms), a.run.task_id))




def typical_profile(runs: Sequence[Run], *, name: str, release: str, scope: str) -> Typical | None:
    """The typical run of these runs: every run aligned to the medoid run, turn by turn; per
    position the median duration and path time and how often it occurs; per turn the median
    idle, the time of calls at no typical position, and how much the calls overlap."""
    if not runs:
        return None
    anatomies = [anatomy(r) for r in runs]
    ref = _medoid(anatomies)
    seen = _Seen.aligned(anatomies, ref)
    total = len(anatomies)
    candidates = (_typical_turn(rt, seen.present[j], seen.slot_rows[j], seen.turn_rows[j], total)
                  for j, rt in enumerate(ref.turns))
    turns = [turn for turn in candidates if turn is not None]
    return Typical(name=name, release=release, scope=scope, runs=total,
                   duration_ms=_median([a.duration_ms for a in anatomies]), turns=tuple(turns),
                   median_turns=_median([len(a.turns) for a in anatomies]),
                   median_calls=_median([sum(len(turn_calls(t)) for t in a.turns) for a in anatomies]),
                   labels=_label_medians(s for a in anatomies for t in a.turns for s in t.steps),
                   turn_idle_ms=_median([t.idle_ms for t in turns]))


@dataclass
class _Seen:
    """What the runs had at each turn of the reference run, once aligned to it: how many runs
    have the turn (`present[j]`); per position the (step, path ms, turn start) of each run that
    has it (`slot_rows[j][sj]`); per run with the turn its (turn, path ms by step, entries), an
    entry being (position or None, step, path ms) for each of the turn's steps (`turn_rows[j]`)."""
    present: list[int]
    slot_rows: list[list[list[tuple[DStep, float, float]]]]
    turn_rows: list[list[tuple[Turn, dict, list]]]

    @classmethod
    def aligned(cls, anatomies: Sequence[Anatomy], ref: Anatomy) -> _Seen:
        ref_sigs = [t.signature for t in ref.turns]
        n_ref = len(ref.turns)
        present = [0] * n_ref
        slot_rows: list[list[list[tuple[DStep, float, float]]]] = [[[] for _ in t.steps] for t in ref.turns]
        turn_rows: list[list[tuple[Turn, dict, list]]] = [[] for _ in range(n_ref)]
        for an in anatomies:
            for i, j in align_turns([t.signature for t in an.turns], ref_sigs):
                if i is None or j is None:
                    continue
                turn, rt = an.turns[i], ref.turns[j]
                present[j] += 1
                entries = []
                for si, sj in align_steps(turn.labels, rt.labels):
                    if si is None:
                        continue
                    step = turn.steps[si]
                    entries.append((sj, step, an.path_ms.get(step.step_id, 0.0)))
                    if sj is not None:
                        slot_rows[j][sj].append((step, an.path_ms.get(step.step_id, 0.0), turn.start_ms))
                turn_rows[j].append((turn, an.path_ms, entries))
        return cls(present, slot_rows, turn_rows)


def _typical_turn(rt: Turn, present: int, slot_rows: list[list[tuple[DStep, float, float]]],
                  turn_rows: list[tuple[Turn, dict, list]], total: int) -> TypicalTurn | None:
    """The reference turn `rt` as the runs had it, or None when under TYPICAL_SHARE of them do:
    the positions at least that share have, and the medians of the turn."""
    if present / total < TYPICAL_SHARE:
        return None
    kept = {sj for sj, rows in enumerate(slot_rows) if len(rows) / total >= TYPICAL_SHARE}
    slots = []
    for sj in sorted(kept):
        rows = slot_rows[sj]
        step = rt.steps[sj]
        ttfts = [s.ttft_ms for s, _, _ in rows if s.ttft_ms is not None]
        slots.append(Slot(step.label, step.kind, step.name, len(rows) / total,
                          _median([s.duration_ms for s, _, _ in rows]), _median([p for _, p, _ in rows]),
                          _median(ttfts) if ttfts else None, _median([s.start_ms for s, _, _ in rows])))
    others = [[(s, p) for sj, s, p in entries if sj not in kept] for _, _, entries in turn_rows]
    overlaps = [o for turn, path, _ in turn_rows if (o := _overlap(turn, path)) is not None]
    return TypicalTurn(
        share=present / total, slots=tuple(slots),
        idle_ms=_median([turn.idle_ms for turn, _, _ in turn_rows]),
        other_path_ms=_median([sum(p for _, p in o) for o in others]),
        other_calls=_median([len(o) for o in others]),
        overlap=_median(overlaps, default=1.0),
        start_ms=_median([turn.start_ms for turn, _, _ in turn_rows]))


def _label_medians(steps) -> dict[str, tuple[float, float | None]]:
    durations: dict[str, list[float]] = defaultdict(list)
    ttfts: dict[str, list[float]] = defaultdict(list)
    for s in steps:
        label = f"{s.kind}:{s.name}"
        durations[label].append(s.duration_ms)
        if s.ttft_ms is not None:
            ttfts[label].append(s.ttft_ms)
    return {label: (_median(values), _median(ttfts[label]) if ttfts.get(label) else None)
            for label, values in durations.items()}


def task_as_typical(run: Run, *, name: str, release: str) -> Typical:
    """Another task in the role of the typical run: every position once, as it ran."""
    an = anatomy(run)
    path = an.path_ms
    turns = []
    for t in an.turns:
        overlap = _overlap(t, path)
        turns.append(TypicalTurn(
            share=1.0, slots=tuple(Slot(label, s.kind, s.name, 1.0, s.end_ms - s.start_ms, path.get(s.step_id, 0.0),
                                        s.ttft_ms, s.start_ms, s.step_id) for label, s in zip(t.labels, t.steps,
                                                                                                strict=True)),
            idle_ms=t.idle_ms, other_path_ms=0.0, other_calls=0.0,
            overlap=1.0 if overlap is None else overlap, start_ms=t.start_ms))
    return Typical(name=name, release=release, scope="task", runs=1, duration_ms=run.duration_ms,
                   turns=tuple(turns), median_turns=len(an.turns),
                   median_calls=sum(len(turn_calls(t)) for t in an.turns), task_id=run.task_id,
                   labels=_label_medians(s for t in an.turns for s in t.steps),
                   turn_idle_ms=_median([t.idle_ms for t in an.turns]))

