"""Evidence mode: dependencies shown the way real agents show them — through results and
call ids, never `depends_on`. See docs/simulator.md (*Dependencies*).

`wire` takes a planned task (turns of calls, problems already injected) and makes its data
tell the truth about dependence without saying it:
- every call gets a result drawn for its tool (catalog `result`);
- a call may quote a value from the result of a call in an earlier turn (the model read it
  and used it): its argument carries that value, and that call is one of its `sources`;
- agent code may run a follow-up right after a call, in the same turn with no model call
  between, on a value of that call's result (search → read the top hit): the follow-up's
  `after` is that call. This is the hard case for a detector: it runs one after another like
  a serialised turn, but it depends on what it follows;
- calls of one turn that do not depend on each other never share a distinctive value, in
  their arguments or between one's arguments and another's result, and no call's arguments
  carry a distinctive value of an earlier result it does not depend on; every new id in a
  result is unique in the task. Trivial values (true, 1, "en", "EUR") are shared freely, as
  in real APIs: they prove nothing.

Pure and seeded like the rest of the generator: the caller passes the generator to draw from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from analysis.simulator.calls import Call, Turn, canonical, equivalent_variant
from analysis.simulator.catalog import Agent, Tool

# Share of calls that quote an earlier result when their tool can and one is there to quote,
# and of calls whose result agent code follows up in the same turn. Chain agents (coding,
# research) work that way by design; conversational agents mostly take ids from the user.
QUOTE_SHARE = {"parallel": 0.5, "chain": 0.8}
CODE_CHAIN_SHARE = {"parallel": 0.3, "chain": 0.5}
FAN_OUT_SHARE = 0.3  # agent code follows up two values of the result at once (open two hits)
ATTEMPTS = 20


def distinctive(text: str) -> bool:
    """A value that links two calls if both carry it: an id, a path, a URL, a date, a phrase.
    Conservative on purpose (any 8 characters, or 6 with a digit): the generator avoids
    accidental sharing by this rule, so a detector with a stricter rule sees no accident."""
    text = text.strip()
    return len(text) >= 8 or (len(text) >= 6 and any(c.isdigit() for c in text))


def distinctive_values(value: object) -> set[str]:
    """The distinctive strings anywhere in a JSON value."""
    if isinstance(value, str):
        return {value.strip()} if distinctive(value) else set()
    if isinstance(value, dict):
        return set().union(*(distinctive_values(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(distinctive_values(v) for v in value))
    return set()


def argument_values(args: object) -> set[str]:
    """The distinctive values of a call's arguments (which frameworks may send as a JSON string)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return distinctive_values(args)


def result_text(result: object) -> str:
    """A result as a tool step carries it: compact JSON text, as frameworks pass it to the model."""
    return result if isinstance(result, str) else json.dumps(result, separators=(",", ":"))


def wire(rng: np.random.Generator, agent: Agent, turns: list[Turn], *, result_tokens) -> None:
    """Give the plan's calls results and real, visible dependencies (in place). `result_tokens()`
    draws the context a follow-up's output adds, as the plan drew it for the other calls."""
    _Wiring(rng, agent, result_tokens).run(turns)


