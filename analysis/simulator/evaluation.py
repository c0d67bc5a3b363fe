"""Score findings against the simulator's ground truth: precision, recall and F1 per kind, and
how often the hardware verdict on a labelled LLM step is the right one. Pure: findings come in
as plain `FindingView`s, so the scoring is tested without a database.

Matching: a finding matches a label when both are about the same task and the same kind and,
for step-level kinds, their step ids overlap. `context_growth` is a property of the whole task,
so task and kind suffice. A finding that names no steps at all is matched on task and kind.
- precision = findings that match some label / findings;
- recall = labels matched by some finding / labels;
- F1 = their harmonic mean; "overall" pools the counts of every kind (micro-average).
With no findings (or no labels) of a kind, its precision (recall) is reported as 0, never
as a flattering 1. A label marked `"ambiguous": true` is left out of both: a finding on it
counts neither way.

Hardware verdict accuracy: over the LLM steps named in `hardware_queueing` /
`hardware_throttling` labels (each with its expected verdict), the share for which some
finding of the same task that names the step carries that verdict in `evidence["verdict"]`
(or `evidence["verdicts"][step_id]`). A labelled step no finding gives a verdict for counts
as wrong: the dashboard would not have told the user either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from analysis.simulator.generate import KINDS

TASK_LEVEL_KINDS = {"context_growth"}


class LabelError(ValueError):
    """A labels file line that cannot be used; the message names the line."""


@dataclass(frozen=True)
class FindingView:
    task_id: str
    kind: str
    step_ids: tuple[str, ...]
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KindScore:
    kind: str
    labels: int
    findings: int
    labels_found: int
    findings_matched: int

    @property
    def precision(self) -> float:
        return self.findings_matched / self.findings if self.findings else 0.0

    @property
    def recall(self) -> float:
        return self.labels_found / self.labels if self.labels else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass(frozen=True)
class Evaluation:
    scores: list[KindScore]
    overall: KindScore
    verdict_steps: int
    verdict_correct: int
    verdict_given: int

    @property
    def verdict_accuracy(self) -> float:
        return self.verdict_correct / self.verdict_steps if self.verdict_steps else 0.0


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


def _matches(label: dict, finding: FindingView) -> bool:
    if label["task_id"] != finding.task_id or label["kind"] != finding.kind:
        return False
    if label["kind"] in TASK_LEVEL_KINDS or not finding.step_ids:
        return True
    return bool(set(label.get("step_ids", ())) & set(finding.step_ids))


def evaluate(labels: list[dict], findings: list[FindingView]) -> Evaluation:
    # An `ambiguous` label marks something that happened but that no definition settles (a
    # recording machine's stall that made one call 2× slower): a finding on it is neither right
    # nor wrong, and missing it is no miss.
    ambiguous = [label for label in labels if label.get("ambiguous")]
    labels = [label for label in labels if not label.get("ambiguous")]
    findings = [f for f in findings if not any(_matches(label, f) for label in ambiguous)
                or any(_matches(label, f) for label in labels)]
    by_task: dict[str, list[FindingView]] = {}
    for f in findings:
        by_task.setdefault(f.task_id, []).append(f)
    labels_by_task: dict[str, list[dict]] = {}
    for label in labels:
        labels_by_task.setdefault(label["task_id"], []).append(label)

    scores = []
    for kind in KINDS:
        kind_labels = [label for label in labels if label["kind"] == kind]
        kind_findings = [f for f in findings if f.kind == kind]
        found = sum(1 for label in kind_labels if any(_matches(label, f) for f in by_task.get(label["task_id"], ())))
        matched = sum(1 for f in kind_findings if any(_matches(label, f) for label in labels_by_task.get(f.task_id, ())))
        scores.append(KindScore(kind, len(kind_labels), len(kind_findings), found, matched))
    overall = KindScore("overall", sum(s.labels for s in scores), sum(s.findings for s in scores),
                        sum(s.labels_found for s in scores), sum(s.findings_matched for s in scores))

    steps = correct = given = 0
    for label in labels:
        for step_id, expected in (label.get("verdicts") or {}).items():
            steps += 1
            verdicts = {_verdict(f, step_id) for f in by_task.get(label["task_id"], ()) if step_id in f.step_ids}
            verdicts.discard(None)
            given += bool(verdicts)
            correct += expected in verdicts
    return Evaluation(scores, overall, steps, correct, given)


def _verdict(finding: FindingView, step_id: str) -> str | None:
    evidence = finding.evidence if isinstance(finding.evidence, dict) else {}
    per_step = evidence.get("verdicts")
    if isinstance(per_step, dict) and isinstance(per_step.get(step_id), str):
        return per_step[step_id]
    verdict = evidence.get("verdict")
    return verdict if isinstance(verdict, str) else None


def format_table(result: Evaluation) -> str:
    header = f"{'kind':<22} {'labels':>7} {'findings':>9} {'found':>6} {'correct':>8} {'precision':>10} {'recall':>7} {'F1':>6}"
    lines = [header, "-" * len(header)]
    for s in [*result.scores, result.overall]:
        if s is result.overall:
            lines.append("-" * len(header))
        lines.append(f"{s.kind:<22} {s.labels:>7} {s.findings:>9} {s.labels_found:>6} {s.findings_matched:>8} "
                     f"{s.precision:>10.3f} {s.recall:>7.3f} {s.f1:>6.3f}")
    lines.append("")
    lines.append(f"hardware verdict accuracy: {result.verdict_accuracy:.3f} "
                 f"({result.verdict_correct} of {result.verdict_steps} labelled LLM steps right; "
                 f"{result.verdict_given} had a verdict)")
    return "\n".join(lines)


# --- a labelled corpus from another generator (../shared/eval/ format) -------------------------
# Scored at the task level, as that corpus's README says: precision over the findings the product
# asserts (confidence not low), recall over every finding it surfaces (any confidence). A
# slow_step on a task labelled with a kind that also slows a step down counts as right.

SLOWING_KINDS = {"hardware_queueing", "hardware_throttling", "context_growth"}


@dataclass(frozen=True)
class CorpusScore:
    kind: str
    labels: int          # labelled tasks of the kind
    asserted: int        # tasks with an asserted finding of the kind
    asserted_right: int
    surfaced_found: int  # labelled tasks with a finding of the kind at any confidence
    low: int             # tasks whose findings of the kind are all low

    @property
    def precision(self) -> float:
        return self.asserted_right / self.asserted if self.asserted else 0.0

    @property
    def recall(self) -> float:
        return self.surfaced_found / self.labels if self.labels else 0.0


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95 % interval of a proportion; (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def corpus_score(labels: list[dict], findings: list[tuple[str, str, str]]) -> list[CorpusScore]:
    """labels: {"task_id", "kind"}; findings: (task_id, kind, confidence) of every finding."""
    labelled: dict[str, set[str]] = {}
    for label in labels:
        labelled.setdefault(label["kind"], set()).add(label["task_id"])
    asserted: dict[str, set[str]] = {}
    surfaced: dict[str, set[str]] = {}
    for task_id, kind, confidence in findings:
        surfaced.setdefault(kind, set()).add(task_id)
        if confidence != "low":
            asserted.setdefault(kind, set()).add(task_id)
    out = []
    for kind in sorted(set(labelled) | set(surfaced)):
        truth = set(labelled.get(kind, ()))
        if kind == "slow_step":
            accepted = truth | set().union(*(labelled.get(k, set()) for k in SLOWING_KINDS))
        else:
            accepted = truth
        mine, seen = asserted.get(kind, set()), surfaced.get(kind, set())
        out.append(CorpusScore(kind, len(truth), len(mine), len(mine & accepted), len(seen & truth),
                               len(seen - mine)))
    return out


def format_corpus_table(scores: list[CorpusScore]) -> str:
    header = (f"{'kind':<22} {'labels':>6} {'asserted':>8} {'right':>6} {'precision (95% CI)':>22} "
              f"{'found':>6} {'recall (95% CI)':>20} {'low only':>8}")
    lines = [header, "-" * len(header)]
    for s in scores:
        plo, phi = wilson(s.asserted_right, s.asserted)
        rlo, rhi = wilson(s.surfaced_found, s.labels)
        lines.append(f"{s.kind:<22} {s.labels:>6} {s.asserted:>8} {s.asserted_right:>6} "
                     f"{s.precision:>7.3f} [{plo:.2f}, {phi:.2f}]     {s.surfaced_found:>6} "
                     f"{s.recall:>7.3f} [{rlo:.2f}, {rhi:.2f}]   {s.low:>8}")
    return "\n".join(lines)
