"""Aggregations for the dashboard pages: the figures behind the overview, latency and devices
pages (totals, percentiles, series, histograms, ECDFs, budgets, top findings); the rows they
list are in selectors.py. Every selector takes the project first and the shared
TaskFilters, and builds on `task_queryset`, so a filter means the same thing on a
page, in the API and in the CSV export, and one project's rows never reach another's page.

Aggregation happens in Postgres (date_bin, width_bucket, the histogram's buckets) so a page costs
one scan of the filtered rows whatever their number, and only a few hundred numbers come back.

Every percentile these pages show is the histogram's (docs/rollups.md, "One percentile per page"):
whole hours from the latency rollups, the edges and the fresh tail from raw rows binned the same
way, and filters the rollups cannot answer (status, duration bounds, finding, device, search; task
name for steps) or overview buckets shorter than an hour binned from raw rows too. So a
percentile is one number whichever answered, within 1.93 % of percentile_cont, and the pages mark
it "≈" with that bound.

Time buckets: the overview aims at about BUCKETS_TARGET points per series: enough to see a
regression, few enough to draw a readable line per release.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.db.models import (
    Count,
    Max,
    Min,
    QuerySet,
    Sum,
)

from agentops.db import read_connection
from analysis import rollups
from analysis.dashboard import selectors
from analysis.dashboard.charts import FindingTotal, SeriesPoint, log_edges
from analysis.filters import TaskFilters, task_queryset
from analysis.models import Finding, TaskAnalysis
from ingest.models import Project, Step

BUCKETS_TARGET = 60
BUCKET_STEPS = [60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400]
PERCENTILES = (0.5, 0.9, 0.95, 0.99)
ECDF_FRACTIONS = tuple(round(i / 100, 2) for i in range(0, 101))
HARDWARE_FINDINGS = ["hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure"]


# --- shared helpers --------------------------------------------------------------------------


def bucket_seconds(*, span: timedelta) -> int:
    """The smallest bucket width giving at most BUCKETS_TARGET buckets over `span`."""
    for step in BUCKET_STEPS:
        if span.total_seconds() / step <= BUCKETS_TARGET:
            return step
    return BUCKET_STEPS[-1]


def time_span(*, project: Project, filters: TaskFilters) -> tuple[datetime, datetime] | None:
    """The time range a chart covers: the filter's, else first to last task in the project."""
    start, end = filters.since, filters.until
    if start is None or end is None:
        qs = task_queryset(project=project, filters=filters)
        bounds = qs.aggregate(first=Min("started_at"), last=Max("started_at"))
        if bounds["first"] is None:
            return None
        start = start or bounds["first"]
        end = end or bounds["last"] + timedelta(seconds=1)
    return start, end


def _percentiles(values: Sequence[float | None] | None) -> dict[str, float | None]:
    values = values or [None] * len(PERCENTILES)
    return {f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, values, strict=True)}


# --- overview --------------------------------------------------------------------------------


def overview_totals(*, project: Project, filters: TaskFilters) -> dict:
    total = rollups.Summary()
    for summary in rollups.task_summaries(project=project, filters=filters, raw=True).values():
        total.merge(summary)
    return {"count": total.count, "errors": total.errors, **_percentiles(total.quantiles(PERCENTILES))}


