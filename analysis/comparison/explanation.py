"""The explanation of a task diff: items that add up to the difference between the task and the
typical run (or another task), largest first, the aligned rows, and the headline. Pure. What each
item measures and why they add up: docs/analysis.md, "Compare with typical, compare two tasks"
(the explanation is additive)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from analysis.comparison.alignment import align_steps, align_turns
from analysis.comparison.runs import Anatomy, DStep, Run, Turn, anatomy, turn_calls
from analysis.comparison.typical_run import Typical, TypicalTurn
from analysis.units import fmt_ms, fmt_signed_ms

# A turn counts as run one after another when its calls' path time over their summed durations
# exceeds the typical ratio by this much (0 = fully overlapped is impossible; 1 = serial).
SERIAL_MARGIN = 0.2
# The typical run must overlap its calls (ratio below this) for serialisation to be named.
OVERLAPPING = 0.9
HEADLINE_ITEMS = 3
# A step with no typical position is "slower than usual" when it took this many times its
# label's median (and at least `small` ms more): tool latencies are right-skewed, p99 is about
# 2–2.5× the median (docs/simulator.md), so 3× is beyond ordinary variation of a call that is
# simply not usually made there. A step a finding already calls slow (it has a verdict) needs
# only 1.2×: two independent pieces of evidence.
SLOWER_THAN_USUAL = 3.0
SLOWER_WITH_FINDING = 1.2


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _turn_name(index: int, count: int) -> str:
    return "the last round" if index == count - 1 and count > 1 else f"round {index + 1}"


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
        # Steps at a position of the other run (the compare waterfall pairs them) vs none.
        g["placed_n"] = g.get("placed_n", 0) + (0 if info.get("elsewhere") else 1)
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
        repeats = _repeated_calls(an)
    path = an.path_ms
    difference = task.duration_ms - typical.duration_ms
    threshold = small_ms if small_ms is not None else max(10.0, 0.02 * abs(difference), 0.005 * task.duration_ms)
    for i, j in align_turns([t.signature for t in an.turns], [t.signature for t in typical.turns]):
        turn = an.turns[i] if i is not None else None
        tt = typical.turns[j] if j is not None else None
        if tt is None:
            _explain_extra_turn(acc, rows, turn, i, path, verdicts, threshold, typical)
        elif turn is None:
            _explain_missing_turn(acc, rows, tt, j)
        else:
            _explain_turn(acc, rows, turn, tt, i, j, path, verdicts, repeats, threshold, typical)
    items = _items(acc, n_turns, typical)
    if acc.small_n:
        items.append(Item("smaller", acc.small_ms, "smaller", tuple(acc.small_steps), (), str(acc.small_n)))
    kept = _largest_first(items, difference - sum(item.ms for item in items), threshold, typical)
    return Explanation(task.task_id, task.duration_ms, typical.duration_ms, typical, kept, rows,
                       _headline(task.duration_ms, typical, kept))


def _repeated_calls(an: Anatomy) -> set[str]:
    """The calls whose tool and canonical arguments an earlier call had."""
    repeats = set()
    seen_calls: set[tuple[str, str]] = set()
    for t in an.turns:
        for s in t.steps:
            if s.kind != "llm" and s.args:
                key = (s.tool_name or s.name, s.args)
                if key in seen_calls:
                    repeats.add(s.step_id)
                seen_calls.add(key)
    return repeats


def _largest_first(items: list[Item], remainder: float, threshold: float, typical: Typical) -> list[Item]:
    """The items of at least `threshold` ms, largest first, then the smaller ones summed up in
    one item and what is left of the difference (`remainder`), each when it is not nothing."""
    kept = [item for item in items if abs(item.ms) >= threshold and item.kind != "smaller"]
    small = [item for item in items if abs(item.ms) < threshold or item.kind == "smaller"]
    kept.sort(key=lambda item: (-abs(item.ms), item.text))
    if small and abs(sum(item.ms for item in small)) >= 0.05:
        count = sum(int(item.verdict) if item.kind == "smaller" else 1 for item in small)
        kept.append(Item("smaller", sum(item.ms for item in small),
                         f"{_plural(count, 'smaller difference')} (each under {fmt_ms(threshold)})",
                         tuple(s for item in small for s in item.step_ids)[:50],
                         tuple(s for item in small for s in item.other_step_ids)[:50]))
    if abs(remainder) >= 0.05:
        why = ("the typical run's parts are medians, which do not add up to its median duration"
               if typical.scope != "task" else "rounding")
        kept.append(Item("remainder", remainder, f"not attributed: {why}"))
    return kept


def _explain_extra_turn(acc: _Acc, rows: list[Row], turn: Turn, i: int, path: Mapping[str, float],
                        verdicts: Mapping[str, str], small: float, typical: Typical) -> None:
    """A turn with no typical counterpart: its path and idle time, less its own slow steps and
    its idle beyond a typical turn's, which are named as such."""
    slow = sum(_slower_than_usual(acc, s, path, typical, i, verdicts, small) for s in turn.steps)
    idle = turn.idle_ms - typical.turn_idle_ms
    if idle >= small:
        _add_idle(acc, turn, i, idle)
    else:
        idle = 0.0
    ms = sum(path.get(s.step_id, 0.0) for s in turn.steps) + turn.idle_ms - slow - idle
    acc.add(("extra_turn",), ms, [s.step_id for s in turn.steps], turn=i)
    rows.extend(Row("extra", s.label, i + 1, None, s.step_id, "", s.start_ms, s.duration_ms, kind=s.kind)
                for s in turn.steps)


