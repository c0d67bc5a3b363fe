"""Score findings against ground truth — the simulator's labels, a recorded family's, a corpus
written outside the project — by one set of rules, so that the three answers can be compared.
Pure: findings come in as plain `FindingView`s, so the scoring is tested without a database.
How to read the table, and why these rules: docs/analysis.md, "Evaluation".

Units. A label is one injected problem; a finding is one finding. The kinds the product defines
per step (`slow_step`, `hardware_queueing`, `hardware_throttling`, `hardware_kv_cache_pressure`:
one finding per slowed step)
are scored per step: a label naming several steps (every LLM step one device incident slowed in
the task) stands for one labelled problem per step, with that step's `step_magnitude_ms` as its
wasted time when the label has one.

Matching. A finding matches a label of its task and kind when their step sets overlap by at
least half of the larger: |F ∩ L| ≥ ½ · max(|F|, |L|). So most of what the finding names is in
the label *and* most of the label is named by the finding: a finding that sprawls over a turn
and touches one labelled step, or names one step of a three-call group, matches nothing. A
finding or label that names no steps matches only one that names none either.
A `slow_step` finding on a task with a `hardware_*` or `context_growth` label is right too
(those slow steps down; the corpus README's rule, kept everywhere, at the task level as it says:
a corpus's growth label may leave out the last, longest turn), though it finds no label.

Figures per kind, each with its Wilson 95 % interval:
- precision over asserted findings (confidence not `low`: what the product counts and claims)
  and over surfaced ones (every finding, as the task page lists them);
- recall of the labels by asserted findings and by surfaced ones;
- wasted time: over the labels that carry their true `magnitude_ms` and that asserted findings
  found, the share whose findings' summed `wasted_ms` is within ±30 % of it.
A kind with no findings (or no labels) gets 0 of 0 and the interval [0, 1], never a flattering
1. A label marked `"ambiguous": true` is left out: a finding that matches only such labels is
neither right nor wrong, and missing it is no miss.

Hardware verdict accuracy: over the LLM steps named in `hardware_*` labels with their expected
verdict (`verdicts`), the share for which an asserted finding of the same task naming the step
carries that verdict in `evidence["verdict"]` (or `evidence["verdicts"][step_id]`). A labelled
step no finding gives a verdict for counts as wrong: the dashboard would not have told the user.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from analysis.simulator.generate import KINDS

PER_STEP_KINDS = {"slow_step", "hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure"}
SLOWING_KINDS = {"hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure", "context_growth"}
MAGNITUDE_TOLERANCE = 0.30
LOW = "low"


class LabelError(ValueError):
    """A labels file line that cannot be used; the message names the line."""


@dataclass(frozen=True)
class FindingView:
    task_id: str
    kind: str
    step_ids: tuple[str, ...]
    evidence: dict = field(default_factory=dict)
    confidence: str = "high"
    wasted_ms: float | None = None

    @property
    def asserted(self) -> bool:
        return self.confidence != LOW


@dataclass(frozen=True)
class Share:
    """k of n, with its Wilson 95 % interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.k, self.n)

    def __add__(self, other: Share) -> Share:
        return Share(self.k + other.k, self.n + other.n)


@dataclass(frozen=True)
class KindScore:
    kind: str
    labels: int
    precision_asserted: Share   # asserted findings that match a label / asserted findings
    precision_surfaced: Share   # the same over every finding
    recall_asserted: Share      # labels some asserted finding matches / labels
    recall_surfaced: Share      # labels some finding matches / labels
    magnitude: Share            # found labels with a true magnitude whose findings' wasted is within ±30 %

    def __add__(self, other: KindScore) -> KindScore:
        return KindScore("overall", self.labels + other.labels, self.precision_asserted + other.precision_asserted,
                         self.precision_surfaced + other.precision_surfaced,
                         self.recall_asserted + other.recall_asserted, self.recall_surfaced + other.recall_surfaced,
                         self.magnitude + other.magnitude)