def overview_series(*, project: Project, filters: TaskFilters, max_releases: int = 6) -> list[SeriesPoint]:
    """Per time bucket and release: volume, errors, p50/p95/p99 of task duration, in one scan.
    Releases past the `max_releases` busiest are folded into "(other)" so the chart stays
    readable; percentiles of different releases cannot be merged, so "(other)" keeps only its
    volume and errors."""
    span = time_span(project=project, filters=filters)
    if span is None:
        return []
    step = timedelta(seconds=bucket_seconds(span=span[1] - span[0]))
    rows = _series_rows(project=project, filters=filters, seconds=int(step.total_seconds()))
    volume: dict[str, int] = defaultdict(int)
    for r in rows:
        volume[r["release"]] += r["count"]
    keep = set(sorted(volume, key=lambda rel: -volume[rel])[:max_releases])
    points: list[SeriesPoint] = []
    other: dict[str, list[int]] = {}
    for r in rows:
        start = r["bucket"].isoformat()
        if r["release"] in keep:
            p50, p95, p99 = r["pcts"] or (None, None, None)
            points.append(SeriesPoint(start, (r["bucket"] + step).isoformat(), r["release"], r["count"],
                                      r["errors"], p50, p95, p99))
        else:
            totals = other.setdefault(start, [0, 0, (r["bucket"] + step).isoformat()])
            totals[0] += r["count"]
            totals[1] += r["errors"]
    points += [SeriesPoint(start, end, "(other)", n, errors, None, None, None)
               for start, (n, errors, end) in other.items()]
    return points


def _series_rows(*, project: Project, filters: TaskFilters, seconds: int) -> list[dict]:
    """(bucket, release, count, errors, [p50, p95, p99]) rows: from the rollups when the bucket is
    a whole number of hours and the filters allow, else from the raw rows binned the same way."""
    summaries = rollups.task_summaries(project=project, filters=filters, group="release", bucket_seconds=seconds,
                                       raw=True)
    return [{"bucket": bucket, "release": release, "count": s.count, "errors": s.errors,
             "pcts": s.quantiles((0.5, 0.95, 0.99))}
            for (bucket, release), s in sorted(summaries.items())]


def top_findings(*, project: Project, filters: TaskFilters, limit: int = 10) -> list[FindingTotal]:
    """Finding kinds by total wasted time; low-confidence findings count in no total."""
    rows = (selectors.filtered_findings(project=project, filters=filters).counted().values("kind")
            .annotate(n=Count("pk"), tasks=Count("task", distinct=True), wasted=Sum("wasted_ms"))
            .order_by("-wasted")[:limit])
    return [FindingTotal(r["kind"], r["n"], r["tasks"], r["wasted"] or 0.0) for r in rows]


def budget_by_release(*, project: Project, filters: TaskFilters, limit: int = 8) -> list[tuple[str, dict[str, float]]]:
    """Mean ms per budget category per task, by release (the busiest `limit` releases)."""
    found = rollups.budget_sums(project=project, filters=filters)
    if found is not None:
        busiest = sorted(found, key=lambda r: -found[r][0])[:limit]
        return sorted((r, {k: round(v / found[r][0], 3) for k, v in found[r][1].items()})
                      for r in busiest if found[r][1])
    tasks = task_queryset(project=project, filters=filters)
    analyses = TaskAnalysis.objects.filter(project=project, task__in=tasks.values("pk"))
    sql, params = analyses.values("task_id", "project_id", "budget").query.sql_with_params()
    with read_connection().cursor() as cur:
        cur.execute(
            f"WITH a AS ({sql}),"
            f" per AS (SELECT t.release, count(*) AS n FROM a JOIN ingest_task t ON t.id = a.task_id AND t.project_id = a.project_id"
            f"         WHERE a.budget <> '{{}}'::jsonb GROUP BY t.release ORDER BY n DESC LIMIT {int(limit)})"
            f" SELECT t.release, b.key, sum((b.value)::float8) / per.n"
            f" FROM a JOIN ingest_task t ON t.id = a.task_id AND t.project_id = a.project_id JOIN per ON per.release = t.release,"
            f" jsonb_each(CASE WHEN jsonb_typeof(a.budget) = 'object' THEN a.budget ELSE '{{}}'::jsonb END) b"
            f" WHERE jsonb_typeof(b.value) = 'number'"
            f" GROUP BY t.release, b.key, per.n ORDER BY t.release", params)
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for release, key, mean in cur.fetchall():
            out[release][key] = round(mean, 3)
    return sorted(out.items())


