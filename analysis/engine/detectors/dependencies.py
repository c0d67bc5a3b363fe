"""Which tool calls of a turn depended on which, inferred from the evidence real traces carry.

Real agents never say which call consumed which output; what they do record, strongest first:
1. `depends_on`, when the sender states dependencies at all (then an unlisted pair is independent);
2. data flow: a call whose recorded arguments carry a distinctive value (an id, a path, a long
   token) that first appeared in an earlier call's result consumed that result — dependent, even
   when one model response requested both: a planner's executor fills `$1.query_id` from the
   first call's result before it starts the second, and the arguments recorded are the filled ones;
3. concurrency in this run: a call that started before the other ended could not use its result;
4. the ids of the calls one model response requested (`StepData.tool_call_ids` on the LLM step,
   `tool_call_id` on each tool step): calls requested together were written before any of them
   ran, so none consumed another's output — independent when neither tool acts (actions.py): a
   fan-out when they are calls of one tool sharing no value. A tool that acts (fill a form, then
   click) may have been requested in the order it must run: that pair is unknown;
5. a follow-up: where calls carry ids, a call no model response requested was started by the
   agent's own code; if its arguments carry a distinctive value of an earlier call of the turn
   (lint the file just patched), it followed that call on purpose — dependent. Where nothing
   tells a follow-up from a requested call, such a shared value leaves the pair unknown;
6. the pair's history in the agent's runs (this release's, for concurrency any release's);
7. otherwise unknown, and a finding resting on it is only *possible*: "no value was seen to flow"
   is an absence, not evidence (an id upper-cased, an ordinal picked from a ranked list, an id
   common to many runs all flow unseen).
What counts as a value worth following is learned from the agent's other runs when there are
enough of them (analysis/engine/learned.py): a token common across its runs (`EU`, `true`, the
tenant's name, today's date) is never evidence, any other is, however short (`c4821`, `A7`,
`93`). Those runs also give each pair of calls a history (the `Profile`'s pairs): a pair the agent
ran concurrently elsewhere, or one after the other in both orders, with no value linking them, is
independent; one whose flow shows in most runs is dependent; any other is unknown. Without such runs (cold start), a value counts by its
shape: letters and digits mixed, long, or a number of at least MIN_NUMBER. See
docs/analysis.md, "Dependencies" and "Evidence bases".
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field

from analysis.engine.detectors.actions import acts
from analysis.engine.detectors.base import StepData
from analysis.engine.detectors.bases import BASES

# The bases a link rests on: codes of the closed list (bases.py, docs/analysis.md "Evidence bases").
INDEPENDENT_IDS = "requested_together"
FAN_OUT = "fan_out"
INDEPENDENT_CONCURRENT = "concurrent_in_run"
DEPENDENT_DATA = "data_flow"
DECLARED = "declared"
DEPENDENT_FOLLOW_UP = "follow_up"
INDEPENDENT_NO_FLOW = "no_flow_seen"
TOGETHER_ACTING = "requested_together_acting"
UNKNOWN_SHARED = "shared_value"
UNKNOWN = "nothing_recorded"
UNKNOWN_COMMON = "common_value"

LEARNED_FLOW = "learned_flow"
LEARNED_TOGETHER = "observed_concurrency"
BOTH_ORDERS = "both_orders"
LEARNED_NO_FLOW = "learned_no_flow"
LEARNED_UNKNOWN = "learned_unknown"

# Confidence each basis supports (docs/analysis.md, "Evidence bases").
STRENGTH = {code: BASES[code].confidence for code in (
    INDEPENDENT_IDS, FAN_OUT, INDEPENDENT_CONCURRENT, DEPENDENT_DATA, DECLARED, DEPENDENT_FOLLOW_UP, INDEPENDENT_NO_FLOW,
    TOGETHER_ACTING, UNKNOWN_SHARED, UNKNOWN, UNKNOWN_COMMON, LEARNED_FLOW, LEARNED_TOGETHER, BOTH_ORDERS,
    LEARNED_NO_FLOW, LEARNED_UNKNOWN)}

# A call that started while another still ran, by more than this share of the shorter one, could
# not use its result (less is clock and dispatch skew between calls run one after another).
CONCURRENT_OVERLAP = 0.1

# A pair's history says something once both calls ran in MIN_PAIR_RUNS of the agent's runs:
# dependent when the flow, or a shared common value, shows in more than MOST of them; independent when neither flow nor a
# shared common value (which can hide flow: `page-1` passed on in every run) shows in more than
# NO_FLOW_SHARE of them and the earlier call's results took MIN_VARIED distinct values (a
# constant result cannot show flow).
MIN_PAIR_RUNS = 8
MOST = 0.5
NO_FLOW_SHARE = 0.1
MIN_VARIED = 3
DEPENDENT, INDEPENDENT, UNKNOWN_VERDICT = "dependent", "independent", "unknown"

# A token worth treating as data flow (compared without case): letters and digits mixed
# (c4821, h384, ord_8f3k2q), at least 8 characters with a separator (src/app.py, a-b-c-d), a
# whole number of at least MIN_NUMBER, or 16 characters of anything. Plainer tokens ("Paris",
# "true", "en", "42") recur between unrelated calls by coincidence.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./:@]*[A-Za-z0-9]")
_SEPARATORS = frozenset("_-./:@")
_DIGITS = frozenset("0123456789")  # a token is ASCII (_TOKEN), so these are all its digits
_PARTS = re.compile(r"[:@/]")
MIN_NUMBER = 1_000
_ID_SHAPE = re.compile(r"(?=.*[a-z])(?=.*[0-9])[a-z0-9]{3,}")
CALL_KINDS = ("tool", "retrieval")


def _distinctive(token: str) -> bool:
    if len(token) >= 16:
        return True
    if token.replace(".", "").isdigit():
        # A number (or a version, 10.2.3), in text as in JSON: distinctive only as a whole
        # number of at least MIN_NUMBER.
        return int(token.split(".", 1)[0] or 0) >= MIN_NUMBER
    if not _DIGITS.isdisjoint(token) and (len(token) >= 6 or _ID_SHAPE.fullmatch(token)):
        # Short identifiers mix letters and digits (customer c4821, account H384, ticket
        # AB12): words and small numbers, which recur by coincidence, do not.
        return True
    return len(token) >= 8 and not _SEPARATORS.isdisjoint(token)


def _strings(value: object, out: list[str], depth: int = 0) -> None:
    if depth > 32:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        if isinstance(value, int) or value.is_integer():
            out.append(str(int(value)))
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _strings(v, out, depth + 1)


def all_tokens(value: object) -> set[str]:
    """Every token of a value (arguments object or result text), lower-cased: case does not
    separate values (an id the agent upper-cases before passing it on is the same id), and
    "ord_8f3k2q:12" or "user@host" carry their parts too."""
    texts: list[str] = []
    _strings(value, texts)
    tokens = set()
    for text in texts:
        for token in _TOKEN.findall(text.lower()):
            tokens.add(token)
            if "/" in token or ":" in token or "@" in token:
                tokens.update(part for part in _PARTS.split(token) if len(part) >= 2)
    return tokens


def distinctive_values(value: object) -> set[str]:
    """The tokens of a value that count by their shape alone (the cold-start rule)."""
    return {t for t in all_tokens(value) if _distinctive(t)}


@dataclass
class PairStats:
    """The evidence one pair of calls gathered over an agent's runs (learned.pair_stats)."""

    runs: int = 0
    flow_runs: int = 0
    blind_runs: int = 0  # serial runs where only common values linked the result to the arguments
    concurrent_runs: int = 0
    together_runs: int = 0
    variants: set = field(default_factory=set)
    saved_ms: float = 0.0  # summed over serial runs: the shorter call's duration

    @property
    def result_variants(self) -> int:
        return len(self.variants)