def _explain_missing_turn(acc: _Acc, rows: list[Row], tt: TypicalTurn, j: int) -> None:
    """A typical turn the task does not have: minus its expected time."""
    acc.add(("missing_turn",), -tt.expected_ms, (), [s.step_id for s in tt.slots], turn=j)
    rows.extend(Row("missing", s.label, None, j + 1, "", s.step_id, None, None, s.start_ms, s.median_ms,
                    kind=s.kind) for s in tt.slots)


def _add_idle(acc: _Acc, turn: Turn, i: int, idle: float) -> None:
    acc.add(("idle", i), idle, [s.step_id for s in turn.steps[:1]], turn=i,
            before=turn.idle_before_ms >= turn.idle_ms / 2)


def _speed_item(acc: _Acc, step: DStep, own: float, other_id: str, median_ms: float, median_ttft: float | None,
                i: int, verdicts: Mapping[str, str], small: float, *, elsewhere: bool = False) -> None:
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
                ttft=ttft_part, elsewhere=elsewhere)
    else:
        acc.add((direction, "call", step.step_id), own, [step.step_id], [other_id], turn=i,
                name=step.tool_name or step.name, ratio=step.duration_ms / median_ms if median_ms else 0.0,
                elsewhere=elsewhere)


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
    _speed_item(acc, step, own, "", usual[0], usual[1], i, verdicts, small, elsewhere=True)
    return own


def _explain_turn(acc: _Acc, rows: list[Row], turn: Turn, tt: TypicalTurn, i: int, j: int,
                  path: Mapping[str, float], verdicts: Mapping[str, str], repeats: set[str], small: float,
                  typical: Typical) -> None:
    """One pair of turns. A step at a typical position contributes the change of its duration on
    the path ((path / duration) × (duration − median)); a call at no position its path time
    (against what typical runs spend on such calls there); a missing position minus its median
    path time. What is left is how the paired calls overlap: run one after another where the
    typical run overlaps them, displaced by extra calls, or simply overlapped differently."""
    calls = turn_calls(turn)
    busy = sum(s.duration_ms for s in calls)
    on_path = sum(path.get(s.step_id, 0.0) for s in calls)
    serial = (len(calls) >= 2 and busy > 0 and tt.overlap < OVERLAPPING
              and on_path / busy > tt.overlap + SERIAL_MARGIN)
    other_steps, overlap = _explain_positions(acc, rows, turn, tt, i, j, path, verdicts, small)
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
    _explain_other_calls(acc, rest, pool, tt, i, small)
    idle = turn.idle_ms - tt.idle_ms
    if -small < idle < small:
        acc.small_add(idle, turn.steps[0].step_id if turn.steps else "")
    else:
        _add_idle(acc, turn, i, idle)


