"""Reading the rollups: whole hours from the rollup tables, the edges and the fresh tail from raw
rows binned the same way, so new data shows at once and a range boundary is exact to the row
(docs/rollups.md, "What reads them"). A filter the rollups have no dimension for returns None: the
caller runs its exact raw query."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.db.models import Q

from agentops.db import read_connection
from analysis.filters import TaskFilters, task_queryset
from analysis.measures import FAILED_SQL
from analysis.rollups.histograms import Summary, bin_sql
from analysis.rollups.refresh import watermark
from analysis.rollups.sql import (
    DAY,
    ORIGIN,
    STEP_GROUPS,
    STEP_HISTOGRAMS,
    TASK_DIMENSIONS,
    day_floor,
    hour_ceil,
    hour_floor,
)
from ingest.models import Project

TASK_FILTERS = {"release", "name", "environment", "since", "until"}
STEP_FILTERS = {"release", "environment", "since", "until"}




def covered_hours(*, project_id: int, filters: TaskFilters,
                  allowed: set[str]) -> tuple[datetime | None, datetime] | None:
    """[lo, hi) of whole hours the rollups answer for these filters of a project (lo None: from
    the start), or None when a filter needs raw rows, nothing was rolled up yet, or no whole hour
    fits."""
    used = {k for k, v in vars(filters).items() if v not in (None, "")}
    if not used <= allowed:
        return None
    mark = watermark(project_id=project_id)
    if mark is None:
        return None
    hi = hour_floor(mark)
    if filters.until is not None:
        hi = min(hi, hour_floor(filters.until))
    lo = hour_ceil(filters.since) if filters.since is not None else None
    if lo is not None and lo >= hi:
        return None
    return lo, hi


def sources(lo: datetime | None, hi: datetime, *, days: bool) -> list[tuple[str, datetime | None, datetime]]:
    """(table suffix, from, to) segments covering [lo, hi): whole days from the daily tables
    when `days`, the hours around them from the hourly tables."""
    if not days:
        return [("", lo, hi)]
    day_lo = None if lo is None else day_floor(lo) + (DAY if day_floor(lo) != lo else timedelta(0))
    day_hi = day_floor(hi)
    if day_lo is not None and day_lo >= day_hi:
        return [("", lo, hi)]
    out: list[tuple[str, datetime | None, datetime]] = [("_day", day_lo, day_hi)]
    if lo is not None and lo < day_lo:
        out.append(("", lo, day_lo))
    if day_hi < hi:
        out.append(("", day_hi, hi))
    return out


def _time_bucket(column: str, seconds: int | None) -> str:
    if seconds is None:
        return "NULL::timestamptz"
    return f"date_bin(INTERVAL '{int(seconds)} seconds', {column}, {ORIGIN})"


def rollup_where(*, project: Project, lo, hi, equal: dict[str, str], extra: str = "") -> tuple[str, list]:
    clauses, params = ["r.project_id = %s", "r.hour < %s"], [project.pk, hi]
    if lo is not None:
        clauses.append("r.hour >= %s")
        params.append(lo)
    for column, value in equal.items():
        if value:
            clauses.append(f"r.{column} = %s")
            params.append(value)
    if extra:
        clauses.append(extra)
    return " AND ".join(clauses), params


def _collect(out: dict, totals: Iterable[tuple], bins: Iterable[tuple]) -> None:
    """Add (key…, count, errors, sum, max, first, last) totals and (key…, bin, n) rows; a key is
    the first two columns."""
    for bucket, group, count, errors, sum_ms, max_ms, first_at, last_at in totals:
        out[(bucket, group)].add(count=count, errors=errors, sum_ms=sum_ms, max_ms=max_ms,
                                 first_at=first_at, last_at=last_at)
    for bucket, group, index, n in bins:
        if index is not None:
            out[(bucket, group)].bins[index] += n


def _task_dimensions(filters: TaskFilters) -> dict[str, str]:
    """The filters' value of each task rollup dimension ("" where the filter is not set)."""
    return {d: getattr(filters, d) for d in TASK_DIMENSIONS}


def edge(lo: datetime | None, hi: datetime | None) -> Q:
    """Tasks outside the rolled-up hours: the fresh tail and the partial first hour (every task
    when nothing is rolled up for these filters: `hi` None)."""
    if hi is None:
        return Q()
    return Q(started_at__gte=hi) | Q(started_at__lt=lo) if lo is not None else Q(started_at__gte=hi)