# --- the culprits: who is slow, what holds the critical path, what got worse -------------------

CRITICAL_PATH_TASKS = 2000  # the newest analysed tasks whose critical paths are read
REGRESSION_MIN = 20         # calls or tasks on each side before a p95 change is named
REGRESSION_PCT = 10.0       # the release comparison's default threshold


def previous_period(filters: TaskFilters, *, now: datetime | None = None) -> TaskFilters | None:
    """The same filters over the period of the same length just before theirs, or None when they
    have no start (all time has no period before it)."""
    if filters.since is None:
        return None
    end = filters.until or now or datetime.now(tz=UTC)
    return replace(filters, since=filters.since - (end - filters.since), until=filters.since)


def _change_pct(now: float | None, before: float | None) -> float | None:
    return None if now is None or not before else round((now - before) / before * 100, 1)


def agent_summaries(*, project: Project, filters: TaskFilters) -> tuple[dict, dict]:
    """Task summaries per agent (task name) in range and in the period before it ({} for all time):
    two reads of the task rollups by name, which slowest_agents and regressions share."""
    now = rollups.task_summaries(project=project, filters=filters, group="name", raw=True)
    earlier = previous_period(filters)
    before = (rollups.task_summaries(project=project, filters=earlier, group="name", raw=True)
              if earlier is not None else {})
    return {k[1]: v for k, v in now.items()}, {k[1]: v for k, v in before.items()}


def slowest_agents(*, project: Project, filters: TaskFilters, limit: int = 5,
                   summaries: tuple[dict, dict] | None = None) -> list[dict]:
    """The agents (task names) with the highest p95 in range, each with its tasks, its p95 in the
    previous period of the same length and the change (`summaries`: agent_summaries, when the
    caller has them)."""
    now, before = summaries or agent_summaries(project=project, filters=filters)
    rows = []
    for name, s in now.items():
        if not s.timed:
            continue
        (p95,) = s.quantiles((0.95,))
        prior = before.get(name)
        p95_before = prior.quantiles((0.95,))[0] if prior is not None and prior.timed else None
        rows.append({"name": name, "tasks": s.timed, "p95": p95, "p95_before": p95_before,
                     "change_pct": _change_pct(p95, p95_before)})
    return sorted(rows, key=lambda r: (-r["p95"], r["name"]))[:limit]


def critical_path_time(*, project: Project, filters: TaskFilters, tasks: int = CRITICAL_PATH_TASKS,
                       limit: int = 5) -> dict:
    """The tools, models and devices holding the most critical-path time (the summed durations of
    the steps on each task's critical path, TaskAnalysis.critical_path) over the newest `tasks`
    analysed tasks of the filters: {"tasks": n, "total_ms": …, "tool"|"model"|"device": [{name, ms,
    share, tasks}]}. The paths are looked up task by task through the (task, step_id) index, into
    a CTE that the grouping sets then read (Citus groups by GROUPING SETS only in a statement it
    runs on one worker, and the paths are rows of a few hundred tasks). Each table names the
    project as a value, the task's analysis too: Citus does not see the project through the
    subquery `t`, and would refuse the join (a task's analysis is distributed since analysis 0016)."""
    qs = (task_queryset(project=project, filters=filters).filter(analysis__isnull=False)
          .order_by("-started_at").values("id", "project_id")[:tasks])
    sql, params = qs.query.sql_with_params()
    with read_connection().cursor() as cur:
        cur.execute(
            f"WITH s AS MATERIALIZED (SELECT x.task_id, x.duration_ms, x.tool_name, x.model, x.device"
            f" FROM ({sql}) t JOIN analysis_taskanalysis a ON a.task_id = t.id AND a.project_id = %s"
            f" CROSS JOIN LATERAL (SELECT x.task_id, x.duration_ms,"
            f"   CASE WHEN x.kind = 'tool' AND x.tool_name <> '' THEN x.tool_name END AS tool_name,"
            f"   CASE WHEN x.kind = 'llm' AND x.model <> '' THEN x.model END AS model,"
            f"   nullif(x.device, '') AS device"
            f"   FROM ingest_step x WHERE x.project_id = %s AND x.task_id = t.id"
            f" AND x.step_id = ANY(a.critical_path) OFFSET 0) x)"
            f" SELECT CASE WHEN GROUPING(s.tool_name) = 0 THEN 'tool' WHEN GROUPING(s.model) = 0 THEN 'model'"
            f"            WHEN GROUPING(s.device) = 0 THEN 'device' ELSE '' END,"
            f"       coalesce(s.tool_name, s.model, s.device, ''), sum(s.duration_ms), count(DISTINCT s.task_id)"
            f" FROM s GROUP BY GROUPING SETS ((s.tool_name), (s.model), (s.device), ())",
            [*params, project.pk, project.pk])
        rows = cur.fetchall()
    total = next((float(ms or 0) for dim, _, ms, _ in rows if dim == ""), 0.0)
    analysed = next((n for dim, _, _, n in rows if dim == ""), 0)
    out: dict = {"tasks": analysed, "total_ms": total, "tool": [], "model": [], "device": []}
    for dim, name, ms, n in sorted(rows, key=lambda r: -(r[2] or 0)):
        if dim and name and len(out[dim]) < limit:
            out[dim].append({"name": name, "ms": float(ms), "share_pct": round(float(ms) / total * 100, 1) if total else None,
                             "tasks": n})
    return out


