"""Why was this one slow: a task explained against the typical run of its agent, or against
another task. Pure functions on plain rows (no Django, no I/O); `analysis/comparison/explain.py` reads
the rows. Method and its limits: docs/analysis.md, "Compare with typical, compare two tasks".

Turns. A task's work is its leaf steps (a parent is made of its children) in start order; every
LLM step opens a turn, and the tool calls after it belong to that turn (steps before the first
LLM step form a turn of their own). Labels are `kind:name`.

Alignment, in two levels, so an inserted call or an inserted turn never shifts what follows:
1. turns: Myers' O((N+M)·D) shortest edit script on turn signatures (the sorted labels of a turn);
   runs of turns left unmatched between two matches are then paired by similarity (a
   Needleman-Wunsch over that short block, score = multiset Jaccard of their labels), so a turn
   with one extra call still pairs with its counterpart instead of counting as one deleted and
   one inserted turn;
2. steps, within a pair of turns: Myers on labels, then unmatched steps of the same label are
   paired in order (concurrent calls start in any order).
Why Myers and not difflib or a full LCS table: two runs of one agent differ by few edits (D
small), so Myers costs ~O(N) where an LCS table costs O(N·M) (10⁸ cells for a 10,000-step
pair); difflib.SequenceMatcher goes quadratic on repetitive sequences such as a tool called
thousands of times (its junk heuristic would hide exactly those calls). Common prefix and suffix
are trimmed first. When D exceeds MAX_EDITS (sequences that are not alike), the middle is
aligned by pairing the k-th occurrence of each label and keeping the longest increasing run of
those pairs (patience-style, O(N log N)): still order-preserving, no longer minimal.

Explanation, additive by construction. The task's duration is tiled exactly by its critical
path (analysis/engine/critical_path.py): every millisecond is a path step's or idle. Each item is a
difference of path time between the task and the typical run: extra turns (their whole path
time), calls the typical run does not make (a turn's calls at no typical position, against the
typical time of such calls in that turn), repeated calls (same tool, same canonical arguments
as an earlier call), slower or faster steps at a typical position (path time − the position's
median path time; LLM steps carry the hardware verdict of their finding), idle per turn, and
calls run one after another where the typical run overlaps them (a turn's path time above what
the typical overlap ratio would give). The items sum to the task's duration minus the sum of the
typical parts; what separates that sum from the typical (median) duration is the remainder,
shown as such. Against one other task the remainder is zero.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from analysis.engine.critical_path import critical_path

# Beyond this many edits the middle of two sequences is aligned by occurrence (see above): the
# Myers trace costs O(D²) memory, 250,000 entries at 500.
MAX_EDITS = 500
# A turn or a position belongs to the typical run when at least half the runs have it.
TYPICAL_SHARE = 0.5
# A turn counts as run one after another when its calls' path time over their summed durations
# exceeds the typical ratio by this much (0 = fully overlapped is impossible; 1 = serial).
SERIAL_MARGIN = 0.2
# The typical run must overlap its calls (ratio below this) for serialisation to be named.
OVERLAPPING = 0.9
# Turns aligned within this many positions of the diagonal beyond the difference in turn counts.
TURN_BAND = 16
HEADLINE_ITEMS = 3


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


# --- alignment -----------------------------------------------------------------------------


Pair = tuple[int | None, int | None]


def align(a: Sequence[Hashable], b: Sequence[Hashable], *, max_edits: int = MAX_EDITS) -> list[Pair]:
    """An order-preserving alignment of a and b: (i, j) matched, (i, None) only in a, (None, j)
    only in b. Minimal (a shortest edit script) up to `max_edits` edits."""
    n, m = len(a), len(b)
    lo, hi = _common_ends(a, b)
    mid_a, mid_b = a[lo:n - hi], b[lo:m - hi]
    mid = _myers(mid_a, mid_b, max_edits)
    if mid is None:
        mid = _by_occurrence(mid_a, mid_b)
    return _with_ends(mid, lo, hi, n, m)


def _common_ends(a: Sequence, b: Sequence) -> tuple[int, int]:
    """The lengths of the common prefix and of the common suffix after it."""
    n, m = len(a), len(b)
    lo = 0
    while lo < n and lo < m and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and hi < m - lo and a[n - 1 - hi] == b[m - 1 - hi]:
        hi += 1
    return lo, hi


def _with_ends(mid: list[Pair], lo: int, hi: int, n: int, m: int) -> list[Pair]:
    """The middle's pairs shifted back into place, between the matched prefix and suffix."""
    out: list[Pair] = [(i, i) for i in range(lo)]
    out += [(None if i is None else i + lo, None if j is None else j + lo) for i, j in mid]
    out += [(n - hi + k, m - hi + k) for k in range(hi)]
    return out