@dataclass(frozen=True)
class Profile:
    """What an agent's recent runs say: which tokens are common across them (no evidence), and
    each pair of calls' history (objects with the PairStats counts, keyed by call names)."""

    runs: int
    common: frozenset[str]
    pairs: dict = field(default_factory=dict)
    # The same agent's other releases: call names → their pairs' counts (a release that gathers
    # the calls a for-loop release runs one by one shows the pair independent).
    elsewhere: dict = field(default_factory=dict)

    def history(self, names: tuple[str, str]) -> tuple[str, str]:
        """(verdict, basis) of a pair from the agent's runs, ("", "") when they say nothing yet."""
        own, reverse = self.pairs.get(names), self.pairs.get(names[::-1])
        verdict, basis = pair_verdict(own, reverse) if own is not None else ("", "")
        if verdict in ("", UNKNOWN_VERDICT) and (own is None or quiet(own)):
            # Run concurrently, the two may have started in either order (and so be named the
            # other way round), in this release or another.
            seen = [reverse, *self.elsewhere.get(names, ()), *self.elsewhere.get(names[::-1], ())]
            if any(p is not None and p.concurrent_runs and quiet(p) for p in seen):
                return INDEPENDENT, LEARNED_TOGETHER
        return verdict, basis

    def rare(self, token: str) -> bool:
        return token not in self.common