@dataclass(frozen=True)
class Evaluation:
    scores: list[KindScore]
    overall: KindScore
    verdict: Share
    verdict_given: int

    def score(self, kind: str) -> KindScore:
        return next(s for s in self.scores if s.kind == kind)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95 % interval of a proportion; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def read_labels(lines: Iterable[str]) -> list[dict]:
    labels = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            label = json.loads(line)
        except ValueError as exc:
            raise LabelError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(label, dict):
            raise LabelError(f"line {number}: must be a JSON object")
        if label.get("kind") not in KINDS:
            raise LabelError(f"line {number}: kind {label.get('kind')!r} is not one of {', '.join(KINDS)}")
        if not isinstance(label.get("task_id"), str) or not label["task_id"]:
            raise LabelError(f"line {number}: task_id is missing")
        steps = label.get("step_ids", [])
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise LabelError(f"line {number}: step_ids must be a list of strings")
        labels.append(label)
    return labels


def scoring_units(labels: list[dict], *, by_steps: bool = True) -> list[dict]:
    """The labels as they are scored: a per-step kind's label split into one label per step
    (matched per task, `by_steps=False`, a label stays whole)."""
    if not by_steps:
        return list(labels)
    out = []
    for label in labels:
        steps = list(label.get("step_ids") or ())
        if label["kind"] not in PER_STEP_KINDS or len(steps) <= 1:
            out.append(label)
            continue
        per_step = label.get("step_magnitude_ms") or {}
        for step in steps:
            unit = {k: v for k, v in label.items() if k not in ("step_ids", "magnitude_ms", "step_magnitude_ms")}
            unit["step_ids"] = [step]
            if step in per_step:
                unit["magnitude_ms"] = per_step[step]
            out.append(unit)
    return out


def overlaps(finding_steps: Iterable[str], label_steps: Iterable[str]) -> bool:
    """|F ∩ L| ≥ ½ · max(|F|, |L|): each names mostly what the other names."""
    f, lab = set(finding_steps), set(label_steps)
    if not f or not lab:
        return not f and not lab
    return 2 * len(f & lab) >= max(len(f), len(lab))


def matches(label: dict, finding: FindingView, *, by_steps: bool = True) -> bool:
    return (label["task_id"] == finding.task_id and label["kind"] == finding.kind
            and (not by_steps or overlaps(finding.step_ids, label.get("step_ids") or ())))


def _slowed_by_another_kind(finding: FindingView, labels: list[dict]) -> bool:
    return finding.kind == "slow_step" and any(label["kind"] in SLOWING_KINDS for label in labels)


def evaluate(labels: list[dict], findings: list[FindingView], *, by_steps: bool = True) -> Evaluation:
    """Score `findings` against `labels`. `by_steps=False` is the task-level rule a corpus may
    state as its own (corpus-a's README): a finding matches every label of its task and kind."""
    units = scoring_units(labels, by_steps=by_steps)
    ambiguous = [u for u in units if u.get("ambiguous")]
    units = [u for u in units if not u.get("ambiguous")]
    by_task: dict[str, list[dict]] = {}
    for unit in units:
        by_task.setdefault(unit["task_id"], []).append(unit)
    ambiguous_by_task: dict[str, list[dict]] = {}
    for unit in ambiguous:
        ambiguous_by_task.setdefault(unit["task_id"], []).append(unit)

    # Which labels each finding matches; findings on nothing but ambiguous labels are set aside.
    scored: list[tuple[FindingView, list[int], bool]] = []
    index = {id(u): i for i, u in enumerate(units)}
    for f in findings:
        mine = [index[id(u)] for u in by_task.get(f.task_id, ()) if matches(u, f, by_steps=by_steps)]
        if not mine and any(matches(u, f, by_steps=by_steps) for u in ambiguous_by_task.get(f.task_id, ())):
            continue
        scored.append((f, mine, bool(mine) or _slowed_by_another_kind(f, by_task.get(f.task_id, []))))

    found_by: dict[int, list[FindingView]] = {}
    for f, mine, _ in scored:
        for i in mine:
            found_by.setdefault(i, []).append(f)

    scores = []
    for kind in KINDS:
        kind_units = [i for i, u in enumerate(units) if u["kind"] == kind]
        kind_findings = [(f, right) for f, _, right in scored if f.kind == kind]
        asserted = [right for f, right in kind_findings if f.asserted]
        found_asserted = [i for i in kind_units if any(f.asserted for f in found_by.get(i, ()))]
        magnitudes = [_within(units[i], [f for f in found_by[i] if f.asserted]) for i in found_asserted
                      if isinstance(units[i].get("magnitude_ms"), int | float)]
        scores.append(KindScore(
            kind, len(kind_units),
            Share(sum(asserted), len(asserted)),
            Share(sum(right for _, right in kind_findings), len(kind_findings)),
            Share(len(found_asserted), len(kind_units)),
            Share(sum(1 for i in kind_units if found_by.get(i)), len(kind_units)),
            Share(sum(magnitudes), len(magnitudes))))
    overall = scores[0]
    for s in scores[1:]:
        overall = overall + s

    steps = correct = given = 0
    asserted_by_task: dict[str, list[FindingView]] = {}
    for f, _, _ in scored:
        if f.asserted:
            asserted_by_task.setdefault(f.task_id, []).append(f)
    for label in labels:
        if label.get("ambiguous"):
            continue
        for step_id, expected in (label.get("verdicts") or {}).items():
            steps += 1
            verdicts = {_verdict(f, step_id) for f in asserted_by_task.get(label["task_id"], ()) if step_id in f.step_ids}
            verdicts.discard(None)
            given += bool(verdicts)
            correct += expected in verdicts
    return Evaluation(scores, overall, Share(correct, steps), given)