def regressions(*, project: Project, filters: TaskFilters, limit: int = 5,
                summaries: tuple[dict, dict] | None = None) -> list[dict]:
    """Agents, tools and models whose p95 grew by at least REGRESSION_PCT % against the previous
    period of the same length, with at least REGRESSION_MIN tasks (agents) or calls on each side,
    the largest relative change first; [] without a period before (all time). From the rollups:
    tools and models only under the filters the step rollups serve (release, environment, range)."""
    earlier = previous_period(filters)
    if earlier is None:
        return []
    pairs: list[tuple[str, dict, dict]] = [("agent", *(summaries or agent_summaries(project=project,
                                                                                   filters=filters)))]
    for group_by in ("tool", "model"):  # only where the step rollups answer: raw steps of two periods cost seconds
        now = rollups.step_summaries(project=project, filters=filters, group_by=group_by)
        before = rollups.step_summaries(project=project, filters=earlier, group_by=group_by)
        if now is not None and before is not None:
            pairs.append((group_by, now, before))
    rows = []
    for what, now, before in pairs:
        for name, s in now.items():
            prior = before.get(name)
            if not name or prior is None or s.timed < REGRESSION_MIN or prior.timed < REGRESSION_MIN:
                continue
            (p95,), (p95_before,) = s.quantiles((0.95,)), prior.quantiles((0.95,))
            change = _change_pct(p95, p95_before)
            if change is not None and change >= REGRESSION_PCT:
                rows.append({"what": what, "name": name, "p95": p95, "p95_before": p95_before, "change_pct": change,
                             "count": s.timed, "count_before": prior.timed})
    return sorted(rows, key=lambda r: (-r["change_pct"], r["what"], r["name"]))[:limit]


# --- latency ---------------------------------------------------------------------------------


def _step_queryset(*, project: Project, filters: TaskFilters) -> QuerySet[Step]:
    tasks = task_queryset(project=project, filters=filters)
    return Step.objects.filter(project=project, task__in=tasks.values("pk"))


def _group_queryset(*, project: Project, filters: TaskFilters, group_by: str, group: str = ""):
    """(queryset, column) of the durations a latency chart shows: tasks, or steps of a group."""
    if group_by == "task":
        return task_queryset(project=project, filters=filters).filter(duration_ms__isnull=False), None
    column = rollups.STEP_GROUPS[group_by]
    qs = _step_queryset(project=project, filters=filters).exclude(**{column: ""})
    if group_by == "tool":
        qs = qs.filter(kind="tool")
    if group:
        qs = qs.filter(**{column: group})
    return qs, column