def _fetch(sql: str, params) -> list[tuple]:
    with read_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def task_summaries(*, project: Project, filters: TaskFilters, group: str | None = None,
                   bucket_seconds: int | None = None,
                   slices: tuple[dict[str, tuple[datetime, datetime]], int] | None = None,
                   raw: bool = False) -> dict[tuple[object, str], Summary] | None:
    """Task figures keyed by (time bucket, value of `group` or ""), or None when these filters
    need the raw query; with `raw`, the rows the rollups cannot answer for (a filter they have no
    dimension for, buckets under an hour, nothing rolled up yet) are binned from raw rows the same
    way instead, so a percentile is the same number whichever answered (the dashboards' rule,
    docs/rollups.md "One percentile per page"). `group`: a task rollup dimension (e.g. "release"). The time bucket is
    None, or the start of a `bucket_seconds` bucket (a whole number of hours), or with
    `slices` = ({group value: (lo, hi)}, n) the number (1..n) of the equal slice of that group's
    own [lo, hi) the row falls in (hour granularity: a rolled-up hour counts whole in the slice
    of its first task's start)."""
    if slices is not None and (group not in TASK_DIMENSIONS or not slices[0]):
        return None
    span = (None if bucket_seconds is not None and bucket_seconds % 3600
            else covered_hours(project_id=project.pk, filters=filters, allowed=TASK_FILTERS))
    if span is None and not raw:
        return None
    lo, hi = span or (None, None)
    group_sql = f"r.{group}" if group in TASK_DIMENSIONS else "''"
    equal = _task_dimensions(filters)
    out: dict[tuple, Summary] = defaultdict(Summary)
    join, join_params = "", []
    if slices is not None:
        spans, n = slices
        join = (" JOIN (VALUES " + ", ".join(["(%s, %s::float8, %s::float8)"] * len(spans))
                + ") sl(g, lo, hi) ON sl.g = {g}")
        join_params = [v for g, (a, b) in spans.items() for v in (g, a.timestamp(), b.timestamp() + 0.001)]

        def bucket(column: str) -> str:
            return f"width_bucket(extract(epoch FROM {column}), sl.lo, sl.hi, {int(n)})"
    else:
        def bucket(column: str) -> str:
            return _time_bucket(column, bucket_seconds)
    # a rolled-up row falls in the slice of its first task's start (never before the group's lo)
    tb = bucket("r.first_at" if slices is not None else "r.hour")
    days = slices is None and (bucket_seconds is None or bucket_seconds % DAY.total_seconds() == 0)
    for suffix, seg_lo, seg_hi in sources(lo, hi, days=days) if hi is not None else ():
        where, params = rollup_where(project=project, lo=seg_lo, hi=seg_hi, equal=equal)
        rollup_from = f"analysis_task_rollup{suffix} r" + join.format(g=f"r.{group}")
        totals = _fetch(f"SELECT {tb}, {group_sql}, sum(tasks), sum(errors), sum(sum_ms), max(max_ms),"
                        f" min(first_at), max(last_at) FROM {rollup_from} WHERE {where} GROUP BY 1, 2",
                        join_params + params)
        bins = _fetch(f"SELECT {tb}, {group_sql}, u.b, sum(u.n) FROM {rollup_from},"
                      f" unnest(r.bins, r.counts) AS u(b, n) WHERE {where} GROUP BY 1, 2, 3", join_params + params)
        _collect(out, totals, bins)
    qs = task_queryset(project=project, filters=filters).filter(edge(lo, hi))
    columns = ["started_at", "status", "duration_ms"] + ([group] if group in TASK_DIMENSIONS else [])
    sql, raw_params = qs.values(*columns).query.sql_with_params()
    group_raw = f"t.{group}" if group in TASK_DIMENSIONS else "''"
    rows = _fetch(f"SELECT {bucket('t.started_at')}, {group_raw}, {bin_sql('t.duration_ms')},"
                  f" count(*), count(*) FILTER (WHERE t.status {FAILED_SQL}), coalesce(sum(t.duration_ms), 0),"
                  f" max(t.duration_ms), min(t.started_at), max(t.started_at)"
                  f" FROM ({sql}) t{join.format(g=group_raw)} GROUP BY 1, 2, 3", list(raw_params) + join_params)
    _collect(out, [(r[0], r[1], *r[3:]) for r in rows], [(r[0], r[1], r[2], r[3]) for r in rows])
    return dict(out)