class _Wiring:
    def __init__(self, rng: np.random.Generator, agent: Agent, result_tokens):
        self.rng, self.agent, self.result_tokens = rng, agent, result_tokens
        self.tools = {t.name: t for t in agent.tools}
        self.read: list[Call] = []  # calls whose results the model has read (earlier turns, ok)
        self.result_values: dict[int, set[str]] = {}  # id(call) → distinctive values of its result
        self.shown: dict[int, tuple[set[str], str]] = {}  # id(call) → (its argument values, its text)
        self.used: set[str] = set()  # every distinctive value the task has carried so far
        self.keys: set[str] = set()  # tool + canonical arguments: normal traffic never repeats

    def run(self, turns: list[Turn]) -> None:
        for turn in turns:
            if not turn.calls:
                continue
            placed: list[Call] = []
            # A repeat returns what its original returned: settle it first, so that the turn's
            # other calls keep clear of the values it carries.
            for call in sorted(turn.calls, key=lambda c: c.repeat_of is None):
                if call.repeat_of is not None:
                    self.repeat(call)
                else:
                    self.settle(call, placed)
                placed.append(call)
            if not turn.serial and all(c.status != "timeout" for c in turn.calls):
                self.chain_by_code(turn, placed)
            self.read.extend(c for c in turn.calls if c.status == "ok")

    # --- calls the model requested ---------------------------------------------------------

    def repeat(self, call: Call) -> None:
        """The same call again, arguments written differently; it returns what its original
        returned, and quotes what its original quoted and any result that has echoed those values since
        (the original's own, a patch that echoed the path read again)."""
        original = call.repeat_of
        call.args, call.result = equivalent_variant(original.args, self.rng), original.result
        own = argument_values(call.args)
        call.sources = [c for c in self.read if own & self.values_of(c)]

    def settle(self, call: Call, placed: list[Call]) -> None:
        """Arguments (quoting an earlier result, or as planned) and a result that fit the turn."""
        tool, pattern = call.tool, self.agent.pattern
        quotable = [c for c in self.read if c.tool.name in tool.feeds and self.offers(c, tool)]
        quote = bool(quotable) and self.rng.random() < QUOTE_SHARE[pattern]
        for args, sources in self.candidates(call, quotable if quote else []):
            draft = self.draft(tool, args, sources)
            if self.fits(draft, placed):
                self.keep(call, draft)
                return
        raise RuntimeError(f"could not draw arguments for {tool.name} that share nothing by accident")

    def candidates(self, call: Call, quotable: list[Call]):
        """Arguments to try, best first: quoting one of the results the model read, then as
        planned, then drawn again."""
        for i in self.rng.permutation(len(quotable))[:ATTEMPTS // 2]:
            source = quotable[int(i)]
            yield self.quoting(call.args, call.tool, source, self.pick(source, call.tool)), [source]
        yield call.args, []
        for _ in range(ATTEMPTS):
            yield call.tool.args(self.rng), []

    # --- follow-ups agent code runs --------------------------------------------------------

    def chain_by_code(self, turn: Turn, placed: list[Call]) -> None:
        for call in [c for c in turn.calls if c.status == "ok" and c.repeat_of is None]:
            for source_name, follower_name in self.agent.code_chains:
                if call.tool.name != source_name or self.rng.random() >= CODE_CHAIN_SHARE[self.agent.pattern]:
                    continue
                tool = self.tools[follower_name]
                fan_out = 2 if self.rng.random() < FAN_OUT_SHARE else 1
                position = turn.calls.index(call) + 1
                for _ in range(fan_out):
                    follower = self.follow(call, tool, placed)
                    if follower is None:
                        break
                    turn.calls.insert(position, follower)
                    placed.append(follower)
                    position += 1

    def follow(self, source: Call, tool: Tool, placed: list[Call]) -> Call | None:
        if not self.offers(source, tool):
            return None
        for _ in range(ATTEMPTS):
            draft = self.draft(tool, self.quoting(tool.args(self.rng), tool, source, self.pick(source, tool)), [source])
            if self.fits(draft, placed):
                follower = Call(tool, draft.args, self.result_tokens(), after=source)
                self.keep(follower, draft)
                return follower
        return None  # every value of the result is taken: agent code has nothing left to open

    # --- values ----------------------------------------------------------------------------

    def offers(self, source: Call, tool: Tool) -> dict[str, list[str]]:
        """What `tool` could take from `source`'s result: {argument: values}."""
        feed = tool.feeds.get(source.tool.name, {})
        return {arg: source.offers[f] for arg, f in feed.items() if source.offers.get(f)}

    def pick(self, source: Call, tool: Tool) -> dict[str, str]:
        return {arg: values[int(self.rng.integers(0, len(values)))]
                for arg, values in self.offers(source, tool).items()}

    @staticmethod
    def quoting(args: dict, tool: Tool, source: Call, values: dict[str, str]) -> dict:
        quoted = dict(args)
        for arg, value in values.items():
            quoted[arg] = [value] if isinstance(args.get(arg), list) else value
        return quoted

    def draft(self, tool: Tool, args: dict, sources: list[Call]) -> _Draft:
        result, offers = tool.result(self.rng, args)
        return _Draft(tool, args, result, offers, sources, tool.name + canonical(args), argument_values(args),
                      distinctive_values(result), result_text(args) + result_text(result))

    def fits(self, d: _Draft, placed: list[Call]) -> bool:
        if d.key in self.keys:
            return False
        quoted = set().union(*(self.values_of(s) for s in _lineage(d.sources)))
        new_ids = {v for values in d.offers.values() for v in values} - d.own
        # Arguments carry only what the call's sources gave them or values never seen before,
        # and the ids a result offers are new: a quoted value names exactly one source.
        # (Phrases results repeat — statuses, titles — are fine: no argument quotes them.)
        if (d.own - quoted) & self.used or new_ids & self.used:
            return False
        for other in placed:
            if other in d.sources:
                continue
            other_own, other_text = self.shows(other)
            if d.own & other_own or any(v in other_text for v in d.own) or any(v in d.text for v in other_own):
                return False
        return True

    def keep(self, call: Call, d: _Draft) -> None:
        """Settle the call. Its sources are every result its arguments quote: the one it took
        the value from and any earlier one that carries it too (a price check that echoed the
        SKU a later reservation uses) — the model read them all, and the data links them all."""
        also = [c for c in self.read if c not in d.sources and d.own & self.values_of(c)]
        call.args, call.result, call.offers, call.sources = d.args, d.result, d.offers, d.sources + also
        self.keys.add(d.key)
        self.result_values[id(call)] = d.result_values
        self.shown[id(call)] = (d.own, d.text)
        self.used |= d.own | d.result_values

    def shows(self, call: Call) -> tuple[set[str], str]:
        """A settled call's argument values and its arguments and result as text."""
        if id(call) not in self.shown:  # a repeat: settled without a draft
            self.shown[id(call)] = (argument_values(call.args), result_text(call.args) + result_text(call.result))
        return self.shown[id(call)]

    def values_of(self, call: Call) -> set[str]:
        if id(call) not in self.result_values:  # a repeat: it returned what its original did
            self.result_values[id(call)] = distinctive_values(call.result)
        return self.result_values[id(call)]


@dataclass
class _Draft:
    """Arguments and a result tried for a call, with what the checks read from them."""

    tool: Tool
    args: dict
    result: object
    offers: dict[str, list[str]]
    sources: list[Call]
    key: str  # tool + canonical arguments
    own: set[str]  # distinctive values of the arguments
    result_values: set[str]
    text: str  # arguments and result, as text


def _lineage(calls: Iterable[Call]) -> list[Call]:
    """The calls and, transitively, their sources: a value may travel through several results."""
    out, stack = [], list(calls)
    while stack:
        call = stack.pop()
        if call not in out:
            out.append(call)
            stack.extend(call.sources)
    return out