def _summaries(*, project: Project, filters: TaskFilters, group_by: str, group: str = "",
               groups: Sequence[str] | None = None, raw: bool = True) -> dict[str, rollups.Summary] | None:
    """Summaries per group ("" for tasks): the rollups, and raw rows binned the same way where they
    cannot answer (without `raw`: None then)."""
    if group_by == "task":
        found = rollups.task_summaries(project=project, filters=filters, raw=raw)
        if found is None:
            return None
        total = rollups.Summary()
        for summary in found.values():
            total.merge(summary)
        return {"": total}
    return rollups.step_summaries(project=project, filters=filters, group_by=group_by, group=group, groups=groups,
                                  raw=raw)


def duration_histogram(*, project: Project, filters: TaskFilters, group_by: str = "task",
                       group: str = "") -> list[tuple[float, float, int]]:
    """Counts per log-spaced bucket: (low ms inclusive, high ms exclusive, count)."""
    edges = log_edges()
    summaries = _summaries(project=project, filters=filters, group_by=group_by, group=group, raw=False)
    if summaries is not None:
        merged = rollups.Summary()
        for summary in summaries.values():
            merged.merge(summary)
        counts = dict(sorted(merged.chart_buckets().items()))
    else:
        qs, _ = _group_queryset(project=project, filters=filters, group_by=group_by, group=group)
        sql, params = qs.values("duration_ms").query.sql_with_params()
        with read_connection().cursor() as cur:
            cur.execute(f"SELECT width_bucket(d.duration_ms, %s::float8[]) AS b, count(*)"
                        f" FROM ({sql}) d GROUP BY b ORDER BY b", [edges, *params])
            counts = dict(cur.fetchall())
    return bucket_rows(counts)


def bucket_rows(counts: dict[int, int]) -> list[tuple[float, float, int]]:
    """Counts numbered like width_bucket over log_edges() (a Summary's chart_buckets, or SQL's)
    as the histogram's rows: (low ms inclusive, high ms exclusive, count)."""
    edges = log_edges()
    out = []
    for b, n in sorted(counts.items()):
        low = edges[b - 1] if b >= 1 else 0.0
        high = edges[b] if b < len(edges) else edges[-1] * 10
        out.append((low, high, n))
    return out


def duration_percentiles(*, project: Project, filters: TaskFilters, group_by: str = "task",
                         limit: int = 30) -> list[dict]:
    """count, p50/p90/p95/p99 (from the histogram: approximate) and max per group (one row for
    tasks), busiest groups first."""
    summaries = _summaries(project=project, filters=filters, group_by=group_by)
    rows = [{"group": name, "count": s.timed, "max": s.max_ms, **_percentiles(s.quantiles(PERCENTILES))}
            for name, s in summaries.items() if s.timed]
    return sorted(rows, key=lambda r: (-r["count"], r["group"]))[:limit]


def duration_quantiles(*, project: Project, filters: TaskFilters, group_by: str = "task",
                       groups: Iterable[str] = ()) -> list[tuple[str, Sequence[float], list[float | None]]]:
    """ECDF points: (label, fractions, durations at those fractions) for tasks or each group."""
    groups = list(groups)
    summaries = _summaries(project=project, filters=filters, group_by=group_by,
                           groups=None if group_by == "task" else groups)
    if group_by == "task":
        values = summaries[""].quantiles(ECDF_FRACTIONS)
        return [("tasks", ECDF_FRACTIONS, values)] if values else []
    found = {g: s.quantiles(ECDF_FRACTIONS) for g, s in summaries.items()}
    return [(g, ECDF_FRACTIONS, found[g]) for g in groups if found.get(g)]


# --- devices ---------------------------------------------------------------------------------


