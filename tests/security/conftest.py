"""The security suite's closing note: what the schemathesis run covered (operations, examples,
answers by status class), printed at the end of the session where a CI log shows it and written
to test-artifacts/schemathesis.txt."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "schemathesis.txt"
_NOTES = pytest.StashKey[list[str]]()


@pytest.fixture
def closing_note(request):
    """Call with a line: it is printed in the session's summary and appended to the artifact."""
    notes = request.config.stash.setdefault(_NOTES, [])

    def note(line: str) -> None:
        notes.append(line)
        ARTIFACT.parent.mkdir(exist_ok=True)
        with ARTIFACT.open("a") as fh:
            fh.write(f"{datetime.now(tz=UTC).isoformat(timespec='seconds')} {line}\n")
    return note


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    notes = config.stash.get(_NOTES, [])
    if notes:
        terminalreporter.section("schemathesis")
        for line in notes:
            terminalreporter.write_line(line)
