"""Task filters shared by the read API, the pages and the CSV export, parsed from a query dict.
A bad value raises FilterError naming the parameter.

Search (`selectors.task_queryset` applies it): `attr=key:value` (a step's or the task's
attributes), `model=`, `tool=`, `min_step_ms=` and `error=` (words of a step's error) all
describe one step, so `tool=search&min_step_ms=2000` means "a search call over 2 s"; `q=` matches
the task name (contains), the task id (exact), or words of any step's tool arguments or error;
`running=1` keeps the tasks whose steps are still arriving."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

from ingest.records import STATUSES


class FilterError(ValueError):
    pass


RANGE_PRESETS = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
                 "24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}

SORTS = {"-started_at", "started_at", "-duration_ms", "duration_ms"}


@dataclass(frozen=True)
class TaskFilters:
    release: str = ""
    name: str = ""
    status: str = ""
    environment: str = ""
    session_id: str = ""
    device: str = ""
    finding: str = ""
    q: str = ""
    min_duration_ms: float | None = None
    max_duration_ms: float | None = None
    since: datetime | None = None
    until: datetime | None = None
    attr: str = ""              # "key:value"
    model: str = ""
    tool: str = ""
    min_step_ms: float | None = None
    error: str = ""
    running: str = ""           # "1": only tasks still running

    @property
    def attr_pair(self) -> tuple[str, str] | None:
        if not self.attr:
            return None
        key, _, value = self.attr.partition(":")
        return key, value

    def as_query(self) -> dict[str, str]:
        """The filters as URL parameters (for links that keep them)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, ""):
                continue
            out[f.name] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out


def _time(params, key: str) -> datetime | None:
    value = params.get(key)
    if not value:
        return None
    text = value.strip()
    try:
        if text.lstrip("-").isdigit():
            return datetime.fromtimestamp(int(text) / 1e9, tz=UTC)
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        # In UTC: PostgreSQL refuses offsets past ±15:59 that Python accepts (e.g. +20:04).
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        raise FilterError(f"{key}: {value!r} is not an RFC 3339 timestamp") from None


def _number(params, key: str) -> float | None:
    value = params.get(key)
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError:
        raise FilterError(f"{key}: {value!r} is not a number") from None
    if number != number or number < 0:
        raise FilterError(f"{key}: must be a non-negative number")
    return number


def parse_task_filters(params, *, now: datetime | None = None) -> TaskFilters:
    for key, value in params.items():
        if "\x00" in value:  # PostgreSQL text cannot hold NUL: a 500 if it reached a query
            raise FilterError(f"{key}: must not contain NUL bytes")
    status = params.get("status", "")
    if status and status not in STATUSES:
        raise FilterError(f"status: must be one of {', '.join(STATUSES)}")
    attr = params.get("attr", "")
    if attr and (":" not in attr or not attr.partition(":")[0].strip()):
        raise FilterError("attr: must be key:value, e.g. attr=gen_ai.system:openai")
    running = params.get("running", "")
    if running not in ("", "0", "1", "true", "false"):
        raise FilterError("running: must be 1 or 0")
    since = _time(params, "since")
    preset = params.get("range", "")
    if preset and not since:
        if preset not in RANGE_PRESETS:
            raise FilterError(f"range: must be one of {', '.join(RANGE_PRESETS)}")
        since = (now or datetime.now(tz=UTC)) - RANGE_PRESETS[preset]
    return TaskFilters(
        release=params.get("release", ""),
        name=params.get("name", ""),
        status=status,
        environment=params.get("environment", ""),
        session_id=params.get("session_id", ""),
        device=params.get("device", ""),
        finding=params.get("finding", ""),
        q=params.get("q", "")[:200],
        min_duration_ms=_number(params, "min_duration_ms"),
        max_duration_ms=_number(params, "max_duration_ms"),
        since=since,
        until=_time(params, "until"),
        attr=attr[:400],
        model=params.get("model", ""),
        tool=params.get("tool", ""),
        min_step_ms=_number(params, "min_step_ms"),
        error=params.get("error", "")[:200],
        running="1" if running in ("1", "true") else "",
    )


def parse_limit(params, *, default: int = 50, maximum: int = 500) -> int:
    value = params.get("limit")
    if not value:
        return default
    try:
        limit = int(value)
    except ValueError:
        raise FilterError(f"limit: {value!r} is not a whole number") from None
    if not 1 <= limit <= maximum:
        raise FilterError(f"limit: must be between 1 and {maximum}")
    return limit


def encode_cursor(sort_value: object, pk: int) -> str:
    text = f"{sort_value.isoformat() if isinstance(sort_value, datetime) else sort_value}|{pk}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, *, sort: str) -> tuple[object, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value, _, pk = raw.rpartition("|")
        parsed = datetime.fromisoformat(value).astimezone(UTC) if sort.endswith("started_at") else float(value)
        return parsed, int(pk)
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor: not a cursor this API returned") from None