def _within(label: dict, found: list[FindingView]) -> bool:
    truth = float(label["magnitude_ms"])
    claimed = sum(f.wasted_ms or 0.0 for f in found)
    return abs(claimed - truth) <= MAGNITUDE_TOLERANCE * abs(truth)


def _verdict(finding: FindingView, step_id: str) -> str | None:
    evidence = finding.evidence if isinstance(finding.evidence, dict) else {}
    per_step = evidence.get("verdicts")
    if isinstance(per_step, dict) and isinstance(per_step.get(step_id), str):
        return per_step[step_id]
    verdict = evidence.get("verdict")
    return verdict if isinstance(verdict, str) else None


def _cell(share: Share, *, none: str = "") -> str:
    if none and not share.n:
        return none
    lo, hi = share.interval
    return f"{share.value:5.3f} [{lo:.2f},{hi:.2f}]"


def format_table(result: Evaluation) -> str:
    """One row per kind: labels; asserted findings, how many right, precision; the same for
    surfaced ones; recall by asserted and by surfaced findings; the share of found labels whose
    wasted time is within ±30 % (of how many carry one). Every figure with its 95 % interval."""
    header = (f"{'kind':<21}{'labels':>7}{'asserted':>9}{'right':>6}  {'precision (asserted)':<19}"
              f"{'surfaced':>9}{'right':>6}  {'precision (surfaced)':<19}  {'recall (asserted)':<19}"
              f"  {'recall (surfaced)':<19}  {'wasted ±30 %':<19}{'of':>5}")
    lines = [header, "-" * len(header)]
    for s in [*result.scores, result.overall]:
        if s is result.overall:
            lines.append("-" * len(header))
        lines.append(f"{s.kind:<21}{s.labels:>7}{s.precision_asserted.n:>9}{s.precision_asserted.k:>6}  "
                     f"{_cell(s.precision_asserted):<19}{s.precision_surfaced.n:>9}{s.precision_surfaced.k:>6}  "
                     f"{_cell(s.precision_surfaced):<19}  {_cell(s.recall_asserted):<19}  "
                     f"{_cell(s.recall_surfaced):<19}  {_cell(s.magnitude, none='n/a'):<19}{s.magnitude.n:>5}")
    lines.append("")
    lines.append(f"hardware verdict accuracy: {_cell(result.verdict)} ({result.verdict.k} of {result.verdict.n} "
                 f"labelled LLM steps right; {result.verdict_given} had a verdict)")
    return "\n".join(lines)
