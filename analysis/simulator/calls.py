"""A planned task's turns and tool calls, and how their arguments are drawn and compared.

Shared by the generator (which plans and lays out tasks) and the evidence wiring (which gives
calls results and makes dependent calls quote them); neither imports the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from analysis.simulator.catalog import Tool


@dataclass(eq=False)  # a call is itself: two calls with equal fields are still two calls
class Call:
    tool: Tool
    args: object
    result_tokens: int
    slow_factor: float = 1.0
    status: str = "ok"
    repeat_of: Call | None = None
    step_id: str = ""
    start_ms: float = 0.0
    end_ms: float = 0.0
    # Evidence mode only (see evidence.py): what the call returned, the values it offers
    # later calls, whose results its arguments quote (the ground truth of its dependencies),
    # the call agent code ran it after (same turn, no model call between), and its call id.
    result: object = None
    offers: dict[str, list[str]] = field(default_factory=dict)
    sources: list[Call] = field(default_factory=list)
    after: Call | None = None
    call_id: str = ""

    @property
    def requested(self) -> bool:
        """Asked for by the model's response (rather than chained by agent code)."""
        return self.after is None


@dataclass
class Turn:
    output_tokens: int
    calls: list[Call] = field(default_factory=list)
    serial: bool = False  # independent calls run one after another (injected)
    gap_before_ms: float = 0.0  # injected stall before this turn's LLM step


def canonical(args: object) -> str:
    """Arguments compared the way the product compares them: key order, JSON spacing and runs
    of whitespace in strings do not matter."""
    if isinstance(args, str):
        args = json.loads(args)
    if isinstance(args, dict):
        args = {k: " ".join(v.split()) if isinstance(v, str) else v for k, v in args.items()}
    return json.dumps(args, sort_keys=True)


def equivalent_variant(args: dict, rng: np.random.Generator) -> object:
    """The same arguments written differently: keys reordered, a JSON string with other
    spacing, or extra whitespace inside string values — what frameworks really send."""
    reordered = dict(reversed(list(args.items())))
    how = int(rng.integers(0, 3))
    if how == 0 and list(reordered) != list(args):
        return reordered
    if how == 2:
        spaced = {k: (f" {v.replace(' ', '  ')} " if isinstance(v, str) else v) for k, v in reordered.items()}
        if spaced != args:
            return spaced
    return json.dumps(reordered, indent=int(rng.integers(1, 4)))


def unique_args(rng: np.random.Generator, tool: Tool, seen: set[str]) -> dict:
    """Arguments no earlier call of this tool in the task used: normal traffic never repeats."""
    for attempt in range(20):
        args = tool.args(rng)
        if attempt >= 10:
            args["page"] = attempt
        key = tool.name + canonical(args)
        if key not in seen:
            seen.add(key)
            return args
    raise RuntimeError(f"could not draw fresh arguments for {tool.name}")
