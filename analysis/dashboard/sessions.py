"""Sessions: the tasks that share a session id (`Task.session_id`: the native `session_id`, or
`gen_ai.conversation.id` / `session.id` from OTLP, see ingest/conventions.py). In a chat agent a
task is one user turn, so a turn's duration is the time the user waited for that answer.

Every reader starts from `task_queryset`: the session list obeys the task filters
(a time range keeps the turns inside it) and one project never sees another's sessions. The
list aggregates in Postgres (one GROUP BY over the filtered tasks, keyset-paginated on the sort
value and the session id); findings and wasted time are read for the page's sessions only.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Count, F, FloatField, Max, Min, Q, Sum
from django.db.models.functions import Coalesce

from analysis import rollups
from analysis.dashboard.aggregates import ECDF_FRACTIONS, PERCENTILES, bucket_rows
from analysis.filters import (
    FilterError,
    TaskFilters,
    cursor_int,
    cursor_number,
    cursor_time,
    task_is_running,
    task_queryset,
)
from analysis.models import Finding, TaskAnalysis
from ingest.models import Project, Task

SORTS = {"-last_started": "last_started", "last_started": "last_started", "-turns": "turns", "turns": "turns",
         "-total_ms": "total_ms", "total_ms": "total_ms", "-slowest_ms": "slowest_ms", "slowest_ms": "slowest_ms"}
MAX_TURNS = 1000  # a session page draws at most this many turns


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    turns: int
    total_ms: float
    slowest_ms: float
    last_started: datetime
    first_started: datetime | None = None
    errors: int = 0
    names: tuple[str, ...] = ()
    wasted_ms: float = 0.0
    findings: int = 0

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.turns if self.turns else 0.0


def _grouped(*, project: Project, filters: TaskFilters):
    return (task_queryset(project=project, filters=filters).exclude(session_id="")
            .values("session_id")
            # Only the sort keys, from columns of the covering session index (not the primary
            # key): an index-only scan; the page's sessions get the rest in _page_extras.
            .annotate(turns=Count("session_id"),
                      total_ms=Coalesce(Sum("duration_ms"), 0.0, output_field=FloatField()),
                      slowest_ms=Coalesce(Max("duration_ms"), 0.0, output_field=FloatField()),
                      last_started=Max("started_at")))


def encode_cursor(value, session_id: str) -> str:
    text = f"{value.isoformat() if isinstance(value, datetime) else value}|{session_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, *, field: str):
    """(sort value, session id) of a cursor `encode_cursor` made; FilterError naming `cursor` for
    anything else, including values PostgreSQL would refuse (an offset past ±15:59 is converted
    to UTC; a time out of range once converted, a count past bigint, NaN, a NUL byte: 400)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value, sep, session_id = raw.partition("|")
        if not sep or "\x00" in session_id:
            raise ValueError("no session id")
        if field == "last_started":
            return cursor_time(value), session_id
        return (cursor_int(value) if field == "turns" else cursor_number(value)), session_id
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor: not a cursor this list returned") from None


def session_list(*, project: Project, filters: TaskFilters, sort: str = "-last_started", limit: int = 50,
                 cursor: str = "") -> tuple[list[SessionRow], str | None]:
    """One page of sessions: turns, total and slowest turn time, first and last turn, failed
    turns, and (for the page's sessions) the task names, findings that count and wasted time."""
    if sort not in SORTS:
        raise FilterError(f"sort: must be one of {', '.join(sorted(SORTS))}")
    field = SORTS[sort]
    descending = sort.startswith("-")
    qs = _grouped(project=project, filters=filters)
    if sort == "-last_started":  # the default: the newest tasks name the page's sessions
        ids = _newest_sessions(project=project, filters=filters, limit=limit + 1,
                               cursor=_decode_cursor(cursor, field=field) if cursor else None)
        qs = qs.filter(session_id__in=ids)
    if cursor:
        value, after = _decode_cursor(cursor, field=field)
        op = "lt" if descending else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": value}) | Q(**{field: value, f"session_id__{op}": after}))
    order = [F(field).desc(), F("session_id").desc()] if descending else [F(field).asc(), F("session_id").asc()]
    rows = list(qs.order_by(*order)[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1][field], rows[-1]["session_id"])
    extra = _page_extras(project=project, filters=filters, session_ids=[r["session_id"] for r in rows])
    return [SessionRow(**r, **extra.get(r["session_id"], {})) for r in rows], next_cursor


