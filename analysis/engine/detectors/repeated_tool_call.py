"""repeated_tool_call: the same tool (or retrieval) called again with equivalent arguments in one
task, when a cache could have answered it.

Arguments compare as canonical JSON (key order, formatting and whitespace runs do not matter). A
call repeated after the previous identical call *failed* is a retry, not waste, so the chain
starts at the first successful call. wasted = the repeats' time, one finding per (tool,
arguments).

Equal arguments are not enough: a poll (`get_query_status{"query_id": "qr_63fc"}`: running 0.33,
running 0.67, done), tests re-run after a patch, a file read again after it was written all send
the same arguments to a world that changed in between, and a cache would have answered them
wrongly. So a call is a repeat only if it got the answer the agent already had: when both its
result and the last successful earlier result of the same call are recorded and they *differ*, the
state changed, the call is not waste, and its answer is the one later calls are held to. When
either result is not recorded nothing shows a change: the call is a repeat, as it always was.

What "differ" means, from the two answers alone:
1. What is the call's own rather than the world's is set aside: the value of a field that names
   the request (`request_id`, `x-request-id`, `trace_id`, `span_id`, `correlation_id`, `took`;
   "request id: …" in text), and the response's own stamp: a `timestamp`, `ts`, `date`,
   `created`, `generated_at`, `fetched_at`, `served_at`, ... field (or "timestamp: …" in text)
   whose time falls inside the call itself (± `STAMP_SKEW_MS`). A stamp needs the name and the
   time: a time from before the call (a file's mtime, an event's time) is data, and so is a clock
   tool's answer (`datetime`, `time`, `now`). Equal then: the same answer (high).
2. Answers that differ only in identifiers (letters and digits mixed, `kb-679`, `req_8f3a`, a
   UUID, but never a number with its unit, `10am`, `3rd`, `20GB`; or an opaque token of 16 or more
   characters) while saying the same otherwise, something beyond those identifiers and the
   arguments they echo (a title, a status, a count), are the same answer with fresh ids, nonces
   or random picks (medium). A changed number, word, flag, date or validator (`etag`, `version`,
   `revision`, `sha`, `hash`, `last_modified`, `updated_at`, ...) is a change, and so is an answer
   that is nothing but identifiers (a "latest build" that is now another build). A result ingest
   cut short (it keeps the first few KiB) is judged by what was kept: the one head must start the
   other answer.
3. Anything else that differs, however small (a count, a status, a row, a progress figure), is a
   change: a wrong "cache this" costs a user more than a missed one. Except that, when both answers
   carry the same validators at their top level, a revalidating cache would have been told the
   first still held (RFC 9111, 4.3): a possible repeat (low).

Why judge by the answers' shape and field names rather than learn, from the agent's other runs or
the task's other calls, which tokens of a tool's answers vary on every call: in one task, the two
calls of a pair differ in every field that changed, so "varies on every call" there calls every
change noise (a status beside an unchanged total: the order re-checked after a refund would be a
repeat); across the agent's runs a nonce and data that depends on the arguments both vary from
call to call (every order has its own status), the same-argument calls there are the very repeats
and polls in question, and a cold start has no runs.

What a repeat rests on is one basis of a closed list (bases.py; `evidence["basis"]`), and only
something seen asserts it: the same answer recorded (high; differing only in identifiers, medium),
or the repeat's answer unrecorded while the task records answers and nothing that acts ran since
the call it repeats (medium). It is possible (low) when the tool itself acts (clicking "#submit"
again submits again: no cache answers an action), when a call of a tool that acts ran in between
(fill_form before the same click, apply_patch before the same run_tests: the answer may have
changed), or when no call of the group recorded an answer. Which tools act is read from their
names (actions.py).

A group whose answers changed during the task is being polled or re-checked after a change: its
calls that returned the same answer as the call before are still shown, as possible (low
confidence, counted in no total): they may still have needed asking.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import cached_property

from analysis.engine.detectors.actions import acts
from analysis.engine.detectors.base import (
    Finding,
    StepData,
    TaskContext,
    canonical_args,
    register,
)
from analysis.engine.detectors.bases import confidence, weakest
from analysis.units import fmt_ms
from ingest.limits import TRUNCATION_MARKER

MIN_WASTED_MS = 1.0
# Retrieval steps are tool calls too (a vector search with the same query is a repeat).
CALL_KINDS = ("tool", "retrieval")
# A stamp within this much of the call's own interval was taken by the call: the clocks of the
# host that timed the span and of the one that stamped the answer differ by milliseconds under NTP,
# and a stamp truncated to whole seconds reads up to a second early.
STAMP_SKEW_MS = 2000.0
# An unbroken token this long is opaque (a nonce, a signature, an encoded key; dependencies.py
# counts it distinctive for the same reason), never a word.
OPAQUE_CHARS = 16
# Field names (lower case, letters only) that name the request, never the data: new on every call.
_ID_KEYS = frozenset({"requestid", "xrequestid", "traceid", "spanid", "correlationid", "xcorrelationid", "took"})
# Field names of the response's own stamp (its value counts as the call's only when it is a time
# inside the call).
_STAMP_KEYS = frozenset({"timestamp", "ts", "date", "created", "generatedat", "fetchedat", "servedat", "retrievedat",
                         "respondedat", "requestedat", "receivedat", "queriedat", "asof", "servertime", "responsetime"})
# Field names of a validator: what HTTP caches revalidate with (ETag, Last-Modified) and its
# equivalents in tool answers. Never masked as an identifier: a new one is a change.
_VALIDATOR_KEYS = frozenset({"etag", "version", "revision", "rev", "sha", "checksum", "digest", "hash", "lastmodified",
                             "mtime", "modifiedat", "updatedat"})
_ID_LABELS = ("request", "trace", "span", "correlation")
_ID_PATTERN = r"(?:request|trace|span|correlation)[-_ ]?id[\"']?\s*[:=]\s*[\"']?[\w\-.:]+"
_DATE = r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
_TIME = (_DATE + r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} (?:GMT|UTC|[+-]\d{4})"
         r"|\d{10}(?:\d{3}){0,3}(?:\.\d+)?")
# What a text with a stamp holds besides an ISO time's "-" and ":" (an HTTP date's zone, an epoch's label).
_STAMP_HINTS = ("gmt", "utc", "timestamp", "ts=", "ts:", "ts\"", "ts'")
_STAMP_PATTERN = (r"\b(timestamp|ts|date|created|(?:generated|fetched|served|retrieved|responded|requested"
                  r"|received|queried)[ _]at|as[ _]of|server[ _]time|response[ _]time)[\"']?\s*[:=]\s*[\"']?(" + _TIME + r")")
# Matched on lower-cased text (a case-blind pattern costs several times more), else case-blind.
_ID_TEXT, _STAMP_TEXT = re.compile(_ID_PATTERN), re.compile(_STAMP_PATTERN.lower())
_ID_TEXT_ANY_CASE = re.compile(_ID_PATTERN, re.IGNORECASE)
_STAMP_TEXT_ANY_CASE = re.compile(_STAMP_PATTERN, re.IGNORECASE)
# A word that may be an identifier (it holds a digit, or is long), or a date(-time) kept whole: a
# date is data, never an identifier.
_ID_CANDIDATE = re.compile(r"(?<![A-Za-z0-9_-])(?:" + _DATE + r"|(?P<word>(?=[A-Za-z0-9_-]*[0-9]|[A-Za-z0-9]{"
                           + str(OPAQUE_CHARS) + r"})[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*))")
_WORDS = re.compile(r"[A-Za-z0-9]+")
_LETTER, _DIGIT = re.compile(r"[A-Za-z]"), re.compile(r"[0-9]")
_MEASURE = re.compile(r"\d+[A-Za-z]{1,3}")
ID = "\x1f"  # a masked identifier: no word, so never taken for one
# Results longer than this are compared as they are (no stamp is looked for in a whole file).
MAX_PARSED_CHARS = 200_000


def _what(canonical: str) -> str:
    """"order_id" for {"order_id": …}, "order_id and full" for two keys, else "arguments"."""
    try:
        parsed = json.loads(canonical)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and 0 < len(parsed) <= 3:
        keys = [k[:40] for k in parsed]
        return ", ".join(keys[:-1]) + (" and " if len(keys) > 1 else "") + keys[-1]
    return "arguments"


@register("repeated_tool_call")
def detect(ctx: TaskContext):
    groups = defaultdict(list)
    calls_in_order = sorted((s for s in ctx.steps if s.kind in CALL_KINDS), key=lambda s: (s.start_ms, s.step_id))
    for step in calls_in_order:
        if step.tool_args is None:
            continue
        groups[(step.label, ctx.call_args(step))].append(step)
    actions = [s for s in calls_in_order if acts(s.label)]
    action_starts = [s.start_ms for s in actions]
    for (tool, args), calls in groups.items():
        if len(calls) < 2:
            continue
        repeats, sources, changed, matched = _repeats(calls, args)
        wasted = sum(c.duration_ms for c in repeats)
        if not repeats or wasted < MIN_WASTED_MS:
            continue
        named = sorted({s.step_id: s for s in (*sources, *repeats)}.values(), key=lambda s: (s.start_ms, s.step_id))
        summary = (f"{tool} called {len(named)}× with the same {_what(args)}; "
                   f"{fmt_ms(wasted)} repeated.")
        ids = {c.step_id for c in calls}
        recorded = any(c.tool_result for c in calls)
        between = [_between(source, repeat, actions, action_starts, ids) for repeat, source, _ in matched]
        basis = _basis(tool, args, changed, [m for _, _, m in matched], between, recorded)
        evidence = {"tool": tool, "arguments": args[:500], "calls": len(named),
                    "first_step_id": named[0].step_id, "basis": basis,
                    "repeat_ms": [round(c.duration_ms, 1) for c in repeats]}
        if changed:
            evidence["changed_step_ids"] = [c.step_id for c in changed]
        acted = sorted({a.step_id for found in between for a in found})
        if acted:
            evidence["action_step_ids"] = acted[:20]
        if basis in ("acts", "action_between", "no_answers"):
            summary = f"Possibly: {summary}"
        yield Finding("repeated_tool_call", tuple(s.step_id for s in named), wasted,
                      summary, evidence, tuple((c.start_ms, c.end_ms) for c in repeats),
                      confidence=confidence(basis), confidence_reason=REASONS[basis])


def _between(source: StepData, repeat: StepData, actions: list[StepData], starts: list[float],
             group: set[str]) -> list[StepData]:
    """The calls of tools that act (other than the group's own) that started after the source
    call started and before the repeat did: each may have changed the answer."""
    lo, hi = bisect.bisect_left(starts, source.start_ms), bisect.bisect_left(starts, repeat.start_ms)
    return [a for a in actions[lo:hi] if a.step_id not in group]


# How a repeat's answer matched the one before it, weakest last (the finding takes its weakest).
SAME, UNRECORDED, FRESH_IDS, VALIDATED = "same", "unrecorded", "fresh_ids", "validated"


class _Answer:
    """One call's recorded result, read only as far as a comparison needs: most repeats' results
    are equal as stored, and only a difference is worth parsing and masking."""

    def __init__(self, step: StepData, echoed: frozenset[str]):
        self.raw = step.tool_result
        self.lo, self.hi = step.start_ms - STAMP_SKEW_MS, step.end_ms + STAMP_SKEW_MS
        self.echoed = echoed
        self.big = len(self.raw) > MAX_PARSED_CHARS
        # Ingest keeps a result's first few KiB: a cut one is compared by what was kept.
        self.cut = self.raw.rstrip().endswith(TRUNCATION_MARKER)

    @cached_property
    def parsed(self) -> object:
        text = self.raw.strip()
        if self.big or self.cut or text[:1] not in ("{", "["):
            return _NOT_JSON
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return _NOT_JSON

    @cached_property
    def plain(self) -> str:
        """The text as stored, without the call's own values, whitespace runs as one space."""
        return self.raw if self.big else " ".join(_strip_text(self.raw, self.lo, self.hi).split())

    @cached_property
    def exact(self) -> str:
        if self.parsed is _NOT_JSON:
            return self.plain
        return canonical_args(_without_own(self.parsed, self.lo, self.hi))

    @cached_property
    def validators(self) -> dict:
        return _validators(_head_members(self.raw.strip()) if self.cut else self.parsed)

    @cached_property
    def text(self) -> str:
        """The text as stored, masked (a cut one without the marker)."""
        masked = _mask_text(self.plain)
        return masked.removesuffix(_mask_text(TRUNCATION_MARKER)).rstrip() if self.cut else masked

    @cached_property
    def masked(self) -> str:
        if self.parsed is _NOT_JSON:
            return self.text
        return canonical_args(self._masked_json)

    @cached_property
    def _masked_json(self) -> object:
        return _masked(_without_own(self.parsed, self.lo, self.hi))

    @cached_property
    def substance(self) -> bool:
        """Whether the masked answer says anything beyond identifiers and the arguments' words."""
        words = _values(self._masked_json) if self.parsed is not _NOT_JSON else _WORDS.findall(self.text)
        return any(w.lower() not in self.echoed for w in words)


_NOT_JSON = object()


def _repeats(calls: list[StepData], args: str) -> tuple[list[StepData], list[StepData], list[StepData], list]:
    """(the repeats a cache could have answered, the earlier calls whose answers they got again,
    the calls whose answers showed a change, (repeat, the call it repeated, how its answer
    matched) of each repeat) of one (tool, arguments) group in start order."""
    echoed = frozenset(w.lower() for w in _WORDS.findall(args))
    held = None  # the last successful call: the answer the agent had
    known = None  # the last recorded answer of a successful call
    repeats, sources, changed, matched = [], {}, [], []
    for call in calls:
        answer = _Answer(call, echoed) if call.tool_result else None
        match = _match(answer, known)
        if held is None:
            pass
        elif match:
            repeats.append(call)
            sources[held.step_id] = held
            matched.append((call, held, match))
        elif call.status == "ok":  # a failed call's error is no answer a cache would hold, nor a change
            changed.append(call)
        if call.status == "ok":
            held = call
            if answer is not None:
                known = answer
    return repeats, list(sources.values()), changed, matched


def _match(answer: _Answer | None, known: _Answer | None) -> str:
    """How `answer` matches the answer before it (see the module's docstring); "" for a change."""
    if answer is None or known is None:
        return UNRECORDED
    if answer.raw == known.raw or answer.exact == known.exact:
        return SAME
    shared = answer.validators.keys() & known.validators.keys()
    if any(answer.validators[k] != known.validators[k] for k in shared):
        return ""  # a new ETag, version or hash: what they describe changed
    if (answer.masked == known.masked or _same_head(answer, known)) and answer.substance:
        return FRESH_IDS
    return VALIDATED if shared else ""


def _same_head(a: _Answer, b: _Answer) -> bool:
    """Whether, one result or both cut short by ingest, what was kept of them agrees (masked): the
    head of one starts the other. Each instrumentation writes a tool's results the same way."""
    if not (a.cut or b.cut):
        return False
    short, long = sorted((a, b), key=lambda x: (not x.cut, len(x.text)))
    return long.text.startswith(short.text) and (not long.cut or len(long.text) >= len(short.text))


def _without_own(value: object, lo: float, hi: float, depth: int = 0) -> object:
    if depth > 32:
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = _key_name(key)
            if name in _ID_KEYS or (name in _STAMP_KEYS and _within(_time_ms(item), lo, hi)):
                continue
            out[key] = _without_own(item, lo, hi, depth + 1)
        return out
    if isinstance(value, list):
        return [_without_own(v, lo, hi, depth + 1) for v in value]
    if isinstance(value, str):
        inner = value.strip()
        if inner[:1] in ("{", "["):
            try:  # a JSON document carried as a string (MCP text content, a serialised body)
                return _without_own(json.loads(inner), lo, hi, depth + 1)
            except (ValueError, RecursionError):
                pass
        return _strip_text(value, lo, hi)
    return value


def _masked(value: object, depth: int = 0) -> object:
    """The value with the identifiers in its strings masked; validators' values kept."""
    if depth > 32:
        return value
    if isinstance(value, dict):
        return {k: (v if _key_name(k) in _VALIDATOR_KEYS else _masked(v, depth + 1)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, depth + 1) for v in value]
    if isinstance(value, str):
        return _mask_text(value)
    return value


def _values(value: object, depth: int = 0) -> list[str]:
    """The words of a (masked) value's leaves, numbers and flags as written; not its keys."""
    if depth > 32:
        return []
    if isinstance(value, dict):
        return [w for v in value.values() for w in _values(v, depth + 1)]
    if isinstance(value, list):
        return [w for v in value for w in _values(v, depth + 1)]
    if isinstance(value, str):
        return _WORDS.findall(value)
    return [] if value is None else [json.dumps(value)]


def _mask_text(text: str) -> str:
    if not any(d in text for d in "0123456789") and max(map(len, text.split()), default=0) < OPAQUE_CHARS:
        return text  # no identifier can be in it (the pattern costs a scan of every character)
    return _ID_CANDIDATE.sub(_mask, text)


def _mask(m: re.Match) -> str:
    word = m.group("word")
    return ID if word is not None and _is_id(word) else m.group()


def _is_id(word: str) -> bool:
    """Letters and digits mixed (kb-679, req_8f3a, a UUID), or opaque: long and unbroken; never a
    number with its unit (10am, 3rd, 20GB, 4k), which is a measurement."""
    if len(word) >= OPAQUE_CHARS and "-" not in word and "_" not in word and _LETTER.search(word):
        return True
    return (len(word) >= 3 and bool(_LETTER.search(word)) and bool(_DIGIT.search(word))
            and not _MEASURE.fullmatch(word))


def _key_name(key: object) -> str:
    return re.sub(r"[^a-z]", "", str(key).lower())


def _validators(parsed: object) -> dict:
    if not isinstance(parsed, dict):
        return {}
    return {name: canonical_args(v) for k, v in parsed.items() if (name := _key_name(k)) in _VALIDATOR_KEYS}


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")


def _head_members(text: str) -> dict:
    """The complete top-level members of a JSON object whose text was cut short ({} if it is none)."""
    members: dict = {}
    if text[:1] != "{":
        return members
    at = _SPACE.match(text, 1).end()
    while at < len(text) and text[at] == '"':
        try:
            key, at = _DECODER.raw_decode(text, at)
            at = _SPACE.match(text, at).end()
            if text[at:at + 1] != ":":
                break
            value, at = _DECODER.raw_decode(text, _SPACE.match(text, at + 1).end())
        except (ValueError, RecursionError):
            break
        members[key] = value
        at = _SPACE.match(text, at).end()
        if text[at:at + 1] != ",":
            break
        at = _SPACE.match(text, at + 1).end()
    return members


def _strip_text(text: str, lo: float, hi: float) -> str:
    """The text without "request id: …" and a "timestamp: …" taken during the call (each value
    replaced by ID), looked for only where a label occurs."""
    low = text.lower()
    same_places = len(low) == len(text)
    if not same_places:  # lower-casing moved characters: match the text itself
        low = text
    id_text, stamp_text = (_ID_TEXT, _STAMP_TEXT) if same_places else (_ID_TEXT_ANY_CASE, _STAMP_TEXT_ANY_CASE)
    spans = [m.span() for m in id_text.finditer(low)] if any(k in low for k in _ID_LABELS) else []
    if ("-" in low and ":" in low) or any(k in low for k in _STAMP_HINTS):  # an ISO time, an HTTP date, an epoch
        spans += [m.span(2) for m in stamp_text.finditer(low) if _within(_time_ms(text[m.start(2):m.end(2)]), lo, hi)]
    if not spans:
        return text
    out, at = [], 0
    for start, end in sorted(spans):
        if start >= at:
            out += [text[at:start], ID]
            at = end
    return "".join(out) + text[at:]


def _within(ms: float | None, lo: float, hi: float) -> bool:
    return ms is not None and lo <= ms <= hi


def _time_ms(value: object) -> float | None:
    """A time as epoch ms: an epoch number in s, ms, µs or ns (2001–2286), an ISO-8601 date-time
    (no offset: UTC, as servers stamp) or an RFC 1123 one (an HTTP Date); else None."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return _epoch_ms(float(text))
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text.replace(",", ".").replace("z", "Z").replace("Z", "+00:00"))
        except ValueError:
            try:
                parsed = parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp() * 1000
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _epoch_ms(float(value))
    return None


def _epoch_ms(number: float) -> float | None:
    for scale in (1e3, 1.0, 1e-3, 1e-6):
        ms = number * scale
        if 1e12 <= ms < 1e13:
            return ms
    return None


# What a finding's confidence_reason says for each basis (bases.py).
REASONS = {
    "same_answer": "The same tool was called with the same arguments and got the same answer, and nothing that "
                   "acts ran in between.",
    "same_answer_fresh_ids": "The same arguments, and answers that differ only in identifiers (a request id, "
                             "a generated key): probably the same answer.",
    "no_arguments": "The calls took no arguments: asking again may have been meant to get a newer answer.",
    "nothing_between": "The same arguments, and no call of a tool that acts ran in between to change the answer "
                       "(the repeat's own answer was not recorded).",
    "acts": "Possible only: this tool acts (writes, clicks, submits...), and doing it again is another action, "
            "not a question a cache could answer.",
    "action_between": "Possible only: a call of a tool that acts ran in between (a form filled again, a patch "
                      "applied), so the same call may have had a new answer.",
    "answer_changed": "Some calls with these arguments returned a new answer (polling, or a re-check after a "
                      "change): those that did not may still have needed asking.",
    "same_validator": "The answers differ, but carry the same version (or ETag, revision, hash): what they "
                      "describe may not have changed.",
    "no_answers": "Possible only: no call with these arguments recorded its answer, so nothing shows it was "
                  "the same.",
}
_MATCH_BASIS = {SAME: "same_answer", FRESH_IDS: "same_answer_fresh_ids", VALIDATED: "same_validator"}


def _basis(tool: str, args: str, changed: list[StepData], matches: list[str], between: list[list[StepData]],
           recorded: bool) -> str:
    """The weakest basis among the group's repeats (bases.py). Asserted only on something seen: the
    same answer recorded, or, the repeat's answer unrecorded, an answer recorded and nothing that
    acts in between. A tool that acts, an action in between, a changed answer, no answer recorded
    at all: possible."""
    if acts(tool):
        return "acts"
    if changed:
        return "answer_changed"
    codes = []
    for match, acted in zip(matches, between, strict=True):
        if acted:
            codes.append("action_between")
        elif match == UNRECORDED:
            codes.append("nothing_between" if recorded else "no_answers")
        else:
            codes.append(_MATCH_BASIS[match])
    basis = weakest(codes)
    if basis == "same_answer" and args in ("{}", "[]", '""', "null"):
        return "no_arguments"
    return basis