def _myers(a: Sequence, b: Sequence, max_edits: int) -> list[Pair] | None:
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    v = {1: 0}
    trace: list[dict[int, int]] = []
    for d in range(min(max_edits, n + m) + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1] < v[k + 1]):
                x = v[k + 1]
            else:
                x = v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[dict[int, int]], n: int, m: int) -> list[Pair]:
    out: list[Pair] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        prev_k = k + 1 if (k == -d or (k != d and v.get(k - 1, -1) < v.get(k + 1, -1))) else k - 1
        prev_x = v.get(prev_k, 0)
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x -= 1
            y -= 1
            out.append((x, y))
        if d > 0:
            if x == prev_x:
                out.append((None, prev_y))
            else:
                out.append((prev_x, None))
        x, y = prev_x, prev_y
    out.reverse()
    return out


def _by_occurrence(a: Sequence, b: Sequence) -> list[Pair]:
    """Pair the k-th occurrence of each label in a with its k-th in b, keep the longest run of
    pairs increasing in both (patience sorting), the rest unmatched. O(N log N)."""
    where: dict = defaultdict(list)
    for j, label in enumerate(b):
        where[label].append(j)
    seen: Counter = Counter()
    candidates = []
    for i, label in enumerate(a):
        k = seen[label]
        seen[label] += 1
        if k < len(where[label]):
            candidates.append((i, where[label][k]))
    tails: list[int] = []
    tail_at: list[int] = []
    back = [-1] * len(candidates)
    for c, (_, j) in enumerate(candidates):
        pos = bisect.bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_at.append(c)
        else:
            tails[pos] = j
            tail_at[pos] = c
        back[c] = tail_at[pos - 1] if pos else -1
    keep = []
    c = tail_at[-1] if tail_at else -1
    while c >= 0:
        keep.append(candidates[c])
        c = back[c]
    keep.reverse()
    out: list[Pair] = []
    i0 = j0 = 0
    for i, j in keep + [(len(a), len(b))]:
        out += [(x, None) for x in range(i0, i)] + [(None, y) for y in range(j0, j)]
        if i < len(a):
            out.append((i, j))
        i0, j0 = i + 1, j + 1
    return out


def align_turns(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]], *, band: int = TURN_BAND) -> list[Pair]:
    """Turns by signature: the common prefix and suffix matched, the middle by a banded
    Needleman-Wunsch maximising the summed similarity of paired turns (each pair also earns a
    little, so turns pair whenever they can; leaving a turn out costs nothing). A turn that
    gained a call pairs with its counterpart in place, an inserted turn is left out where it is
    least like its neighbours. The band (|n − m| + `band` either side of the diagonal) keeps it
    O(N·band): runs of one agent differ by a few turns, not by hundreds."""
    n, m = len(a), len(b)
    lo, hi = _common_ends(a, b)
    mid = _banded_pairing(a[lo:n - hi], b[lo:m - hi], band)
    return _with_ends(mid, lo, hi, n, m)