def _explain_positions(acc: _Acc, rows: list[Row], turn: Turn, tt: TypicalTurn, i: int, j: int,
                       path: Mapping[str, float], verdicts: Mapping[str, str], small: float
                       ) -> tuple[list[DStep], float]:
    """The turn's steps aligned to the typical turn's positions: a row each, a slower/faster item
    for each step at a position, a missing_calls item for each position without a step. Returns
    the steps at no position and the paired steps' path time not explained by their own
    durations (how differently they overlap)."""
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
    return other_steps, overlap


def _explain_other_calls(acc: _Acc, rest: list[DStep], pool: float, tt: TypicalTurn, i: int, small: float) -> None:
    """The calls at no typical position (`rest`, not repeats) and what is left of the turn's call
    time (`pool`), against the typical turn's time of such calls: extra calls when there are more
    of them than typical, else calls that took longer or less time."""
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


def _items(acc: _Acc, n_turns: int, typical: Typical) -> list[Item]:
    other = "the typical run" if typical.scope != "task" else "the other task"
    out = []
    for key, g in acc.groups.items():
        kind, ms, steps, others = key[0], g["ms"], tuple(g["steps"]), tuple(g["others"])
        turns = ", ".join(str(t + 1) for t in g["turns"])
        # In the comparison's words a "round" is one LLM call and the calls it led to; a "turn" is
        # only ever the user's (a task of a session): docs/ui.md, "Words".
        where = f"round {turns}" if len(g["turns"]) == 1 else f"rounds {turns}"
        if kind == "extra_turn":
            text = f"{_plural(g['n'], 'extra round')} of LLM call and tools ({where})"
        elif kind == "missing_turn":
            text = f"{_plural(g['n'], 'round')} of LLM call and tools fewer than {other}"
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
        elif kind == "slower" and key[1] == "llm" and g["verdict"] == "queueing" and g["device"]:
            # What the finding says, in the user's words: where the time went, not a verdict's name.
            text = (f"{g['name']} waiting in the queue of {g['device']}"
                    f" ({_plural(len(steps), 'call')})")
        elif kind in ("slower", "faster") and key[1] == "llm":
            what = g["name"] + (" TTFT" if g["ttft"] else "")
            text = f"{kind} {what}" + (f" on {g['device']}" if g["device"] else "") + (
                f" ({g['verdict']})" if g["verdict"] else "") + (f" in {g['n']} rounds" if g["n"] > 1 else "")
            if not g["placed_n"]:  # the waterfall draws it "only in this task": say so here too
                text += f", a call {other} does not make there"
        elif kind in ("slower", "faster"):
            text = (f"{kind} {g['name']}" if g["n"] == 1 else f"{g['n']} {kind} {g['name']} calls")
            if g["n"] == 1 and not g["placed_n"] and g.get("ratio"):
                # Paired with no step of the other run (the waterfall's "only in this task"): slower
                # than such calls usually take, not than a step there.
                text += f", a call {other} does not make there ({g['ratio']:.1f}× its usual)"
            elif g["n"] == 1 and g.get("ratio"):
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
        head = f"{fmt_ms(task_ms)} vs {fmt_ms(typical.duration_ms)} for task {typical.task_id}"
    else:
        scope = typical.release if typical.scope == "release" else "all releases, baseline window"
        head = (f"{fmt_ms(task_ms)} vs typical {fmt_ms(typical.duration_ms)} for {typical.name or '(unnamed)'}"
                f" ({scope}, {_plural(typical.runs, 'run')})")
    sign = 1 if task_ms >= typical.duration_ms else -1
    top = [i for i in items if i.kind not in ("remainder", "smaller") and i.ms * sign > 0][:HEADLINE_ITEMS]
    if not top:
        return head
    return head + ": " + ", ".join(f"{fmt_signed_ms(i.ms)} from {i.text}" for i in top)
