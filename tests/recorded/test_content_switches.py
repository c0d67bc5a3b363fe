"""The derived content-off payloads (content_switches.SWITCHES: our reading of each library's source)
against the real ones (tests/fixtures/agents/content_off/: the library run with its switch set), for
every family that has both. A recording is the truth: for each scope and span kind, the attribute
keys that arrive, which of them arrive redacted, and the keys inside JSON-valued attributes (message
parts) must be the same. Ids, timings and values are not compared: they change on every run."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.fixtures.agents.record.capture import decode
from tests.recorded.content_switches import RECORDED, REDACTED, SWITCHES, derived, payloads

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
BOTH = [f for f in SWITCHES if f in RECORDED and (FIXTURES / "content_off" / f).is_dir()]


def _index(key: str) -> str:
    """`llm.input_messages.3.message.content` → `llm.input_messages.N.message.content`."""
    return re.sub(r"\.\d+(?=\.|$)", ".N", key)


def _json_keys(prefix: str, value) -> set[str]:
    """The key paths inside a JSON value (lists as `[]`), not its values."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{prefix}.{k}"} | _json_keys(f"{prefix}.{k}", v)}
    if isinstance(value, list):
        return {p for v in value for p in _json_keys(prefix + "[]", v)}
    return set()


# JSON-valued attributes whose keys are content themselves (the tool's own argument names or result
# fields, a schema's property names): only the attribute's presence is compared.
OPAQUE = {"gen_ai.tool.definitions", "llm.tools", "metadata", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
          "input.value", "output.value", "traceloop.entity.input", "traceloop.entity.output", "logfire.json_schema"}


def _span_kind(span: dict) -> str:
    a = span["attributes"]
    return a.get("openinference.span.kind") or a.get("gen_ai.operation.name") or "-"


def shape(spans: list[dict]) -> dict[tuple[str, str], set[str]]:
    """(scope, span kind) → the attribute keys (indices as N, `=REDACTED` where the value is the
    redaction marker), the key paths inside JSON-valued attributes, the events' names and keys, and
    whether the status has a description."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for span in spans:
        keys = out[span["scope"], _span_kind(span)]
        for key, value in span["attributes"].items():
            key = _index(key)
            keys.add(key + ("=" + REDACTED if value == REDACTED else ""))
            if isinstance(value, str) and value[:1] in "[{" and key not in OPAQUE:
                try:
                    keys |= _json_keys(key, json.loads(value))
                except ValueError:
                    pass
        if span["status_message"]:
            keys.add("status.message")
        for event in span["events"]:
            keys |= {f"event:{event['name']}"} | {f"event:{event['name']}:{_index(k)}" for k in event["attributes"]}
    return out


def spans_of(bodies: list[tuple[bytes, str]]) -> list[dict]:
    return [s for body, media in bodies for s in decode(body, "json" if "json" in media else "pb")]


def test_every_content_off_recording_is_listed_and_every_listed_one_exists():
    on_disk = {p.name for p in (FIXTURES / "content_off").iterdir() if p.is_dir()}
    assert on_disk == set(RECORDED)


@pytest.mark.parametrize("family", BOTH)
def test_the_derived_content_off_payload_hides_what_the_recorded_one_hides(family):
    recorded, derivation = shape(spans_of(payloads(FIXTURES, family, content=False))), shape(
        spans_of(derived(FIXTURES, family)))
    differences = {group: {"only recorded": sorted(recorded.get(group, set()) - derivation.get(group, set())),
                           "only derived": sorted(derivation.get(group, set()) - recorded.get(group, set()))}
                   for group in set(recorded) | set(derivation)
                   if recorded.get(group) != derivation.get(group)}
    assert not differences, differences