def _banded_pairing(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]], band: int) -> list[Pair]:
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    low, high = min(0, m - n) - band, max(0, m - n) + band  # allowed j − i
    counts: dict[tuple[str, ...], Counter] = {}
    memo: dict[tuple, float] = {}  # runs of one agent repeat a few signatures: score each pair once

    def similarity(x: tuple[str, ...], y: tuple[str, ...]) -> float:
        found = memo.get((x, y))
        if found is None:
            cx = counts.get(x) or counts.setdefault(x, Counter(x))
            cy = counts.get(y) or counts.setdefault(y, Counter(y))
            found = memo[(x, y)] = _similarity_counts(cx, cy)
        return found
    neg = float("-inf")
    score: list[dict[int, float]] = [{} for _ in range(n + 1)]
    move: list[dict[int, int]] = [{} for _ in range(n + 1)]  # 0 pair, 1 skip a, 2 skip b
    for i in range(n + 1):
        row, prev = score[i], score[i - 1] if i else None
        for j in range(max(0, i + low), min(m, i + high) + 1):
            if i == 0 and j == 0:
                row[0] = 0.0
                continue
            best, how = neg, 0
            if i and j and (j - 1) in prev:
                x, y = a[i - 1], b[j - 1]
                sim = 1.0 if x == y else similarity(x, y)
                best = prev[j - 1] + 0.01 + sim
            if i and j in prev and prev[j] > best:
                best, how = prev[j], 1
            if j and (j - 1) in row and row[j - 1] > best:
                best, how = row[j - 1], 2
            row[j] = best
            move[i][j] = how
    if m not in score[n]:  # outside the band: cannot happen (the band always holds (n, m))
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    out: list[Pair] = []
    i, j = n, m
    while i > 0 or j > 0:
        how = move[i][j] if (i or j) else 0
        if i and j and how == 0:
            out.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and (how == 1 or j == 0):
            out.append((i - 1, None))
            i -= 1
        else:
            out.append((None, j - 1))
            j -= 1
    out.reverse()
    return out


def _similarity_counts(ca: Counter, cb: Counter) -> float:
    union = sum((ca | cb).values())
    return sum((ca & cb).values()) / union if union else 1.0


def align_steps(a: Sequence[str], b: Sequence[str]) -> list[Pair]:
    """Labels of two turns: Myers, then leftovers of the same label paired in order (concurrent
    calls start in any order)."""
    if a == b:  # most turns of two runs of one agent
        return [(i, i) for i in range(len(a))]
    pairs = align(a, b)
    spare_b: dict[str, list[int]] = defaultdict(list)
    for i, j in pairs:
        if i is None:
            spare_b[b[j]].append(j)
    if not spare_b:
        return pairs
    taken: set[int] = set()
    out: list[Pair] = []
    for i, j in pairs:
        if i is not None and j is None and spare_b.get(a[i]):
            j = spare_b[a[i]].pop(0)
            taken.add(j)
        out.append((i, j))
    return [(i, j) for i, j in out if not (i is None and j in taken)]


# --- the typical run -----------------------------------------------------------------------


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


def _calls(turn: Turn) -> list[DStep]:
    return [s for s in turn.steps if s.kind != "llm"]


def _overlap(turn: Turn, path: Mapping[str, float]) -> float | None:
    calls = _calls(turn)
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
    ref_sigs = [t.signature for t in ref.turns]
    n_ref = len(ref.turns)
    # Per run and reference turn: its turn's (slot or None, step, path) entries.
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
    total = len(anatomies)
    turns: list[TypicalTurn] = []
    for j, rt in enumerate(ref.turns):
        if present[j] / total < TYPICAL_SHARE:
            continue
        kept = {sj for sj, rows in enumerate(slot_rows[j]) if len(rows) / total >= TYPICAL_SHARE}
        slots = []
        for sj in sorted(kept):
            rows = slot_rows[j][sj]
            step = rt.steps[sj]
            ttfts = [s.ttft_ms for s, _, _ in rows if s.ttft_ms is not None]
            slots.append(Slot(step.label, step.kind, step.name, len(rows) / total,
                              _median([s.duration_ms for s, _, _ in rows]), _median([p for _, p, _ in rows]),
                              _median(ttfts) if ttfts else None, _median([s.start_ms for s, _, _ in rows])))
        others = [[(s, p) for sj, s, p in entries if sj not in kept] for _, _, entries in turn_rows[j]]
        overlaps = [o for turn, path, _ in turn_rows[j] if (o := _overlap(turn, path)) is not None]
        turns.append(TypicalTurn(
            share=present[j] / total, slots=tuple(slots),
            idle_ms=_median([turn.idle_ms for turn, _, _ in turn_rows[j]]),
            other_path_ms=_median([sum(p for _, p in o) for o in others]),
            other_calls=_median([len(o) for o in others]),
            overlap=_median(overlaps, default=1.0),
            start_ms=_median([turn.start_ms for turn, _, _ in turn_rows[j]])))
    return Typical(name=name, release=release, scope=scope, runs=total,
                   duration_ms=_median([a.duration_ms for a in anatomies]), turns=tuple(turns),
                   median_turns=_median([len(a.turns) for a in anatomies]),
                   median_calls=_median([sum(len(_calls(t)) for t in a.turns) for a in anatomies]),
                   labels=_label_medians(s for a in anatomies for t in a.turns for s in t.steps),
                   turn_idle_ms=_median([t.idle_ms for t in turns]))


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
                   median_calls=sum(len(_calls(t)) for t in an.turns), task_id=run.task_id,
                   labels=_label_medians(s for t in an.turns for s in t.steps),
                   turn_idle_ms=_median([t.idle_ms for t in an.turns]))


