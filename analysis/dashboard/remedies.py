"""What to change, per finding: one line built from the finding's own evidence, with the time it
would save, and the groups that many near-identical findings of one task form.

A remedy says only what the evidence supports: a kind whose cause the evidence does not name
(an LLM call slow on a nominal device, a tool slower than usual) gets none rather than a guess.
A finding that is only possible says "if …" and "would save", never "saves" (docs/ui.md,
"Findings").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from analysis.models import Finding
from analysis.units import fmt_ms

# The kinds one finding per step stands for: many of them on one task, for one device or one
# tool, are one problem seen many times.
GROUPED_KINDS = {"slow_step", "hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure"}
MIN_GROUP = 3
_ARGS_SHOWN = 60

_GROUP_WHAT = {"hardware_queueing": "waited in queue", "hardware_throttling": "ran on a throttling GPU",
               "hardware_kv_cache_pressure": "waited for KV cache", "slow_step": "were slower than usual"}


def _short_args(arguments: object) -> str:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        arguments = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in parsed.items())
    return arguments if len(arguments) <= _ARGS_SHOWN else arguments[: _ARGS_SHOWN - 1] + "…"


def remedy(kind: str, evidence: Mapping | None, wasted_ms: float, *, counted: bool = True,
           labels: Mapping[str, str] | None = None, step_ids: Iterable[str] = ()) -> str | None:
    """The line saying what to change for one finding (None when its evidence names no change).
    `labels`: step id → the step's label (tool, model or name), for the steps it names."""
    ev = evidence if isinstance(evidence, Mapping) else {}
    labels = labels or {}
    saves = f"{'would save' if not counted else 'saves'} {fmt_ms(max(wasted_ms, 0.0))}"
    if kind == "parallelizable_calls":
        step_ids = list(step_ids)
        names = (", ".join(dict.fromkeys(labels[s] for s in step_ids)) if step_ids and all(s in labels for s in step_ids)
                 else f"these {ev.get('calls') or len(step_ids) or 'several'} calls")
        lead = "if they are independent, run" if not counted else "run"
        return (f"{lead} {names} concurrently (asyncio.gather or a thread pool; or let the model request them "
                f"in one response, e.g. parallel_tool_calls=True): {saves}")
    if kind == "repeated_tool_call":
        tool = ev.get("tool") or "the tool"
        args = ev.get("arguments")
        call = f"{tool}({_short_args(args)})" if args not in (None, "", "{}") else f"{tool}()"
        return f"cache {call} for the task, or pass the first result on: {saves}"
    if kind == "serial_gap":
        before, after = labels.get(ev.get("before") or "", ""), labels.get(ev.get("after") or "", "")
        between = f" between {before} and {after}" if before and after else ""
        if ev.get("framework_steps"):
            return f"the framework's own work{between} is the wait: look at what it does there (hooks, callbacks, state saves): {saves}"
        return f"nothing ran{between}: look for a sleep, a retry's backoff or a blocking wait in the agent's code: {saves}"
    if kind == "context_growth":
        tokens = [t for t in ev.get("input_tokens") or () if isinstance(t, int | float) and t > 0]
        grew = f"the prompt grew {tokens[-1] / tokens[0]:.1f}× over {len(tokens)} turns" if len(tokens) >= 2 else \
            "the prompt grew turn after turn"
        return f"{grew}: summarise or trim the history (keep the last turns and a summary): {saves}"
    device = ev.get("device") or "its server"
    if kind == "hardware_queueing":
        return f"{device} was saturated: scale out, or route to another replica: {saves}"
    if kind == "hardware_throttling":
        return f"{device}'s GPU slowed its clocks: check its cooling and power limit, or move load off it: {saves}"
    if kind == "hardware_kv_cache_pressure":
        return (f"{device}'s KV cache was full: give it more KV memory (vLLM --gpu-memory-utilization), fewer "
                f"concurrent sequences (--max-num-seqs), or another replica: {saves}")
    if kind == "slow_step" and ev.get("verdict") == "prefill_bound":
        return f"the prompt was the slow part: shorten it, or cache its fixed prefix (prompt caching): {saves}"
    if kind == "slow_step" and ev.get("verdict") == "decode_bound":
        return f"writing the answer was the slow part: cap max_tokens or ask for a shorter answer: {saves}"
    return None


@dataclass
class FindingGroup:
    """Many findings of one kind on one task for one device (or tool): shown as one row."""

    kind: str
    subject: str
    findings: list = field(default_factory=list)
    is_group = True
    is_counted = True

    @property
    def confidence(self) -> str:
        return "medium" if any(f.confidence == "medium" for f in self.findings) else "high"

    @property
    def confidence_reason(self) -> str:
        return self.findings[0].confidence_reason

    @property
    def severity(self) -> str:
        return max((f.severity for f in self.findings),
                   key=lambda s: Finding.SEVERITIES.index(s) if s in Finding.SEVERITIES else -1)

    @property
    def step_ids(self) -> list[str]:
        return [s for f in self.findings for s in f.step_ids]

    @property
    def device_url(self) -> str:
        return next((u for f in self.findings if (u := getattr(f, "device_url", ""))), "")

    @property
    def wasted_ms(self) -> float:
        return sum(f.wasted_ms for f in self.findings)

    @property
    def summary(self) -> str:
        return f"{len(self.findings)} calls on {self.subject} {_GROUP_WHAT[self.kind]}: {fmt_ms(self.wasted_ms)}"

    @property
    def remedy(self) -> str | None:
        first = self.findings[0]
        return remedy(self.kind, first.evidence, self.wasted_ms)


def _subject(finding) -> str:
    """What a finding's calls share: the device that served them (hardware kinds and LLM
    slow_steps); "" (never grouped) for a step with none."""
    ev = finding.evidence if isinstance(finding.evidence, Mapping) else {}
    return ev.get("device") or ""


def grouped(findings: list, *, key: Callable = _subject) -> list:
    """The findings in their order, with every run of MIN_GROUP or more counted findings of one
    grouped kind and subject (device) replaced, at the first one's place, by a FindingGroup."""
    buckets: dict[tuple[str, str], list] = {}
    for f in findings:
        if f.kind in GROUPED_KINDS and getattr(f, "is_counted", True) and key(f):
            buckets.setdefault((f.kind, key(f)), []).append(f)
    groups = {k: FindingGroup(k[0], k[1], v) for k, v in buckets.items() if len(v) >= MIN_GROUP}
    out, placed = [], set()
    for f in findings:
        k = (f.kind, key(f)) if f.kind in GROUPED_KINDS and getattr(f, "is_counted", True) else None
        if k in groups:
            if k not in placed:
                out.append(groups[k])
                placed.add(k)
            continue
        out.append(f)
    return out