def device_summaries(*, project: Project, filters: TaskFilters, devices: Sequence[str]) -> dict[str, dict]:
    """{"ttft": {device: Summary}, "tpot": {…}} from the step rollups (raw steps binned where they
    cannot answer): what device_table and device_quantiles read, for a caller that wants both."""
    return {metric: rollups.step_summaries(project=project, filters=filters, group_by="device",
                                           groups=list(devices), metric=metric, raw=True)
            for metric in ("ttft", "tpot")}


def device_table(*, project: Project, filters: TaskFilters, vendor: str = "", device: str = "",
                 hardware: dict[str, int] | None = None, summaries: dict[str, dict] | None = None) -> list[dict]:
    """Per device: steps served, TTFT and TPOT percentiles, hardware findings in the range
    (`hardware`: counts per device, `summaries`: device_summaries of every device, when the caller
    has them already)."""
    devices = {d.name: d for d in selectors.project_devices(project=project)
               if (not vendor or d.vendor == vendor) and (not device or d.name == device)}
    if summaries is None:
        summaries = device_summaries(project=project, filters=filters, devices=list(devices))
    rows = _device_rows(summaries)
    if hardware is None:
        hardware = hardware_finding_counts(project=project, filters=filters)
    out = []
    for name, d in devices.items():
        r = rows.get(name, {})
        ttft = r.get("ttft") or (None, None)
        tpot_v = r.get("tpot") or (None, None)
        out.append({"device": name, "vendor": d.vendor, "hardware": d.hardware, "steps": r.get("steps", 0),
                    "ttft_p50": ttft[0], "ttft_p95": ttft[1], "tpot_p50": tpot_v[0], "tpot_p95": tpot_v[1],
                    "hardware_findings": hardware.get(name, 0)})
    return sorted(out, key=lambda r: (-r["steps"], r["device"]))


def _device_rows(found: dict[str, dict]) -> dict[str, dict]:
    """device_table's figures from device_summaries (percentiles from the histogram, within 1.93 %)."""
    return {name: {"steps": summary.count, "ttft": summary.quantiles((0.5, 0.95)),
                   "tpot": found["tpot"][name].quantiles((0.5, 0.95)) if name in found["tpot"] else None}
            for name, summary in found["ttft"].items()}


def hardware_finding_counts(*, project: Project, filters: TaskFilters) -> dict[str, int]:
    """Hardware findings per device of the step they were raised on."""
    findings = selectors.filtered_findings(project=project, filters=filters).filter(kind__in=HARDWARE_FINDINGS)
    sql, params = findings.values("task_id", "project_id", "step_ids").query.sql_with_params()
    with read_connection().cursor() as cur:
        cur.execute(f"SELECT s.device, count(*) FROM ({sql}) f JOIN ingest_step s"
                    f" ON s.task_id = f.task_id AND s.project_id = f.project_id AND s.step_id = ANY(f.step_ids)"
                    f" WHERE s.device <> '' GROUP BY s.device", params)
        return dict(cur.fetchall())


def hardware_findings(*, project: Project, filters: TaskFilters, limit: int = 50) -> list[Finding]:
    return list(selectors.filtered_findings(project=project, filters=filters).filter(kind__in=HARDWARE_FINDINGS)
                .select_related("task").order_by("-wasted_ms")[:limit])


def device_quantiles(*, project: Project, filters: TaskFilters, metric: str, devices: Sequence[str],
                     summaries: dict[str, dict] | None = None):
    """ECDF points of TTFT ("ttft") or TPOT ("tpot") per device (`summaries`: device_summaries
    covering these devices, when the caller has them)."""
    if summaries is not None:
        summaries = summaries[metric]
    else:
        summaries = rollups.step_summaries(project=project, filters=filters, group_by="device",
                                           groups=list(devices), metric=metric, raw=True)
    found = {name: s.quantiles(ECDF_FRACTIONS) for name, s in summaries.items()}
    return [(d, ECDF_FRACTIONS, found[d]) for d in devices if found.get(d)]