# --- the explanation -----------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    kind: str   # extra_turn, missing_turn, extra_calls, repeated_calls, other_calls, missing_calls,
    #             slower, faster, idle, serialised, overlapped, smaller, remainder
    ms: float
    text: str
    step_ids: tuple[str, ...] = ()
    other_step_ids: tuple[str, ...] = ()
    verdict: str = ""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "ms": round(self.ms, 3), "text": self.text, "step_ids": list(self.step_ids),
                "other_step_ids": list(self.other_step_ids), "verdict": self.verdict}


class Row(NamedTuple):
    """One aligned row: a step of the task and/or a position of the other side."""
    status: str  # same, slower, faster, extra, missing
    label: str
    turn: int | None          # 1-based, the task's
    other_turn: int | None    # 1-based, the other side's
    step_id: str = ""
    other_step_id: str = ""
    start_ms: float | None = None
    duration_ms: float | None = None
    other_start_ms: float | None = None
    other_duration_ms: float | None = None
    kind: str = ""

    @property
    def delta_ms(self) -> float | None:
        if self.duration_ms is None and self.other_duration_ms is None:
            return None
        return (self.duration_ms or 0.0) - (self.other_duration_ms or 0.0)

    def as_dict(self) -> dict:
        out = self._asdict()
        mine, other = self.duration_ms, self.other_duration_ms
        out["delta_ms"] = None if mine is None and other is None else (mine or 0.0) - (other or 0.0)
        return out


@dataclass
class Explanation:
    task_id: str
    task_ms: float
    other_ms: float
    typical: Typical
    items: list[Item]
    rows: list[Row]
    headline: str

    @property
    def difference_ms(self) -> float:
        return self.task_ms - self.other_ms

    def as_dict(self, *, rows: bool = True) -> dict:
        out = {"task_id": self.task_id, "against": self.typical.task_id or "typical",
               "task_ms": round(self.task_ms, 3), "other_ms": round(self.other_ms, 3),
               "difference_ms": round(self.difference_ms, 3), "headline": self.headline,
               "items": [i.as_dict() for i in self.items], "typical": self.typical.summary()}
        if rows:  # columns once, a list per row: 10,000 rows are 1.5 MB of JSON instead of 3
            out["row_fields"] = [*Row._fields, "delta_ms"]
            out["rows"] = [[*r, r.delta_ms] for r in self.rows]
        return out


def fmt_s(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if abs(ms) >= 1000 else f"{ms:.0f} ms"


def fmt_delta(ms: float) -> str:
    return ("+" if ms >= 0 else "−") + fmt_s(abs(ms))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _turn_name(index: int, count: int) -> str:
    return "the last turn" if index == count - 1 and count > 1 else f"turn {index + 1}"


def _labels_text(steps: Sequence[DStep]) -> str:
    counts = Counter(s.tool_name or s.name or s.kind for s in steps)
    return ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in counts.most_common())