def quiet(p) -> bool:
    """No value (nor a common one, which can hide flow) linked the pair in more than NO_FLOW_SHARE
    of its runs."""
    return p.flow_runs + p.blind_runs <= NO_FLOW_SHARE * p.runs


def pair_verdict(p, reverse=None) -> tuple[str, str]:
    """(verdict, basis) of a pair from its counts (and those of the same two calls in the other
    order, `reverse`); ("", "") while its history is too short to say anything (the one trace's
    evidence decides then). Independence needs something seen, never only flow not seen: the
    pair ran concurrently (both succeeding: learned.pair_stats counts only such runs), or one
    after the other in both orders, each time with no value linking them. Where flow shows in some
    runs and concurrency in others, one name plays two parts, and nothing is known."""
    if quiet(p):
        if p.concurrent_runs:
            return INDEPENDENT, LEARNED_TOGETHER
        if (reverse is not None and quiet(reverse) and p.runs > p.concurrent_runs
                and reverse.runs > reverse.concurrent_runs):
            return INDEPENDENT, BOTH_ORDERS
    if p.runs < MIN_PAIR_RUNS:
        return "", ""
    if p.flow_runs + p.blind_runs > MOST * p.runs:
        # A value of the result passed on in most runs, even one common to them all (`page-1`
        # every time), is the agent's pattern, not a coincidence.
        return DEPENDENT, LEARNED_FLOW
    if quiet(p) and p.result_variants >= MIN_VARIED:
        return UNKNOWN_VERDICT, LEARNED_NO_FLOW
    return UNKNOWN_VERDICT, LEARNED_UNKNOWN


def call_names(group: list) -> dict[str, str]:
    """step_id → the call's name in its turn: its tool and its position among that tool's
    calls (`search#0`, `search#1`), the key a pair's history is kept under."""
    seen: Counter = Counter()
    out = {}
    for s in group:
        out[s.step_id] = f"{s.label}#{seen[s.label]}"
        seen[s.label] += 1
    return out


def concurrent(a: StepData, b: StepData) -> bool:
    """The two calls overlapped in time beyond skew: neither waited for the other's result."""
    overlap = min(a.end_ms, b.end_ms) - max(a.start_ms, b.start_ms)
    return overlap > CONCURRENT_OVERLAP * min(a.duration_ms, b.duration_ms)


@dataclass(frozen=True, slots=True)
class Link:
    """What is known of one (earlier, later) pair of calls."""

    earlier: str
    later: str
    dependent: bool | None  # None: unknown
    basis: str

    @property
    def strength(self) -> str:
        return STRENGTH[self.basis]


