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
    retry_of: Call | None = None  # the failed call this one sends again, arguments unchanged
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
    # Injected with `serial`: each call starts when the one before has done this share of its
    # work (1: strictly one after another; below 1 they overlap partly).
    stagger: float = 1.0
    gap_before_ms: float = 0.0  # injected stall before this turn's LLM step


def request_key(tool: Tool, args: object) -> str:
    """What the agent asked for: the tool and the values of its arguments, however they were
    written (a JSON string is read as the object it holds). Two calls with the same key asked the
    same thing; whether a detector can see that is the detector's business."""
    if isinstance(args, str):
        args = json.loads(args)
    return tool.name + json.dumps(args, sort_keys=True)


def asked_again(args: dict, rng: np.random.Generator) -> object:
    """The same request written by the model a second time: usually byte for byte the same,
    sometimes with its keys in another order, sometimes handed on as the JSON text the model
    wrote (frameworks pass raw argument strings through)."""
    how = float(rng.random())
    if how < 0.5:
        return dict(args)
    if how < 0.75 and len(args) > 1:
        return dict(reversed(list(args.items())))
    return json.dumps(args)


def one_changed(tool: Tool, args: dict, rng: np.random.Generator) -> dict | None:
    """A near-repeat: the same tool with one argument changed (another date, the next page, a
    different count) — a new request, not a repeat. None when no argument can change."""
    keys = [k for k in args if isinstance(args[k], str | int | float | bool)]
    for _ in range(10):
        if not keys:
            return None
        key = keys[int(rng.integers(0, len(keys)))]
        value = args[key]
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, int):
            new = value + int(rng.integers(1, 4))
        elif isinstance(value, float):
            new = round(value * float(rng.uniform(1.05, 1.5)), 2)
        else:
            new = tool.args(rng).get(key, value)
        if new != value:
            return {**args, key: new}
    return None


def unique_args(rng: np.random.Generator, tool: Tool, seen: set[str]) -> dict:
    """Arguments no earlier call of this tool in the task asked for: normal traffic never asks
    the same thing twice unless the plan says so (a repeat, a retry after a failure)."""
    for attempt in range(20):
        args = tool.args(rng)
        if attempt >= 10:
            args["page"] = attempt
        key = request_key(tool, args)
        if key not in seen:
            seen.add(key)
            return args
    raise RuntimeError(f"could not draw fresh arguments for {tool.name}")