class _Acc:
    """Items grouped by a key while the turns are walked: ms and steps add up."""

    def __init__(self):
        self.groups: dict[tuple, dict] = {}
        self.small_ms = 0.0
        self.small_n = 0
        self.small_steps: list[str] = []

    def small_add(self, ms: float, step_id: str) -> None:
        """A difference under the threshold: counted in "smaller differences", not an item."""
        if ms:
            self.small_ms += ms
            self.small_n += 1
            if step_id and len(self.small_steps) < 50:
                self.small_steps.append(step_id)

    def add(self, key: tuple, ms: float, steps: Sequence[str] = (), others: Sequence[str] = (), **info):
        g = self.groups.setdefault(key, {"ms": 0.0, "steps": [], "others": [], "n": 0, "turns": [], "calls_seen": [],
                                         **{k: v for k, v in info.items() if k != "calls"}})
        g["calls_seen"] += list(info.get("calls", ()))
        g["ms"] += ms
        g["steps"] += list(steps)
        g["others"] += [o for o in others if o]
        g["n"] += 1
        g["extra_n"] = g.get("extra_n", 0) + info.get("extra", 0)
        if "turn" in info and info["turn"] not in g["turns"]:
            g["turns"].append(info["turn"])


def explain(task: Run, typical: Typical, *, verdicts: Mapping[str, str] | None = None,
            repeats: set[str] | None = None, small_ms: float | None = None) -> Explanation:
    """The task against the typical run (or another task as `task_as_typical`): items that add
    up to the difference, largest first, and the aligned rows. `repeats`: the calls that repeat
    an earlier one (the repeated_tool_call findings say which); without it, calls whose tool and
    canonical arguments (`DStep.args`) an earlier call had."""
    verdicts = verdicts or {}
    an = anatomy(task)
    acc = _Acc()
    rows: list[Row] = []
    n_turns = len(an.turns)
    if repeats is None:
        repeats = set()
        seen_calls: set[tuple[str, str]] = set()
        for t in an.turns:
            for s in t.steps:
                if s.kind != "llm" and s.args:
                    key = (s.tool_name or s.name, s.args)
                    if key in seen_calls:
                        repeats.add(s.step_id)
                    seen_calls.add(key)
    path = an.path_ms
    difference = task.duration_ms - typical.duration_ms
    threshold = small_ms if small_ms is not None else max(10.0, 0.02 * abs(difference), 0.005 * task.duration_ms)
    for i, j in align_turns([t.signature for t in an.turns], [t.signature for t in typical.turns]):
        turn = an.turns[i] if i is not None else None
        tt = typical.turns[j] if j is not None else None
        if tt is None:
            # The turn's own slow steps and idle beyond a typical turn's are named as such.
            slow = sum(_slower_than_usual(acc, s, path, typical, i, verdicts, threshold) for s in turn.steps)
            idle = turn.idle_ms - typical.turn_idle_ms
            if idle >= threshold:
                acc.add(("idle", i), idle, [s.step_id for s in turn.steps[:1]], turn=i,
                        before=turn.idle_before_ms >= turn.idle_ms / 2)
            else:
                idle = 0.0
            ms = sum(path.get(s.step_id, 0.0) for s in turn.steps) + turn.idle_ms - slow - idle
            acc.add(("extra_turn",), ms, [s.step_id for s in turn.steps], turn=i)
            rows += [Row("extra", s.label, i + 1, None, s.step_id, "", s.start_ms, s.duration_ms, kind=s.kind)
                     for s in turn.steps]
            continue
        if turn is None:
            acc.add(("missing_turn",), -tt.expected_ms, (), [s.step_id for s in tt.slots], turn=j)
            rows += [Row("missing", s.label, None, j + 1, "", s.step_id, None, None, s.start_ms, s.median_ms,
                         kind=s.kind) for s in tt.slots]
            continue
        _explain_turn(acc, rows, turn, tt, i, j, n_turns, path, verdicts, repeats, threshold, typical)
    items = _items(acc, n_turns, typical)
    if acc.small_n:
        items.append(Item("smaller", acc.small_ms, "smaller", tuple(acc.small_steps), (), str(acc.small_n)))
    remainder = difference - sum(item.ms for item in items)
    kept = [item for item in items if abs(item.ms) >= threshold and item.kind != "smaller"]
    small = [item for item in items if abs(item.ms) < threshold or item.kind == "smaller"]
    kept.sort(key=lambda item: (-abs(item.ms), item.text))
    if small and abs(sum(item.ms for item in small)) >= 0.05:
        count = sum(int(item.verdict) if item.kind == "smaller" else 1 for item in small)
        kept.append(Item("smaller", sum(item.ms for item in small),
                         f"{_plural(count, 'smaller difference')} (each under {fmt_s(threshold)})",
                         tuple(s for item in small for s in item.step_ids)[:50],
                         tuple(s for item in small for s in item.other_step_ids)[:50]))
    if abs(remainder) >= 0.05:
        why = ("the typical run's parts are medians, which do not add up to its median duration"
               if typical.scope != "task" else "rounding")
        kept.append(Item("remainder", remainder, f"not attributed: {why}"))
    return Explanation(task.task_id, task.duration_ms, typical.duration_ms, typical, kept, rows,
                       _headline(task.duration_ms, typical, kept))


