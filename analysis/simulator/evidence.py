"""Evidence mode: dependencies shown the way real agents show them — through results and call
ids, never `depends_on`. See docs/simulator.md (*Dependencies*).

`wire` takes a planned task (turns of calls, problems already injected) and gives its calls
the data an agent's calls carry, recording as it goes which call was built from which result:
- every call gets a result drawn for its tool (catalog `result`);
- a call may take a value from the result of a call in an earlier turn (the model read it and
  used it): its argument carries that value, written as the tool takes it (as is, upper-cased,
  inside a URL or a SQL statement: catalog `forms`), and that call is its source;
- agent code may run a follow-up right after a call, in the same turn with no model call
  between, on a value of that call's result (search → read the top hit): the follow-up's
  `after` and its source are that call;
- an argument that names the user (`customer_id`) mostly carries the task's own user id, as
  the user gave it: calls that take it from the request share it without depending on each
  other;
- a repeat asks again what its original asked and gets what it got; a retry sends a failed
  call's arguments again.
Nothing avoids values that unrelated calls happen to share — short ids, small counts, common
words, the user's id: they are what real traffic holds, and a detector must cope with them.
A call's sources (the ground truth of its dependencies) are exactly the calls the generator
took a value from, never inferred from the values.

Pure and seeded like the rest of the generator: the caller passes the generator to draw from.
"""

from __future__ import annotations

import json

import numpy as np

from analysis.simulator.calls import Call, Turn, asked_again, request_key
from analysis.simulator.catalog import Agent, Tool

# Share of calls that quote an earlier result when their tool can and one is there to quote,
# and of calls whose result agent code follows up in the same turn. Chain agents (coding,
# research) work that way by design; conversational agents mostly take ids from the user.
QUOTE_SHARE = {"parallel": 0.5, "chain": 0.8}
CODE_CHAIN_SHARE = {"parallel": 0.3, "chain": 0.5}
FAN_OUT_SHARE = 0.3  # agent code follows up two values of the result at once (open two hits)
USER_ID_SHARE = 0.7  # a user-naming argument carries the task's user, as the request gave it
USER_ARGUMENTS = ("customer_id",)
ATTEMPTS = 20


def result_text(result: object) -> str:
    """A result as a tool step carries it: compact JSON text, as frameworks pass it to the model."""
    return result if isinstance(result, str) else json.dumps(result, separators=(",", ":"))


def written(value: str, form: str | None) -> str:
    """A value taken from a result, as the argument that takes it writes it."""
    if not form:
        return value
    if form == "upper":
        return value.upper()
    return form.format(value)


def wire(rng: np.random.Generator, agent: Agent, turns: list[Turn], *, result_tokens, user_id: str) -> None:
    """Give the plan's calls results and real, visible dependencies (in place). `result_tokens()`
    draws the context a follow-up's output adds, as the plan drew it for the other calls."""
    _Wiring(rng, agent, result_tokens, user_id).run(turns)


