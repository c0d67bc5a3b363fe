"""Task filters shared by the read API, the pages and the exports, parsed from a query dict (a bad
value raises FilterError naming the parameter), and the base task query that applies them:
every reader of tasks starts from `task_queryset`.

Search (`task_queryset` below applies it): `attr=key:value` (a step's or the task's attributes
as sent: keys ingest moved into a column are matched there), `model=` and `tool=` (exact, or `*`
patterns), `min_step_ms=` (a work step, not an agent or framework span, unless `step_kind=` says),
`step_kind=` and `error=` (words of a step's error) all describe one step, so
`tool=search&min_step_ms=2000` means "a search call over 2 s"; `q=` matches
the task name (contains), the task id (exact), or words of any step's tool arguments or error;
`running=1` keeps the tasks whose steps are still arriving."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import BooleanField, Exists, F, Lookup, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from agentops.db import read_connection
from ingest.conventions import CONSUMED_KEY_COLUMNS, CONSUMED_RESOURCE_KEY_COLUMNS
from ingest.models import STEP_SEARCH_TSVECTOR, Project, Step, Task
from ingest.records import STATUSES, STEP_KINDS


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
    step_kind: str = ""         # the kind of the one step the step filters describe
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
    step_kind = params.get("step_kind", "")
    if step_kind and step_kind not in STEP_KINDS:
        raise FilterError(f"step_kind: must be one of {', '.join(STEP_KINDS)}")
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
        model=check_pattern(params.get("model", ""), name="model"),
        tool=check_pattern(params.get("tool", ""), name="tool"),
        min_step_ms=_number(params, "min_step_ms"),
        step_kind=step_kind,
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


BIGINT_MAX = 2**63 - 1  # a value past PostgreSQL's bigint is an error there, not "no rows"


def cursor_time(value: str) -> datetime:
    """A cursor's time, in UTC: PostgreSQL refuses offsets past ±15:59 that Python accepts (one
    near year 1 or 9999 may leave the range once converted: OverflowError)."""
    parsed = datetime.fromisoformat(value)
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def cursor_number(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):  # NaN / inf: never a value a list returned
        raise ValueError("not finite")
    return number


def cursor_int(value: str) -> int:
    number = int(value)
    if not -BIGINT_MAX <= number <= BIGINT_MAX:
        raise ValueError("out of range")
    return number


def cursor_parts(cursor: str) -> tuple[str, int]:
    """(sort value as written, pk) of a cursor `encode_cursor` made; ValueError (or a subclass:
    binascii.Error, UnicodeDecodeError) for anything else. Callers parse the value and turn the
    error into FilterError, as decode_cursor does."""
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    value, _, pk = raw.rpartition("|")
    return value, cursor_int(pk)


def decode_cursor(cursor: str, *, sort: str) -> tuple[object, int]:
    """(sort value, pk) of a cursor `encode_cursor` made; FilterError naming `cursor` for anything
    else, including values PostgreSQL would refuse (a 500 if they reached a query)."""
    try:
        value, pk = cursor_parts(cursor)
        parsed = cursor_time(value) if sort.endswith("started_at") else cursor_number(value)
        return parsed, pk
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor: not a cursor this API returned") from None


# The base task query: every reader of tasks (the task list, the dashboard's reads, rollups,
# releases, alerts, sessions, exports, costs) starts from it, so a filter means the same thing
# everywhere.

def running_q(*, now: datetime | None = None) -> Q:
    """Tasks still running: their end not reported yet, and an event within the time after which
    the analysis gives up waiting for the end (ANALYSIS_ABANDON_SECONDS)."""
    now = now or datetime.now(tz=UTC)
    recent = now - timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)
    return ~Q(reported=True, ended_at__isnull=False) & Q(last_event_at__gte=recent)


def task_is_running(task: Task, *, now: datetime | None = None) -> bool:
    now = now or datetime.now(tz=UTC)
    ended = task.reported and task.ended_at is not None
    return not ended and task.last_event_at >= now - timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)


def step_text_match(text: str) -> RawSQL:
    """Steps whose tool arguments or error hold the words of `text` (web-search syntax: "a
    phrase", or, -not), through the GIN index on STEP_SEARCH_TSVECTOR (docs/ui.md, "Search")."""
    return RawSQL(f"({STEP_SEARCH_TSVECTOR}) @@ websearch_to_tsquery('simple', %s)", [search_words(text)],
                  output_field=BooleanField())


def search_words(text: str) -> str:
    """The search text as the index saw the steps' text: < and > are spaces (see ingest.models)."""
    return text.replace("<", " ").replace(">", " ")


def _attr_values(value: str) -> list[object]:
    """`attr=k:5` matches the string "5" and the number 5 (likewise true/false/null). NaN,
    Infinity, -Infinity and 1e999 (a float past the range) match the text only: jsonb holds no
    such number (ingest stores a non-finite attribute as null), and the query would fail."""
    values: list[object] = [value]
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return values
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return values
    if parsed is None or isinstance(parsed, bool | int | float):
        values.append(parsed)
    return values


def _column_match(column: str, value: str) -> Q | None:
    """A consumed key's value as its column holds it (ingest.conventions.CONSUMED_KEY_COLUMNS):
    text as sent, counts as whole numbers, TTFT sent in seconds and stored in ms, the stream
    flag as a boolean. None when the value cannot be what that column holds."""
    if column in ("input_tokens", "output_tokens", "cached_tokens"):
        text = value.strip()
        return Q(**{column: int(text)}) if text.isdigit() and int(text) < 2**31 else None
    if column == "ttft_ms":
        try:
            ms = float(value) * 1000.0
        except ValueError:
            return None
        if not math.isfinite(ms):
            return None
        slack = max(abs(ms), 1.0) * 1e-9  # seconds × 1000 in floating point
        return Q(ttft_ms__gte=ms - slack, ttft_ms__lte=ms + slack)
    if column == "streamed":
        # IS TRUE / IS FALSE, the predicates of the flag's two partial indexes (ingest 0017): Postgres
        # estimates `NOT streamed` as every step without a true flag, the steps with none (every
        # non-model step) included, and would probe every task's steps instead (6 s at 10M steps).
        if value not in ("true", "false"):
            return None
        return Q(RawSQL(f"streamed IS {value.upper()}", [], output_field=BooleanField()))
    return Q(**{column: value}) if value else None


def _attr_conditions(key: str, value: str) -> tuple[Q, Q]:
    """`attr=key:value` as (a condition on a step, a condition on the task): the stored attributes
    hold the value, or the key is one ingest consumed and its column holds it."""
    on_step, on_task = Q(), Q()
    for v in _attr_values(value):
        on_step |= Q(attributes__contains={key: v})
        on_task |= Q(attributes__contains={key: v})
    column = CONSUMED_KEY_COLUMNS.get(key)
    if column == "session_id" and value:
        on_task |= Q(session_id=value)
    elif column and column != "session_id":
        match = _column_match(column, value)
        if match is not None:
            on_step |= match
    if key in CONSUMED_RESOURCE_KEY_COLUMNS and value:
        on_task |= Q(**{CONSUMED_RESOURCE_KEY_COLUMNS[key]: value})
    return on_step, on_task


MAX_NAMES = 5000

# Steps that wrap other steps: their duration is the work inside them, so "a step at least this
# long" means a work step unless `step_kind` asks for these.
WRAPPER_KINDS = ("agent", "framework")


# Search patterns (`tool=`, `model=`, the value suggestions): `*` matches any text, everything else
# is itself. A pattern is no longer than the values it matches (the model and tool columns hold
# 200 characters), and a person types a few `*` (`gpt-4*`, `*mini*`, `search_*`); past either bound
# the request answers 400 naming the parameter. Matching never backtracks: the text
# between the `*` is found left to right, one `str.find` each (`pattern_matches`), and where the
# values are too many to list the pattern becomes an `ILIKE`, which PostgreSQL also matches without
# backtracking (its LIKE gives up at the first `%` whose rest cannot match: like_match.c,
# LIKE_ABORT). A regex here froze the web tier: `*a*a*a…*b` against `aaa…` (docs/reliability.md).
MAX_PATTERN_LENGTH = 200
MAX_PATTERN_WILDCARDS = 10


def is_pattern(value: str) -> bool:
    return "*" in value


def check_pattern(value: str, *, name: str) -> str:
    """`value`, when it is exact text or a pattern within the bounds; else FilterError naming `name`."""
    if not is_pattern(value):
        return value
    if len(value) > MAX_PATTERN_LENGTH:
        raise FilterError(f"{name}: at most {MAX_PATTERN_LENGTH} characters")
    if value.count("*") > MAX_PATTERN_WILDCARDS:
        raise FilterError(f"{name}: a pattern may hold at most {MAX_PATTERN_WILDCARDS} `*`")
    return value


def pattern_parts(value: str) -> tuple[str, ...]:
    """The lower-cased text between a pattern's `*`: `*Mini*` → ("", "mini", "")."""
    return tuple(value.lower().split("*"))


def pattern_matches(parts: tuple[str, ...], text: str) -> bool:
    """Whether `text` matches the pattern `pattern_parts` made (case-insensitive), in time linear in
    the text for each part: the first part starts it, the last ends it, and each one between is
    found at the leftmost place after the one before (the leftmost place leaves the most text for
    the rest, so it is never wrong to take it)."""
    text = text.lower()
    if len(parts) == 1:
        return text == parts[0]
    head, *middle, tail = parts
    if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
        return False
    at, stop = len(head), len(text) - len(tail)
    for part in middle:
        found = text.find(part, at, stop)
        if found < 0:
            return False
        at = found + len(part)
    return True


def pattern_like(value: str) -> str:
    """The pattern as an `ILIKE` pattern: `*` → `%`, and `%`, `_` and `\\` as themselves."""
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


class _ILike(Lookup):
    lookup_name = "ilike"

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} ILIKE {rhs}", [*lhs_params, *rhs_params]