# A step with no typical position is "slower than usual" when it took this many times its
# label's median (and at least `small` ms more): tool latencies are right-skewed, p99 is about
# 2–2.5× the median (docs/simulator.md), so 3× is beyond ordinary variation of a call that is
# simply not usually made there. A step a finding already calls slow (it has a verdict) needs
# only 1.2×: two independent pieces of evidence.
SLOWER_THAN_USUAL = 3.0
SLOWER_WITH_FINDING = 1.2


def _speed_item(acc: _Acc, step: DStep, own: float, other_id: str, median_ms: float, median_ttft: float | None,
                i: int, verdicts: Mapping[str, str], small: float) -> None:
    """The change of a step's duration on the path, as a slower/faster item (LLM steps grouped
    by device and verdict, with TTFT named when it is most of the change)."""
    direction = "slower" if own >= 0 else "faster"
    if abs(own) < small:  # most steps of a long task: one bucket, not one item each
        acc.small_add(own, step.step_id)
    elif step.kind == "llm":
        ttft_part = (step.ttft_ms is not None and median_ttft is not None and own != 0
                     and (step.ttft_ms - median_ttft) / own >= 0.5)
        verdict = verdicts.get(step.step_id, "") if direction == "slower" else ""
        # One item per turn, unless a finding's verdict explains several turns together.
        acc.add((direction, "llm", step.name, step.device, verdict, ttft_part, i if not verdict else -1), own,
                [step.step_id], [other_id], turn=i, name=step.name, device=step.device, verdict=verdict,
                ttft=ttft_part)
    else:
        acc.add((direction, "call", step.step_id), own, [step.step_id], [other_id], turn=i,
                name=step.tool_name or step.name, ratio=step.duration_ms / median_ms if median_ms else 0.0)


def _slower_than_usual(acc: _Acc, step: DStep, path: Mapping[str, float], typical: Typical, i: int,
                       verdicts: Mapping[str, str], small: float) -> float:
    """For a step at no typical position: its path time above its label's usual duration, as a
    "slower" item, when it is clearly slower than usual; returns those ms (0 otherwise)."""
    usual = typical.labels.get(step.label)
    p, d = path.get(step.step_id, 0.0), step.duration_ms
    factor = SLOWER_WITH_FINDING if verdicts.get(step.step_id) else SLOWER_THAN_USUAL
    if usual is None or p <= 0 or d <= 0 or d < factor * usual[0] or d - usual[0] < small:
        return 0.0
    own = p * (d - usual[0]) / d
    _speed_item(acc, step, own, "", usual[0], usual[1], i, verdicts, small)
    return own


