"""The closed list of what a finding of `parallelizable_calls` or `repeated_tool_call` rests on:
the value of its `evidence["basis"]` (and of each link's in `evidence["links"]`), what it means
and the highest confidence it supports. docs/analysis.md, "Evidence bases", gives the same table
(tests/analysis/test_docs_bases.py keeps the two equal).

A finding is asserted (medium or high) only on a positive basis; an absence ("no value was seen
flowing", "no answer was recorded") supports `low` at most: the finding is possible, shown and
counted nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.engine.detectors.base import CONFIDENCE_HIGH, CONFIDENCE_LOW, CONFIDENCE_MEDIUM

INDEPENDENT, DEPENDENT, UNKNOWN = "independent", "dependent", "unknown"


@dataclass(frozen=True)
class Basis:
    code: str
    kind: str  # the finding kind it is read by
    verdict: str  # for a pair of calls: independent, dependent or unknown; "" for a repeat
    confidence: str  # the highest confidence it supports
    meaning: str


_P, _R = "parallelizable_calls", "repeated_tool_call"
BASES: dict[str, Basis] = {b.code: b for b in (
    # Which calls of a turn depended on which (dependencies.py): a finding rests on the weakest
    # basis of independence among its pairs.
    Basis("declared", _P, "", CONFIDENCE_HIGH,
          "the sender states dependencies (depends_on): a pair it does not list is independent"),
    Basis("data_flow", _P, DEPENDENT, CONFIDENCE_HIGH,
          "the later call's arguments carry a value that first appeared in the earlier call's result"),
    Basis("follow_up", _P, DEPENDENT, CONFIDENCE_MEDIUM,
          "no model response requested the later call, and its arguments carry a value of the earlier call: "
          "the agent's code started it on purpose"),
    Basis("learned_flow", _P, DEPENDENT, CONFIDENCE_MEDIUM,
          "in most of the agent's runs a value of the earlier call's result reached the later call"),
    Basis("concurrent_in_run", _P, INDEPENDENT, CONFIDENCE_HIGH,
          "the later call started before the earlier one ended in this run, so it could not use its result"),
    Basis("fan_out", _P, INDEPENDENT, CONFIDENCE_HIGH,
          "one model response requested several calls of the same tool, which does not act, with different "
          "arguments and no value in common (a forecast for three cities)"),
    Basis("requested_together", _P, INDEPENDENT, CONFIDENCE_HIGH,
          "one model response requested both calls, and neither tool acts: the model wrote both before either "
          "ran, so neither consumed the other's output, and reading changes nothing the other reads"),
    Basis("observed_concurrency", _P, INDEPENDENT, CONFIDENCE_MEDIUM,
          "the agent (this release or another) ran the same pair concurrently in other runs, both succeeding, "
          "and no value flowed between them"),
    Basis("both_orders", _P, INDEPENDENT, CONFIDENCE_MEDIUM,
          "the agent ran the pair one after the other in both orders in other runs, both succeeding, and no "
          "value flowed between them in either order"),
    Basis("requested_together_acting", _P, UNKNOWN, CONFIDENCE_LOW,
          "one model response requested both, but a tool acts (writes, clicks, submits, navigates...): the model "
          "may have meant them to run in order (fill a form, then click)"),
    Basis("shared_value", _P, UNKNOWN, CONFIDENCE_LOW,
          "the calls share a value (an id, a path) and nothing shows whether one waited for the other"),
    Basis("common_value", _P, UNKNOWN, CONFIDENCE_LOW,
          "the earlier result and the later arguments share only values common to the agent's runs: flow and "
          "coincidence look alike"),
    Basis("no_flow_seen", _P, UNKNOWN, CONFIDENCE_LOW,
          "results were recorded and none of them visibly reaches the other's arguments: a value may have "
          "flowed in a form that does not show (upper-cased, an ordinal picked from a list, a common id)"),
    Basis("learned_no_flow", _P, UNKNOWN, CONFIDENCE_LOW,
          "over the agent's runs no value of the earlier result was seen in the later arguments: still an absence"),
    Basis("learned_unknown", _P, UNKNOWN, CONFIDENCE_LOW,
          "the agent's runs do not show whether one call needed the other"),
    Basis("nothing_recorded", _P, UNKNOWN, CONFIDENCE_LOW,
          "no call ids, results, declared dependencies or history to say anything either way"),
    # When a call again with the same arguments is a repeat (repeated_tool_call.py).
    Basis("same_answer", _R, "", CONFIDENCE_HIGH,
          "the answers were recorded and say the same, and no call of a tool that acts ran in between"),
    Basis("same_answer_fresh_ids", _R, "", CONFIDENCE_MEDIUM,
          "the answers were recorded and differ only in identifiers (a request id, a generated key), and no "
          "call of a tool that acts ran in between"),
    Basis("no_arguments", _R, "", CONFIDENCE_MEDIUM,
          "the same answer to a call that takes no arguments (a clock or a status check may be asked again)"),
    Basis("nothing_between", _R, "", CONFIDENCE_MEDIUM,
          "the repeat's answer was not recorded, but the task records answers (an earlier one of this call), and "
          "no call of a tool that acts ran in between: nothing could have changed the answer"),
    Basis("acts", _R, "", CONFIDENCE_LOW,
          "the tool acts (writes, clicks, submits...): doing it again is another action, not a question a cache "
          "could answer"),
    Basis("action_between", _R, "", CONFIDENCE_LOW,
          "a call of a tool that acts ran in between (a form filled again before the same click, a patch before "
          "the same tests), so the answer may have changed"),
    Basis("answer_changed", _R, "", CONFIDENCE_LOW,
          "some calls with these arguments got a new answer (a poll, a re-check): those that did not may still "
          "have needed asking"),
    Basis("same_validator", _R, "", CONFIDENCE_LOW,
          "the answers differ, and only an unchanged validator (etag, version, hash) says they describe the same"),
    Basis("no_answers", _R, "", CONFIDENCE_LOW,
          "no call of the group recorded an answer: nothing shows the answer was the same"),
)}

_RANK = {CONFIDENCE_LOW: 0, CONFIDENCE_MEDIUM: 1, CONFIDENCE_HIGH: 2}


def confidence(code: str) -> str:
    """The confidence a basis supports (KeyError for a value outside the closed list)."""
    return BASES[code].confidence


def weakest(codes) -> str:
    """The basis among `codes` that supports the lowest confidence (the first of equals)."""
    return min(codes, key=lambda c: _RANK[BASES[c].confidence])


def asserted(code: str) -> bool:
    return BASES[code].confidence != CONFIDENCE_LOW