def text_match(*, project: Project, column: str, value: str) -> Q:
    """`value` exactly (as before), or a pattern with `*` (case-insensitive) matched against the
    column's known values, so the condition stays an index lookup (`IN`, not a match per row)."""
    if not is_pattern(value):
        return Q(**{column: value})
    known = step_values(project=project, column=column)
    if known is None:  # too many to list: the pattern on every row
        return Q(_ILike(F(column), pattern_like(value)))
    parts = pattern_parts(value)
    matching = [v for v in known if pattern_matches(parts, v)]
    return Q(**{f"{column}__in": matching}) if matching else Q(pk__in=[])


# The step columns whose distinct values a partial index lists (step_model_time, step_tool_time).
VALUE_COLUMNS = ("model", "tool_name")


def step_values(*, project: Project, column: str, limit: int = MAX_NAMES) -> list[str] | None:
    """The distinct non-empty values of `model` or `tool_name` in the project's steps, in order,
    read from the column's partial index one value at a time (a loose index scan: an index probe
    per value, not a read of every step). None when there are more than `limit`."""
    if column not in VALUE_COLUMNS:
        raise ValueError(column)
    with read_connection().cursor() as cur:
        cur.execute(
            "WITH RECURSIVE v AS ("
            f" (SELECT {column} AS value FROM ingest_step WHERE project_id = %s AND {column} <> ''"
            f"  ORDER BY {column} LIMIT 1)"
            f" UNION ALL SELECT (SELECT s.{column} FROM ingest_step s WHERE s.project_id = %s"
            f"  AND s.{column} <> '' AND s.{column} > v.value ORDER BY s.{column} LIMIT 1)"
            " FROM v WHERE v.value IS NOT NULL)"
            " SELECT value FROM v WHERE value IS NOT NULL LIMIT %s", [project.pk, project.pk, limit + 1])
        values = [row[0] for row in cur.fetchall()]
    return None if len(values) > limit else values