def _explain_turn(acc: _Acc, rows: list[Row], turn: Turn, tt: TypicalTurn, i: int, j: int, n_turns: int,
                  path: Mapping[str, float], verdicts: Mapping[str, str], repeats: set[str], small: float,
                  typical: Typical) -> None:
    """One pair of turns. A step at a typical position contributes the change of its duration on
    the path ((path / duration) × (duration − median)); a call at no position its path time
    (against what typical runs spend on such calls there); a missing position minus its median
    path time. What is left is how the paired calls overlap: run one after another where the
    typical run overlaps them, displaced by extra calls, or simply overlapped differently."""
    calls = _calls(turn)
    busy = sum(s.duration_ms for s in calls)
    on_path = sum(path.get(s.step_id, 0.0) for s in calls)
    serial = (len(calls) >= 2 and busy > 0 and tt.overlap < OVERLAPPING
              and on_path / busy > tt.overlap + SERIAL_MARGIN)
    overlap = 0.0  # the paired calls' path time not explained by their own durations
    other_steps: list[DStep] = []
    for si, sj in align_steps(turn.labels, tt.labels):
        step = turn.steps[si] if si is not None else None
        slot = tt.slots[sj] if sj is not None else None
        if slot is None:
            other_steps.append(step)
            rows.append(Row("extra", step.label, i + 1, j + 1, step.step_id, "", step.start_ms, step.duration_ms,
                            kind=step.kind))
            continue
        if step is None:
            acc.add(("missing_calls", slot.name), -slot.median_path_ms, (), [slot.step_id], turn=j)
            rows.append(Row("missing", slot.label, None, j + 1, "", slot.step_id, None, None, slot.start_ms,
                            slot.median_ms, kind=slot.kind))
            continue
        p = path.get(step.step_id, 0.0)
        d = step.duration_ms
        own = (p / d) * (d - slot.median_ms) if d > 0 else -slot.median_path_ms
        overlap += (p - slot.median_path_ms) - own
        status = "same" if abs(d - slot.median_ms) < max(1.0, 0.05 * slot.median_ms) else (
            "slower" if d > slot.median_ms else "faster")
        rows.append(Row(status, step.label, i + 1, j + 1, step.step_id, slot.step_id, step.start_ms, d,
                        slot.start_ms, slot.median_ms, kind=step.kind))
        if -small < own < small:  # most steps of a long task: one bucket, not one item each
            acc.small_add(own, step.step_id)
        else:
            _speed_item(acc, step, own, slot.step_id, slot.median_ms, slot.median_ttft_ms, i, verdicts, small)
    repeated = [s for s in other_steps if s.step_id in repeats]
    rest = [s for s in other_steps if s.step_id not in repeats]
    if not serial and overlap and not any(path.get(s.step_id, 0.0) > 0 for s in other_steps):
        acc.add(("overlap", i), overlap, [s.step_id for s in calls], [s.step_id for s in tt.slots if s.kind != "llm"],
                turn=i)
        overlap = 0.0
    if repeated:
        ms = sum(path.get(s.step_id, 0.0) for s in repeated)
        if not rest and not serial:
            ms, overlap = ms + overlap, 0.0
        acc.add(("repeated_calls", _labels_text(repeated)), ms, [s.step_id for s in repeated], turn=i, calls=repeated)
    # What is left of the turn's calls: the paired calls' overlap and the calls at no position.
    slow = sum(_slower_than_usual(acc, s, path, typical, i, verdicts, small) for s in rest)
    pool = overlap + sum(path.get(s.step_id, 0.0) for s in rest) - slow
    if serial:
        # Run one after another where typical runs overlap them: the path time above what the
        # typical overlap ratio would give these calls (at least the longest of them).
        longest = max(s.duration_ms for s in calls)
        ms = min(max(0.0, on_path - max(longest, tt.overlap * busy)), max(pool, 0.0))
        acc.add(("serialised", i), ms, [s.step_id for s in calls if path.get(s.step_id, 0.0) > 0],
                [s.step_id for s in tt.slots if s.kind != "llm"], turn=i, n_calls=len(calls))
        pool -= ms
    if not rest and -small < pool - tt.other_path_ms < small:
        acc.small_add(pool - tt.other_path_ms, "")
    elif rest or tt.other_path_ms or pool:
        ms = pool - tt.other_path_ms
        extra = len(rest) - round(tt.other_calls)
        if extra > 0 and ms > 0:
            names = {s.tool_name or s.name for s in rest}
            key = ("extra_calls", names.pop()) if len(names) == 1 else ("extra_calls", f"turn {i}")
            acc.add(key, ms, [s.step_id for s in rest], turn=i, calls=rest, extra=extra)
        else:
            acc.add(("other_calls", i), ms, [s.step_id for s in rest], turn=i, calls=rest, typical=tt.other_calls)
    idle = turn.idle_ms - tt.idle_ms
    if -small < idle < small:
        acc.small_add(idle, turn.steps[0].step_id if turn.steps else "")
    else:
        acc.add(("idle", i), idle, [s.step_id for s in turn.steps[:1]], turn=i,
                before=turn.idle_before_ms >= turn.idle_ms / 2)