def _newest_sessions(*, project: Project, filters: TaskFilters, limit: int, cursor) -> list[str]:
    """The `limit` sessions whose last turn is newest (after the cursor's), without grouping every
    task: walking tasks newest first, a session is met first at its last turn, so the first
    `limit` sessions met are the page's. A session met again below the cursor, whose last turn is
    above it, was on an earlier page: skipped."""
    tasks = task_queryset(project=project, filters=filters).exclude(session_id="")
    if cursor:  # at or below the cursor's last turn; those shown on the page before are dropped below
        tasks = tasks.filter(started_at__lte=cursor[0])
    found: list[str] = []
    seen: set[str] = set()
    batch: list[str] = []

    def keep(batch: list[str]) -> None:
        if cursor and batch:  # drop those an earlier page showed (a newer turn above the cursor)
            value, after = cursor
            shown = set(task_queryset(project=project, filters=filters).filter(session_id__in=batch)
                        .filter(Q(started_at__gt=value) | Q(started_at=value, session_id__gte=after))
                        .values_list("session_id", flat=True))
            batch = [s for s in batch if s not in shown]
        found.extend(batch)

    ordered = tasks.order_by("-started_at", "-pk").values_list("session_id", "started_at", "pk")
    chunk, last = max(4 * limit, 200), None
    while len(found) < limit:  # keyset chunks (LIMIT queries: the time index, newest first)
        rows = list((ordered.filter(Q(started_at__lt=last[0]) | Q(started_at=last[0], pk__lt=last[1]))
                     if last else ordered)[:chunk])
        for session_id, _, _ in rows:
            if session_id in seen:
                continue
            seen.add(session_id)
            batch.append(session_id)
            if len(batch) >= limit:
                keep(batch)
                batch = []
                if len(found) >= limit:
                    break
        if len(rows) < chunk:
            break
        last = rows[-1][1:]
    keep(batch)
    return found[:limit]


def _page_extras(*, project: Project, filters: TaskFilters, session_ids: list[str]) -> dict[str, dict]:
    if not session_ids:
        return {}
    tasks = task_queryset(project=project, filters=filters).filter(session_id__in=session_ids)
    out: dict[str, dict] = {s: {"names": set(), "wasted_ms": 0.0, "findings": 0} for s in session_ids}
    for row in tasks.values("session_id").annotate(first_started=Min("started_at"),
                                                   errors=Count("pk", filter=Q(status__in=Task.FAILED_STATUSES))):
        out[row["session_id"]].update(first_started=row["first_started"], errors=row["errors"])
    for session_id, name in tasks.values_list("session_id", "name").distinct():
        out[session_id]["names"].add(name)
    for session_id, wasted in (TaskAnalysis.objects.filter(project=project, task__in=tasks.values("pk"))
                               .values_list("task__session_id").annotate(w=Sum("wasted_ms"))):
        out[session_id]["wasted_ms"] = wasted or 0.0
    for session_id, n in (Finding.objects.counted().filter(project=project, task__in=tasks.values("pk"))
                          .values_list("task__session_id").annotate(n=Count("pk"))):
        out[session_id]["findings"] = n
    for extra in out.values():
        extra["names"] = tuple(sorted(extra["names"]))[:5]
    return out


@dataclass(frozen=True)
class TurnRow:
    number: int
    task: Task
    waited_ms: float | None        # the task's duration: what the user waited for this answer
    since_previous_ms: float | None  # from the previous answer to this request (the user's turn)
    findings: list[Finding]
    running: bool


def session_detail(*, project: Project, session_id: str, filters: TaskFilters | None = None) -> list[TurnRow]:
    """The session's turns in order, each with its findings (most wasted first, possible ones
    last). Empty when the session has no task in this project (the view answers 404)."""
    base = task_queryset(project=project, filters=filters or TaskFilters())
    tasks = list(base.filter(session_id=session_id).select_related("analysis").order_by("started_at", "pk")[:MAX_TURNS])
    if not tasks:
        return []
    by_task: dict[int, list[Finding]] = {t.pk: [] for t in tasks}
    known = {t.pk: t for t in tasks}
    for f in Finding.objects.filter(project=project, task__in=list(known)).order_by("-wasted_ms", "kind"):
        f.task = known[f.task_id]  # the API's task_id reads f.task: no lookup of the task by its id alone
        by_task[f.task_id].append(f)
    now = datetime.now(tz=UTC)
    out = []
    previous_end = None
    for n, t in enumerate(tasks, 1):
        gap = (t.started_at - previous_end).total_seconds() * 1000 if previous_end and t.started_at else None
        findings = sorted(by_task[t.pk], key=lambda f: not f.is_counted)
        out.append(TurnRow(n, t, t.duration_ms, gap, findings, task_is_running(t, now=now)))
        previous_end = t.ended_at or previous_end
    return out