def _step_search(f: TaskFilters, *, project: Project) -> Q | None:
    """The filters that describe one step, as a condition on that step (None: none set)."""
    q = Q()
    if f.model:
        q &= text_match(project=project, column="model", value=f.model)
    if f.tool:
        q &= text_match(project=project, column="tool_name", value=f.tool)
    if f.step_kind:
        q &= Q(kind=f.step_kind)
    if f.min_step_ms is not None:
        q &= Q(duration_ms__gte=f.min_step_ms)  # the (project, duration) index finds rare long steps
        if not f.step_kind:
            q &= ~Q(kind__in=WRAPPER_KINDS)
    if f.error:
        q &= Q(step_text_match(f.error)) & Q(RawSQL(
            "to_tsvector('simple', translate(error, '<>', '  ')) @@ websearch_to_tsquery('simple', %s)",
            [search_words(f.error)], output_field=BooleanField()))
    return q if q else None



def task_names_containing(*, project: Project, text: str) -> list[str] | None:
    """The project's task names that contain `text` (case-insensitive), read from the (project,
    name) index one distinct name at a time (a loose index scan: a few index probes, where
    `name ILIKE` reads every task). None when the project has more than MAX_NAMES names."""
    with read_connection().cursor() as cur:
        cur.execute(
            "WITH RECURSIVE n AS ("
            " (SELECT name FROM ingest_task WHERE project_id = %s ORDER BY name LIMIT 1)"
            " UNION ALL SELECT (SELECT t.name FROM ingest_task t WHERE t.project_id = %s AND t.name > n.name"
            "  ORDER BY t.name LIMIT 1) FROM n WHERE n.name IS NOT NULL)"
            " SELECT name FROM n WHERE name IS NOT NULL LIMIT %s", [project.pk, project.pk, MAX_NAMES + 1])
        names = [row[0] for row in cur.fetchall()]
    if len(names) > MAX_NAMES:
        return None
    needle = text.casefold()
    return [n for n in names if needle in n.casefold()]