# How many earlier calls a result is checked against when asking "was this value new?": a
# bound that keeps a 50,000-step task linear; values older than that are treated as new.
LOOKBACK_CALLS = 200
# Agents request a handful of calls per turn; a turn of hundreds (a batch job) is linked
# pairwise only within this window, which keeps it linear.
LINK_WINDOW = 32


class Evidence:
    """The dependency evidence of one task, computed on demand and memoised."""

    def __init__(self, steps: list[StepData], profile: Profile | None = None) -> None:
        self.profile = profile
        # Rarity across the agent's runs when they are known, else the value's shape.
        self._counts = profile.rare if profile is not None and profile.runs else _distinctive
        self.requested_by: dict[str, StepData] = {}
        for s in steps:
            if s.kind == "llm":
                for call_id in s.tool_call_ids:
                    self.requested_by.setdefault(call_id, s)
        # A sender that states dependencies anywhere in the task states them everywhere.
        self.declares = any(s.depends_on for s in steps)
        self.calls = sorted((s for s in steps if s.kind in CALL_KINDS), key=lambda s: (s.start_ms, s.step_id))
        # Follow-ups can be told from requested calls only where both sides record call ids.
        self.ids_both_sides = bool(self.requested_by) and any(c.tool_call_id for c in self.calls)
        self._index = {s.step_id: i for i, s in enumerate(self.calls)}
        self._implied = self._requested_without_ids(steps)
        self._args: dict[str, set[str]] = {}
        self._results: dict[str, set[str]] = {}
        self._outputs: dict[str, set[str]] = {}

    def issuer(self, call: StepData) -> StepData | None:
        """The LLM step whose response requested this call, if call ids say so."""
        if call.tool_call_id:
            return self.requested_by.get(call.tool_call_id)
        return self._implied.get(call.step_id)

    def _requested_without_ids(self, steps: list[StepData]) -> dict[str, StepData]:
        """step_id → the LLM step that requested it, where the tool spans carry no call id (Agno,
        smolagents, the Agents SDK under OpenInference record the ids on the model call only): a
        response that requested n calls (n ≥ 2) followed by exactly n calls before the next model
        call ended requested those. A count that differs (agent code added a call) says nothing."""
        if not self.requested_by or any(c.tool_call_id for c in self.calls):
            return {}
        llms = sorted((s for s in steps if s.kind == "llm"), key=lambda s: s.end_ms)
        ends = [s.end_ms for s in llms]
        turns: dict[int, list[StepData]] = {}
        for call in self.calls:
            i = bisect.bisect_right(ends, call.start_ms + 1e-6)
            if i:
                turns.setdefault(i - 1, []).append(call)
        implied = {}
        for i, calls in turns.items():
            if len(calls) >= 2 and len(set(llms[i].tool_call_ids)) == len(calls):
                implied.update((c.step_id, llms[i]) for c in calls)
        return implied

    def args(self, call: StepData) -> set[str]:
        if call.step_id not in self._args:
            self._args[call.step_id] = {t for t in all_tokens(call.tool_args) if self._counts(t)}
        return self._args[call.step_id]

    def result(self, call: StepData) -> set[str]:
        if call.step_id not in self._results:
            self._results[call.step_id] = (
                {t for t in all_tokens(call.tool_result) if self._counts(t)} if call.tool_result else set())
        return self._results[call.step_id]

    def blind(self, earlier: StepData, later: StepData) -> bool:
        """The earlier result and the later arguments share a value, but only one common across
        the agent's runs: flow and coincidence look alike, so "no flow" cannot be read here."""
        if self.profile is None or not self.profile.runs or not earlier.tool_result:
            return False
        shared = (all_tokens(earlier.tool_result) - all_tokens(earlier.tool_args)) & all_tokens(later.tool_args)
        return bool(shared)

    def output(self, call: StepData) -> set[str]:
        """The distinctive values this call's result brought into the task: not in its own
        arguments, nor shown by any call before it ended (a value passed on is not produced)."""
        if call.step_id in self._outputs:
            return self._outputs[call.step_id]
        new = self.result(call) - self.args(call)
        i = self._index.get(call.step_id, 0)
        for other in self.calls[max(0, i - LOOKBACK_CALLS):]:
            if not new or other.start_ms >= call.end_ms:
                break
            if other.step_id == call.step_id:
                continue
            new = new - self.args(other)
            if other.end_ms < call.end_ms:
                new = new - self.result(other)
        self._outputs[call.step_id] = new
        return new

    def flowed(self, earlier: StepData, later: StepData) -> bool:
        """A value the earlier call's result brought into the task (`output`) is in the later
        call's recorded arguments: the later call used that result."""
        return bool(earlier.tool_result) and bool(self.output(earlier) & self.args(later))

    def follow_up(self, call: StepData) -> bool:
        """Started by the agent's code, not requested by a model response."""
        return self.ids_both_sides and call.tool_call_id not in self.requested_by

    def link(self, earlier: StepData, later: StepData, names: tuple[str, str] | None = None) -> Link:
        """What is known of the pair; `names` (the calls' names in their turn) looks up the
        pair's history in the agent's other runs."""
        a, b = earlier.step_id, later.step_id
        if self.declares:
            return Link(a, b, a in later.depends_on, DECLARED)
        after = later.start_ms >= earlier.end_ms - 1e-6
        if after and self.flowed(earlier, later):
            # Even between calls one response requested: the recorded arguments are what the
            # call ran with, and a planner's executor fills `$1.query_id` from the first call's
            # result before it starts the second.
            return Link(a, b, True, DEPENDENT_DATA)
        if concurrent(earlier, later):
            return Link(a, b, False, INDEPENDENT_CONCURRENT)
        first = self.issuer(earlier)
        together = first is not None and first is self.issuer(later)
        if together and not (acts(earlier.label) or acts(later.label)):
            # Written before either ran, and reading changes nothing the other reads.
            if earlier.label == later.label and not (self.args(earlier) & self.args(later)):
                return Link(a, b, False, FAN_OUT)
            return Link(a, b, False, INDEPENDENT_IDS)
        verdict, basis = (self.profile.history(names) if self.profile is not None and names else ("", ""))
        # What this run shows of the two (a value they share) outweighs what other runs of
        # calls with the same names showed: one name can play two parts (patch a file, then lint
        # it; or lint another one beside the patch).
        if (self.args(earlier) | self.result(earlier)) & self.args(later):
            if after and self.follow_up(later):
                return Link(a, b, True, DEPENDENT_FOLLOW_UP)
            if verdict == DEPENDENT:
                return Link(a, b, True, basis)
            return Link(a, b, None, UNKNOWN_SHARED)
        if verdict == DEPENDENT:
            return Link(a, b, True, basis)
        if after and self.blind(earlier, later):
            return Link(a, b, None, UNKNOWN_COMMON)
        if verdict == INDEPENDENT:
            return Link(a, b, False, basis)
        # Nothing positive: requested together with a tool that acts, flow not seen, or nothing.
        if together:
            return Link(a, b, None, TOGETHER_ACTING)
        if verdict:
            return Link(a, b, None, basis)
        if earlier.tool_result:
            return Link(a, b, None, INDEPENDENT_NO_FLOW)
        return Link(a, b, None, UNKNOWN)

    def links(self, group: list[StepData]) -> list[Link]:
        """The (earlier, later) pairs of a group of calls in start order: every pair, except
        that a call of a very long turn is linked only to the LINK_WINDOW calls before it."""
        names = call_names(group)
        return [self.link(earlier, later, (names[earlier.step_id], names[later.step_id]))
                for j, later in enumerate(group) for earlier in group[max(0, j - LINK_WINDOW):j]]