class _Wiring:
    def __init__(self, rng: np.random.Generator, agent: Agent, result_tokens, user_id: str):
        self.rng, self.agent, self.result_tokens, self.user_id = rng, agent, result_tokens, user_id
        self.tools = {t.name: t for t in agent.tools}
        self.read: list[Call] = []  # calls whose results the model has read (earlier turns, ok)
        self.keys: set[str] = set()  # what the task asked so far: normal traffic never asks twice

    def run(self, turns: list[Turn]) -> None:
        for turn in turns:
            if not turn.calls:
                continue
            for call in list(turn.calls):
                if call.repeat_of is not None:
                    self.repeat(call)
                elif call.retry_of is not None:
                    self.retry(call)
                else:
                    self.settle(call)
            if not turn.serial and all(c.status != "timeout" for c in turn.calls):
                self.chain_by_code(turn)
            self.read.extend(c for c in turn.calls if c.status == "ok")

    # --- calls the model requested ---------------------------------------------------------

    def repeat(self, call: Call) -> None:
        """The same request again, as the model wrote it again; it returns what its original
        returned and rests on what its original rested on."""
        original = call.repeat_of
        call.args, call.result, call.offers = asked_again(original.args, self.rng), original.result, original.offers
        call.sources = list(original.sources)

    def retry(self, call: Call) -> None:
        """The failed call sent again by agent code, its arguments unchanged."""
        failed = call.retry_of
        call.args, call.sources = failed.args, list(failed.sources)
        call.result, call.offers = call.tool.result(self.rng, call.args)

    def settle(self, call: Call) -> None:
        """Arguments (quoting an earlier result, or as planned) and a result."""
        tool = call.tool
        quotable = [c for c in self.read if c.tool.name in tool.feeds and self.offers(c, tool)]
        sources: list[Call] = []
        args = call.args
        if quotable and self.rng.random() < QUOTE_SHARE[self.agent.pattern]:
            source = quotable[int(self.rng.integers(0, len(quotable)))]
            args, sources = self.quoting(args, tool, source), [source]
        args = self.as_the_user_said(args, taken={a for c in sources for a in self.offers(c, tool)})
        for _ in range(ATTEMPTS):
            if request_key(tool, args) not in self.keys:
                break
            args, sources = self.as_the_user_said(tool.args(self.rng), taken=set()), []
        self.keep(call, args, sources)

    def as_the_user_said(self, args: dict, *, taken: set[str]) -> dict:
        """User-naming arguments not taken from a result carry, mostly, the task's user."""
        out = dict(args)
        for name in USER_ARGUMENTS:
            if name in out and name not in taken and self.rng.random() < USER_ID_SHARE:
                out[name] = self.user_id
        return out

    # --- follow-ups agent code runs --------------------------------------------------------

    def chain_by_code(self, turn: Turn) -> None:
        for call in [c for c in turn.calls if c.status == "ok" and c.repeat_of is None and c.retry_of is None]:
            for source_name, follower_name in self.agent.code_chains:
                if call.tool.name != source_name or self.rng.random() >= CODE_CHAIN_SHARE[self.agent.pattern]:
                    continue
                tool = self.tools[follower_name]
                fan_out = 2 if self.rng.random() < FAN_OUT_SHARE else 1
                position = turn.calls.index(call) + 1
                for _ in range(fan_out):
                    follower = self.follow(call, tool)
                    if follower is None:
                        break
                    turn.calls.insert(position, follower)
                    position += 1

    def follow(self, source: Call, tool: Tool) -> Call | None:
        if not self.offers(source, tool):
            return None
        for _ in range(ATTEMPTS):
            args = self.quoting(tool.args(self.rng), tool, source)
            if request_key(tool, args) not in self.keys:
                follower = Call(tool, args, self.result_tokens(), after=source)
                self.keep(follower, args, [source])
                return follower
        return None  # every value of the result was followed up already

    # --- values ----------------------------------------------------------------------------

    def offers(self, source: Call, tool: Tool) -> dict[str, list[str]]:
        """What `tool` could take from `source`'s result: {argument: values}."""
        feed = tool.feeds.get(source.tool.name, {})
        return {arg: source.offers[f] for arg, f in feed.items() if source.offers.get(f)}

    def quoting(self, args: dict, tool: Tool, source: Call) -> dict:
        quoted = dict(args)
        for arg, values in self.offers(source, tool).items():
            value = written(values[int(self.rng.integers(0, len(values)))], tool.forms.get(arg))
            quoted[arg] = [value] if isinstance(args.get(arg), list) else value
        return quoted

    def keep(self, call: Call, args: dict, sources: list[Call]) -> None:
        call.args, call.sources = args, sources
        call.result, call.offers = call.tool.result(self.rng, args)
        self.keys.add(request_key(call.tool, args))