def _items(acc: _Acc, n_turns: int, typical: Typical) -> list[Item]:
    other = "the typical run" if typical.scope != "task" else "the other task"
    out = []
    for key, g in acc.groups.items():
        kind, ms, steps, others = key[0], g["ms"], tuple(g["steps"]), tuple(g["others"])
        turns = ", ".join(str(t + 1) for t in g["turns"])
        where = f"turn {turns}" if len(g["turns"]) == 1 else f"turns {turns}"
        if kind == "extra_turn":
            text = f"{_plural(g['n'], 'extra turn')} ({where})"
        elif kind == "missing_turn":
            text = f"{_plural(g['n'], 'turn')} fewer than {other}"
        elif kind == "serialised":
            text = (f"{g['n_calls']} calls run one after another in {_turn_name(key[1], n_turns)}"
                    f" where {other} overlaps them")
        elif kind == "repeated_calls":
            text = f"{_plural(len(steps), 'repeated call')} ({key[1]})"
        elif kind == "extra_calls" and key[1].startswith("turn "):
            text = f"{_plural(g['extra_n'], 'extra call')} in {where} ({_labels_text(g['calls_seen'])})"
        elif kind == "extra_calls":
            text = f"{g['extra_n']} extra {key[1]} call{'s' if g['extra_n'] != 1 else ''} ({where})"
        elif kind == "other_calls":
            labels = _labels_text(g["calls_seen"]) or "none"
            text = (f"calls in {_turn_name(key[1], n_turns)} ({labels}) took "
                    f"{'longer' if ms >= 0 else 'less time'} than {other}'s")
        elif kind == "missing_calls":
            text = f"{_plural(g['n'], key[1] + ' call')} fewer than {other}"
        elif kind in ("slower", "faster") and key[1] == "llm":
            what = g["name"] + (" TTFT" if g["ttft"] else "")
            text = f"{kind} {what}" + (f" on {g['device']}" if g["device"] else "") + (
                f" ({g['verdict']})" if g["verdict"] else "") + (f" in {g['n']} turns" if g["n"] > 1 else "")
        elif kind in ("slower", "faster"):
            text = (f"{kind} {g['name']}" if g["n"] == 1 else f"{g['n']} {kind} {g['name']} calls")
            if g["n"] == 1 and g.get("ratio"):
                text += f" ({g['ratio']:.1f}× {'typical' if typical.scope != 'task' else 'the other'})"
        elif kind == "overlap":
            text = (f"calls in {_turn_name(key[1], n_turns)} overlapped "
                    f"{'less' if ms >= 0 else 'more'} than in {other}")
        elif kind == "idle":
            place = _turn_name(key[1], n_turns)
            text = ("idle before " if g.get("before") else "idle in ") + place
            if ms < 0:
                text = "less " + text
        elif kind == "smaller":
            out.append(Item(kind, ms, kind, steps[:50], others[:50], str(g["n"])))
            continue
        else:
            text = kind
        out.append(Item(kind, ms, text, steps, others, g.get("verdict", "")))
    return out


def _headline(task_ms: float, typical: Typical, items: Sequence[Item]) -> str:
    if typical.scope == "task":
        head = f"{fmt_s(task_ms)} vs {fmt_s(typical.duration_ms)} for task {typical.task_id}"
    else:
        scope = typical.release if typical.scope == "release" else "all releases, baseline window"
        head = (f"{fmt_s(task_ms)} vs typical {fmt_s(typical.duration_ms)} for {typical.name or '(unnamed)'}"
                f" ({scope}, {_plural(typical.runs, 'run')})")
    sign = 1 if task_ms >= typical.duration_ms else -1
    top = [i for i in items if i.kind not in ("remainder", "smaller") and i.ms * sign > 0][:HEADLINE_ITEMS]
    if not top:
        return head
    return head + ": " + ", ".join(f"{fmt_delta(i.ms)} from {i.text}" for i in top)