def turn_summary(*, project: Project, filters: TaskFilters) -> Summary:
    """The time per user turn (the timed tasks with a session) over these filters: whole hours from
    the task rollups' turn histogram, the edges binned from raw rows the same way (every turn from
    raw rows when a filter needs them or nothing is rolled up), so it is the same number whichever
    answered. It holds the count, sum, longest and histogram of the timed turns (the rollups keep
    no errors or time bounds of turns: those stay empty)."""
    span = covered_hours(project_id=project.pk, filters=filters, allowed=TASK_FILTERS)
    lo, hi = span or (None, None)
    equal = _task_dimensions(filters)
    out: dict[tuple, Summary] = defaultdict(Summary)
    for suffix, seg_lo, seg_hi in sources(lo, hi, days=True) if hi is not None else ():
        where, params = rollup_where(project=project, lo=seg_lo, hi=seg_hi, equal=equal, extra="r.turns > 0")
        totals = _fetch(f"SELECT NULL, '', sum(turns), 0, sum(turn_sum_ms), max(turn_max_ms), NULL, NULL"
                        f" FROM analysis_task_rollup{suffix} r WHERE {where}", params)
        bins = _fetch(f"SELECT NULL, '', u.b, sum(u.n) FROM analysis_task_rollup{suffix} r,"
                      f" unnest(r.turn_bins, r.turn_counts) AS u(b, n) WHERE {where} GROUP BY 3", params)
        _collect(out, totals, bins)
    turns = (task_queryset(project=project, filters=filters).filter(edge(lo, hi))
             .exclude(session_id="").filter(duration_ms__isnull=False))
    sql, raw_params = turns.values("started_at", "status", "duration_ms").query.sql_with_params()
    summary = out[(None, "")]
    for part in binned_summaries(sql, raw_params).values():
        summary.add(count=part.count, sum_ms=part.sum_ms, max_ms=part.max_ms)
        summary.bins += part.bins
    return summary


def binned_summaries(rows_sql: str, params: Sequence, *, key: str = "''") -> dict[str, Summary]:
    """Summaries of rows no rollup holds (the tasks of sessions, say), per value of the SQL
    expression `key` over them (alias t: started_at, status, duration_ms), binned as the rollups
    bin: their percentiles are the dashboards' one kind, equal to a rollup's over the same rows."""
    out: dict[tuple, Summary] = defaultdict(Summary)
    rows = _fetch(f"SELECT NULL, {key}, {bin_sql('t.duration_ms')}, count(*),"
                  f" count(*) FILTER (WHERE t.status {FAILED_SQL}), coalesce(sum(t.duration_ms), 0),"
                  f" max(t.duration_ms), min(t.started_at), max(t.started_at) FROM ({rows_sql}) t GROUP BY 1, 2, 3",
                  list(params))
    _collect(out, [(r[0], r[1], *r[3:]) for r in rows], [(r[0], r[1], r[2], r[3]) for r in rows])
    return {k[1]: summary for k, summary in out.items()}