def task_queryset(*, project: Project, filters: TaskFilters) -> QuerySet[Task]:
    qs = Task.objects.filter(project=project, started_at__isnull=False)
    f = filters
    for field in ("release", "name", "status", "environment", "session_id"):
        value = getattr(f, field)
        if value:
            qs = qs.filter(**{field: value})
    if f.q:
        # EXISTS (not IN): Postgres then picks per query between probing each task's steps (a
        # common word: the first page fills at once) and one scan of the text index (a rare one).
        in_steps = Exists(Step.objects.filter(Q(project=project) & Q(task=OuterRef("pk")) & Q(step_text_match(f.q))))
        names = task_names_containing(project=project, text=f.q)
        by_name = Q(name__icontains=f.q) if names is None else Q(name__in=names) if names else Q(pk__in=[])
        qs = qs.filter(by_name | Q(task_id=f.q) | in_steps)
    if f.min_duration_ms is not None:
        qs = qs.filter(duration_ms__gte=f.min_duration_ms)
    if f.max_duration_ms is not None:
        qs = qs.filter(duration_ms__lt=f.max_duration_ms)
    if f.since:
        qs = qs.filter(started_at__gte=f.since)
    if f.until:
        qs = qs.filter(started_at__lt=f.until)
    if f.finding:
        qs = qs.filter(analysis__finding_kinds__contains=[f.finding])
    if f.device:
        qs = qs.filter(Exists(Step.objects.filter(project=project, task=OuterRef("pk"), device=f.device)))
    if f.running:
        qs = qs.filter(running_q())
    step_q = _step_search(f, project=project)
    pair = f.attr_pair
    if pair:
        key, value = pair
        step_attr, task_attr = _attr_conditions(key, value)
        on_step = Exists(Step.objects.filter(Q(project=project) & Q(task=OuterRef("pk")) & step_attr & (step_q or Q())))
        on_task = task_attr & (Q(Exists(Step.objects.filter(Q(project=project) & Q(task=OuterRef("pk")) & step_q)))
                                if step_q else Q())
        qs = qs.filter(on_step | on_task)
    elif step_q:
        qs = qs.filter(Exists(Step.objects.filter(Q(project=project) & Q(task=OuterRef("pk")) & step_q)))
    return qs