def turn_time(*, project: Project, filters: TaskFilters) -> dict:
    """Time per user turn: how many sessions, turns per session, and percentiles of the time a
    user waited per turn (tasks with a session), from the task rollups' turn histogram and the raw
    edges binned the same way (rollups.turn_summary: the overview's other percentiles are the
    rollups', so the same tasks give the same numbers). The sessions are counted by one scan of
    the covering session index, linear in the turns of the range, so the overview fetches it
    after rendering (`/charts/turn-time.json`)."""
    tasks = task_queryset(project=project, filters=filters).exclude(session_id="")
    counts = tasks.values("session_id").annotate(n=Count("session_id")).aggregate(
        sessions=Count("session_id"), turns=Sum("n"))
    summary = rollups.turn_summary(project=project, filters=filters)
    sessions_n, turns = counts["sessions"] or 0, counts["turns"] or 0
    out = {"sessions": sessions_n, "turns": turns, "max": summary.max_ms,
           "turns_per_session": round(turns / sessions_n, 2) if sessions_n else None}
    values = summary.quantiles(PERCENTILES) or [None] * len(PERCENTILES)
    out.update({f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, values, strict=True)})
    return out


def busiest_sessions(*, project: Project, filters: TaskFilters, limit: int) -> list[str]:
    """The sessions with most turns (one GROUP BY on the covering index), most first."""
    return [r["session_id"] for r in _turns(project=project, filters=filters).values("session_id")
            .annotate(n=Count("session_id")).order_by("-n", "session_id")[:limit]]


def session_percentiles(*, project: Project, filters: TaskFilters, limit: int = 30) -> list[dict]:
    """The Latency page grouped by session: the sessions with most turns, then the percentiles
    of the time per turn of those only (binned like the rollups, as every percentile of the page)."""
    top = busiest_sessions(project=project, filters=filters, limit=limit)
    if not top:  # no task carries a session id: `session_id IN ()` would be no statement at all
        return []
    found = _binned(_turns(project=project, filters=filters).filter(session_id__in=top), key="session_id")
    return [{"group": s, "count": found[s].timed, "max": found[s].max_ms,
             **{f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, found[s].quantiles(PERCENTILES), strict=True)}}
            for s in top if s in found and found[s].timed]


def _turns(*, project: Project, filters: TaskFilters):
    return task_queryset(project=project, filters=filters).exclude(session_id="").filter(
        duration_ms__isnull=False)


@dataclass
class SessionCharts:
    histogram: list[tuple[float, float, int]]  # (low ms, high ms, turns) in the page's log buckets
    ecdf: list[tuple[str, list[float], list[float | None]]]  # (label, fractions, ms at each)


def session_charts(*, project: Project, filters: TaskFilters, session_id: str = "", top: int = 8) -> SessionCharts:
    """The Latency page's charts of the time per user turn: the histogram of one session's turns
    (all turns without `session_id`) and the ECDF of all turns beside that session's (or the
    `top` busiest sessions'). All turns from the task rollups' turn histogram and the raw edges
    (rollups.turn_summary), the sessions drawn binned from their turns, both in the rollups'
    bins, so the histogram and the ECDF are of the same counts."""
    turns = _turns(project=project, filters=filters)
    total = rollups.turn_summary(project=project, filters=filters)
    drawn = [session_id] if session_id else busiest_sessions(project=project, filters=filters, limit=top)
    per = _binned(turns.filter(session_id__in=drawn), key="session_id") if drawn else {}
    shown = per.get(session_id) if session_id else total
    ecdf = [("all sessions", ECDF_FRACTIONS, total.quantiles(ECDF_FRACTIONS))] if total and total.timed else []
    ecdf += [(s, ECDF_FRACTIONS, per[s].quantiles(ECDF_FRACTIONS)) for s in drawn if s in per and per[s].timed]
    return SessionCharts(histogram=bucket_rows(shown.chart_buckets()) if shown else [], ecdf=ecdf)


def _binned(turns, *, key: str = "") -> dict[str, rollups.Summary]:
    """Summaries of these tasks' durations (per `key` column, or all under ""), binned as the rollups."""
    columns = ["started_at", "status", "duration_ms"] + ([key] if key else [])
    sql, params = turns.values(*columns).query.sql_with_params()
    return rollups.binned_summaries(sql, params, key=f"t.{key}" if key else "''")