def step_summaries(*, project: Project, filters: TaskFilters, group_by: str, group: str = "",
                   groups: Sequence[str] | None = None, metric: str = "duration",
                   raw: bool = False) -> dict[str, Summary] | None:
    """Step figures per value of the `group_by` column (kind, name, tool, model, device) for the
    steps of the filtered tasks, or None when these filters need the raw query. Steps with an
    empty value are left out, like the Latency page does; "tool" means steps of kind tool.
    `group` narrows to one value, `groups` to several. `metric`: which histogram the summaries
    hold, "duration", "ttft" (time to first token) or "tpot" (time per output token, LLM steps
    with a first token and more than one output token); counts are of all steps either way, and
    the maximum is only known for durations. `raw`: as for task_summaries, bin the steps the
    rollups cannot answer for rather than return None."""
    column = STEP_GROUPS.get(group_by)
    prefix = {"duration": "", "ttft": "ttft_", "tpot": "tpot_"}.get(metric)
    if column is None or prefix is None:
        return None
    span = covered_hours(project_id=project.pk, filters=filters, allowed=STEP_FILTERS)
    if span is None and not raw:
        return None
    lo, hi = span or (None, None)

    def narrowed(alias: str) -> tuple[str, list]:
        """The group conditions on rollup rows or steps (same column names in both)."""
        clauses = [f"{alias}.{column} <> ''"] + ([f"{alias}.kind = 'tool'"] if group_by == "tool" else [])
        params: list = []
        if group:
            clauses.append(f"{alias}.{column} = %s")
            params.append(group)
        if groups is not None:
            clauses.append(f"{alias}.{column} = ANY(%s)")
            params.append(list(groups))
        return " AND ".join(clauses), params

    extra, extra_params = narrowed("r")
    max_sql = "max(max_ms)" if not prefix else "NULL::float8"
    out: dict[tuple, Summary] = defaultdict(Summary)
    for suffix, seg_lo, seg_hi in sources(lo, hi, days=True) if hi is not None else ():
        where, params = rollup_where(project=project, lo=seg_lo, hi=seg_hi,
                                      equal={"release": filters.release, "environment": filters.environment},
                                      extra=extra)
        params += extra_params
        totals = _fetch(f"SELECT NULL, r.{column}, sum(steps), sum(errors), sum(sum_ms), {max_sql}, NULL, NULL"
                        f" FROM analysis_step_rollup{suffix} r WHERE {where} GROUP BY 2", params)
        bins = _fetch(f"SELECT NULL, r.{column}, u.b, sum(u.n) FROM analysis_step_rollup{suffix} r,"
                      f" unnest(r.{prefix}bins, r.{prefix}counts) AS u(b, n) WHERE {where} GROUP BY 2, 3", params)
        _collect(out, totals, bins)
    # The steps of the edge tasks, looked up task by task (LATERAL … OFFSET 0): Postgres misjudges
    # how few tasks an edge holds (an OR of two time ranges: 29,559 estimated, 228 real) and would
    # otherwise hash-join a scan of every step of every week (1.1 s at 10M steps instead of ms).
    tasks_sql, task_params = (task_queryset(project=project, filters=filters).filter(edge(lo, hi))
                              .values("pk").query.sql_with_params())
    step_where, step_params = narrowed("x")
    value = STEP_HISTOGRAMS[prefix]
    rows = _fetch(f"SELECT s.{column}, {bin_sql(f'({value})')}, count(*),"
                  f" count(*) FILTER (WHERE s.status {FAILED_SQL}), sum(s.duration_ms),"
                  f" {'max(s.duration_ms)' if not prefix else 'NULL::float8'}"
                  f" FROM ({tasks_sql}) t CROSS JOIN LATERAL"
                  f" (SELECT x.{column}, x.status, x.duration_ms, x.ttft_ms, x.output_tokens FROM ingest_step x"
                  f"  WHERE x.project_id = %s AND x.task_id = t.pk AND {step_where} OFFSET 0) s GROUP BY 1, 2",
                  [*task_params, project.pk, *step_params])
    _collect(out, [(None, r[0], *r[2:], None, None) for r in rows], [(None, r[0], r[1], r[2]) for r in rows])
    return {key[1]: summary for key, summary in out.items()}


def budget_sums(*, project: Project, filters: TaskFilters) -> dict[str, tuple[int, dict[str, float]]] | None:
    """Per release: (analysed tasks, {budget category: total ms}) for the filtered tasks, or None
    when the filters need the raw query. Whole hours from the rollups, edges from raw rows."""
    from analysis.models import TaskAnalysis

    span = covered_hours(project_id=project.pk, filters=filters, allowed=TASK_FILTERS)
    if span is None:
        return None
    lo, hi = span
    counts: dict[str, int] = defaultdict(int)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for suffix, seg_lo, seg_hi in sources(lo, hi, days=True):
        where, params = rollup_where(project=project, lo=seg_lo, hi=seg_hi,
                                      equal=_task_dimensions(filters))
        for release, n in _fetch(f"SELECT r.release, sum(r.analysed) FROM analysis_task_rollup{suffix} r"
                                 f" WHERE {where} GROUP BY 1", params):
            counts[release] += int(n)
        for release, key, total in _fetch(
                f"SELECT r.release, e.key, sum(e.value::float8) FROM analysis_task_rollup{suffix} r,"
                f" jsonb_each_text(r.budget_ms) e WHERE {where} GROUP BY 1, 2", params):
            sums[release][key] += total
    tasks = task_queryset(project=project, filters=filters).filter(edge(lo, hi))
    sql, raw_params = (TaskAnalysis.objects.filter(project=project, task__in=tasks.values("pk"))
                       .exclude(budget={}).values("task__release", "budget").query.sql_with_params())
    for release, n in _fetch(f"SELECT q.task__release, count(*) FROM ({sql}) q GROUP BY 1", raw_params):
        counts[release] += n
    for release, key, total in _fetch(
            f"SELECT q.task__release, e.key, sum((e.value)::float8) FROM ({sql}) q,"
            f" jsonb_each(CASE WHEN jsonb_typeof(q.budget) = 'object' THEN q.budget ELSE '{{}}'::jsonb END) e"
            f" WHERE jsonb_typeof(e.value) = 'number' GROUP BY 1, 2", raw_params):
        sums[release][key] += total
    return {release: (n, dict(sums[release])) for release, n in counts.items() if n}
