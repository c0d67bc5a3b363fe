"""Ids as one URL path segment. Task, step and session ids are whatever the sender chose: any
printable character, "/" included. A WSGI server decodes %2F to "/" before routing, so "/" (and
the "~" that escapes it) are written `~2F` / `~7E`, and an id of only dots, which a browser would
resolve as "." or ".." segments, `~2E` per dot. Pure: the read client uses it too."""

from __future__ import annotations

import re

_ESCAPE = {"~": "~7E", "/": "~2F"}
_UNESCAPE = re.compile(r"~(7E|2F|2E)", re.IGNORECASE)
_CHAR = {"7E": "~", "2F": "/", "2E": "."}


def to_segment(value: str) -> str:
    out = "".join(_ESCAPE.get(c, c) for c in str(value))
    if out and set(out) == {"."}:
        out = "~2E" * len(out)
    return out


def from_segment(segment: str) -> str:
    return _UNESCAPE.sub(lambda m: _CHAR[m.group(1).upper()], segment)


class IdConverter:
    """Django path converter `<id:...>`: one segment, decoded with from_segment."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return from_segment(value)

    def to_url(self, value: str) -> str:
        return to_segment(value)
