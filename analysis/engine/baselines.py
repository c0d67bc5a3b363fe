"""Baselines: robust statistics per (project, step kind, key[, device]) and each device's
normal telemetry, over a trailing window, computed in SQL with percentile_cont (analysis.measures).

- Step baselines: key = model for LLM steps, tool name for tools, the step name otherwise.
  LLM steps get one baseline per (model, device) and one per model across devices (the
  fallback while a device has little history). Stored: count, median, MAD, p90, p99 of the
  duration, and for LLM steps median/MAD of TTFT, of time per output token and of input
  tokens, MADs of the logs for the log-scale z, and — for LLM steps without TTFT — a resistant
  line duration ≈ a + b × output tokens (b through the medians of the lower and upper thirds of
  the tokens' range, a the median residual) with the MAD of the log residuals (`stats`). Only successful steps count: a failure's duration is not "normal".
- Device normals (`kind="device"`, key = device): median/MAD of each telemetry metric and
  the median sampling interval.
- The window is the WINDOW_DAYS before the key's newest step (not before "now"), so
  back-filled or replayed data gets the same baselines as live data. Medians/MADs need at
  least half the window's steps to be abnormal before they move: injected faults and
  incidents do not poison them.
- Refresh is incremental: `baselines_refresh` recomputes only keys whose tasks received
  events since the last refresh (Task.last_event_at, indexed), over their window. A task
  analysed before any refresh ran computes its missing keys on demand (`baselines_ensure`).
- As of a moment (`until`): the same statistics over only the steps that had ended and the
  samples taken by then, for a replay that analyses each task with the baselines the product
  could have had when the task ended (`baselines_as_of`; evaluate_detection's time order).
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from analysis import jobs
from analysis.engine.verdicts import MIN_EXCESS_RATIO
from analysis.measures import baseline_key_sql, percentile_cont_sql, prefill_tokens_sql, tpot_sql
from analysis.models import Baseline
from ingest.models import Project, ResourceSample, Step

log = logging.getLogger("agentops.analysis")

WINDOW_DAYS = 7
DEVICE = "device"

_STEP_KEY = baseline_key_sql("s")


def _ln(expr: str, floor: str) -> str:
    """ln of a value floored at `floor`, NULL where the value is missing: greatest() skips NULLs,
    so ln(greatest(NULL, 0.001)) would count every step without a TTFT as a 1 µs one and widen
    the MADs of a model with mixed streamed and non-streamed calls without bound."""
    return f"ln(CASE WHEN ({expr}) IS NULL THEN NULL ELSE greatest({expr}, {floor}) END)"

def _resistant_line(name: str, x: str, y: str) -> str:
    """CTEs `<name>_slope` (b) and `<name>_intercept` (a) of LLM steps: y ≈ a + b × x, a resistant
    line (Tukey's, with its thirds taken over the range of x between its 2nd and 98th
    percentiles, not over the count of calls; flat, b = 0, when x hardly varies: then a call's y
    is not told by its x). The slope joins the medians of the lower and upper thirds, the
    intercept is the median residual. One model's calls are usually a mix: many short
    tool-calling turns, fewer long answers (or long prompts); a line through the overall medians,
    or thirds by count, lands inside or between those clusters once incidents slow some calls (a
    slow tool turn then read as usual, or every one as twice its usual). Two are kept: duration
    over output tokens (`l`, for calls without TTFT) and TTFT over the prompt tokens the server
    had to prefill (`f`: its input tokens less those read from its prompt cache)."""
    lower, upper = f"w.{x} <= t.x_lo + (t.x_hi - t.x_lo) / 3", f"w.{x} >= t.x_hi - (t.x_hi - t.x_lo) / 3"
    return f"""{name}_spread AS (
    SELECT kind, key, device, {percentile_cont_sql(x, 0.02)} AS x_lo, {percentile_cont_sql(x, 0.98)} AS x_hi
    FROM windowed WHERE kind = 'llm' AND {x} IS NOT NULL AND {y} IS NOT NULL
    GROUP BY kind, key, device
), {name}_thirds AS (
    SELECT w.kind, w.key, w.device,
           {percentile_cont_sql(f"w.{x}", 0.5)} FILTER (WHERE {lower}) AS xl,
           {percentile_cont_sql(f"w.{y}", 0.5)} FILTER (WHERE {lower}) AS yl,
           {percentile_cont_sql(f"w.{x}", 0.5)} FILTER (WHERE {upper}) AS xr,
           {percentile_cont_sql(f"w.{y}", 0.5)} FILTER (WHERE {upper}) AS yr
    FROM windowed w JOIN {name}_spread t USING (kind, key, device)
    WHERE w.{x} IS NOT NULL AND w.{y} IS NOT NULL
    GROUP BY w.kind, w.key, w.device
), {name}_slope AS (
    SELECT kind, key, device, CASE WHEN xr > xl THEN greatest((yr - yl) / (xr - xl), 0) ELSE 0 END AS b
    FROM {name}_thirds
), {name}_intercept AS (
    SELECT w.kind, w.key, w.device, {percentile_cont_sql(f"w.{y} - sl.b * w.{x}", 0.5)} AS a
    FROM windowed w JOIN {name}_slope sl USING (kind, key, device)
    WHERE w.{x} IS NOT NULL AND w.{y} IS NOT NULL
    GROUP BY w.kind, w.key, w.device
)"""


_STEP_SQL = f"""
WITH base AS (
    SELECT s.kind, {_STEP_KEY} AS key, s.device, s.started_at, s.duration_ms, s.ttft_ms,
           s.input_tokens::float8 AS input_tokens, s.output_tokens::float8 AS output_tokens,
           {prefill_tokens_sql("s")} AS prefill_tokens,
           {tpot_sql("s")} AS tpot
    FROM ingest_step s
    WHERE s.project_id = %(project)s AND s.status = 'ok' {{filter}}
), expanded AS (
    SELECT kind, key, device, started_at, duration_ms, ttft_ms, input_tokens, output_tokens, prefill_tokens, tpot
    FROM base WHERE kind = 'llm' AND device <> ''
    UNION ALL
    SELECT kind, key, '' AS device, started_at, duration_ms, ttft_ms, input_tokens, output_tokens, prefill_tokens, tpot
    FROM base
), windowed AS (
    SELECT * FROM (
        SELECT e.*, max(started_at) OVER (PARTITION BY kind, key, device) AS latest FROM expanded e
    ) x WHERE started_at > latest - make_interval(days => %(days)s)
), med AS (
    SELECT kind, key, device, count(*) AS n, min(started_at) AS w_start, max(started_at) AS w_end,
           {percentile_cont_sql("duration_ms", 0.5)} AS d_med,
           {percentile_cont_sql("duration_ms", 0.9)} AS d_p90,
           {percentile_cont_sql("duration_ms", 0.99)} AS d_p99,
           {percentile_cont_sql("ttft_ms", 0.5)} AS t_med,
           {percentile_cont_sql("tpot", 0.5)} AS p_med,
           {percentile_cont_sql("input_tokens", 0.5)} AS i_med,
           {percentile_cont_sql("output_tokens", 0.5)} AS o_med
    FROM windowed GROUP BY kind, key, device
), {_resistant_line("l", "output_tokens", "duration_ms")}, {_resistant_line("f", "prefill_tokens", "ttft_ms")}, line AS (
    SELECT m.*, l_slope.b AS l_b, l_intercept.a AS l_a, f_slope.b AS f_b, f_intercept.a AS f_a
    FROM med m LEFT JOIN l_slope USING (kind, key, device) LEFT JOIN l_intercept USING (kind, key, device)
    LEFT JOIN f_slope USING (kind, key, device) LEFT JOIN f_intercept USING (kind, key, device)
), mad AS (
    -- Grouped by the key alone and joined to the medians afterwards: grouping the joined rows
    -- by every median column sorted each step's row by fourteen keys.
    SELECT w.kind, w.key, w.device,
       {percentile_cont_sql(f"abs({_ln('w.duration_ms', '0.001')} - {_ln('m.l_a + m.l_b * w.output_tokens', '1')})",
                            0.5)} AS l_lmad,
       {percentile_cont_sql(f"abs({_ln('w.ttft_ms', '0.001')} - {_ln('m.f_a + m.f_b * w.prefill_tokens', '1')})",
                            0.5)} AS f_lmad,
       {percentile_cont_sql("abs(w.duration_ms - m.d_med)", 0.5)} AS d_mad,
       {percentile_cont_sql("abs(w.ttft_ms - m.t_med)", 0.5)} AS t_mad,
       {percentile_cont_sql("abs(w.tpot - m.p_med)", 0.5)} AS p_mad,
       {percentile_cont_sql("abs(w.input_tokens - m.i_med)", 0.5)} AS i_mad,
       {percentile_cont_sql(f"abs({_ln('w.duration_ms', '0.001')} - {_ln('m.d_med', '0.001')})", 0.5)} AS d_lmad,
       {percentile_cont_sql(f"abs({_ln('w.ttft_ms', '0.001')} - {_ln('m.t_med', '0.001')})", 0.5)} AS t_lmad,
       {percentile_cont_sql(f"abs({_ln('w.tpot', '0.001')} - {_ln('m.p_med', '0.001')})", 0.5)} AS p_lmad,
       {percentile_cont_sql(f"abs({_ln('w.input_tokens', '1')} - {_ln('m.i_med', '1')})", 0.5)} AS i_lmad
    FROM windowed w JOIN line m USING (kind, key, device)
    GROUP BY w.kind, w.key, w.device
)
SELECT m.kind, m.key, m.device, m.n, m.w_start, m.w_end, m.d_med, m.d_p90, m.d_p99, m.l_a, m.l_b, d.l_lmad,
       m.f_a, m.f_b, d.f_lmad,
       d.d_mad, m.t_med, d.t_mad, m.p_med, d.p_mad, m.i_med, d.i_mad, d.d_lmad, d.t_lmad, d.p_lmad, d.i_lmad
FROM line m JOIN mad d USING (kind, key, device)
"""

# Calls by what they were asked and by release: a tool whose time depends on what it is asked
# (the whole test suite against one file, a year's orders against a day's) has calls that are
# bigger jobs, not slow ones; a release that made a tool slower (a regression the release
# comparison shows) makes every call of it slower, none of them slow on its own. Arguments that
# recur in ARG_MIN_RUNS runs or more, and releases, whose calls usually take longer than the key's
# (their median at least 1 + MIN_EXCESS_RATIO times the key's), are kept with the key's baseline,
# the ARG_GROUPS with most runs, for slow_step to judge such a call against its own kind
# (docs/analysis.md, "Slow for its arguments or its release"). Not LLM calls: their expectation
# follows their tokens and their device (verdicts).
ARG_MIN_RUNS = 3
ARG_GROUPS = 20

_GROUPS_SQL = f"""
WITH base AS (
    SELECT s.kind, {_STEP_KEY} AS key, s.task_id, {{value}} AS value, s.started_at, s.duration_ms
    FROM ingest_step s {{join}}
    WHERE s.project_id = %(project)s AND s.status = 'ok' AND {{which}} {{{{filter}}}}
), windowed AS (
    SELECT * FROM (
        SELECT b.*, max(started_at) OVER (PARTITION BY kind, key) AS latest FROM base b
    ) x WHERE started_at > latest - make_interval(days => %(days)s)
), grouped AS (
    SELECT kind, key, value, count(DISTINCT task_id) AS runs,
           {percentile_cont_sql("duration_ms", 0.5)} AS med
    FROM windowed GROUP BY kind, key, value HAVING count(DISTINCT task_id) >= %(min_runs)s
)
SELECT g.kind, g.key, g.value::text AS value, g.runs, g.med,
       {percentile_cont_sql(f"abs({_ln('w.duration_ms', '0.001')} - {_ln('g.med', '0.001')})", 0.5)} AS lmad
FROM grouped g JOIN windowed w ON w.kind = g.kind AND w.key = g.key AND w.value = g.value
GROUP BY g.kind, g.key, g.value, g.runs, g.med
"""
# stats key → (statement, how a group's value is read back).
_GROUPS = {
    "args": (_GROUPS_SQL.format(value="s.tool_args", join="", which="s.kind = 'tool' AND s.tool_args IS NOT NULL"),
             json.loads),
    # The join equates the project too: one project's statement stays on one shard (Citus).
    "releases": (_GROUPS_SQL.format(value="t.release",
                                    join="JOIN ingest_task t ON t.id = s.task_id AND t.project_id = s.project_id",
                                    which="s.kind <> 'llm' AND t.release <> ''"), str),
}

_METRICS = ("utilization", "queue_depth", "batch_size", "power_w", "temperature_c", "mem_bw_util",
            "kv_cache_hit_rate", "tokens_per_s", "throttled", "sm_clock_mhz", "sm_clock_max_mhz",
            "clock_reasons", "kv_cache_usage")


def sample_metric_sql(metric: str, alias: str = "r") -> str:
    """One metric of a sample in SQL: its column, or the number kept in its `extra` (fields with
    no column, such as an inference server's queue-time counters)."""
    return f"{alias}.{metric}" if metric in ResourceSample.METRICS else f"({alias}.extra->>'{metric}')::float8"


def _rise(metric: str) -> str:
    return f"{sample_metric_sql(metric)} - lag({sample_metric_sql(metric)}) OVER (PARTITION BY r.device ORDER BY r.ts)"


# Derived per sample from the one before: a server's mean queue time per request between two
# scrapes (ms), from its two queue-time counters (seconds in queue, requests); a fall is a restart.
_DERIVED = {
    "queue_time_ms": f"CASE WHEN {_rise('queue_time_requests')} > 0 AND {_rise('queue_time_s')} >= 0 "
                     f"THEN 1000 * ({_rise('queue_time_s')}) / ({_rise('queue_time_requests')}) END",
}

# Only the columns used are carried, and the MADs are grouped by device alone and joined to the
# medians afterwards: grouping the joined rows by every median column sorted each sample's whole
# row on disk (a quarter of the statement).
_DEVICE_SQL = """
WITH windowed AS (
    SELECT * FROM (
        SELECT r.device, r.ts, {metrics}, max(ts) OVER (PARTITION BY device) AS latest,
               extract(epoch FROM ts - lag(ts) OVER (PARTITION BY device ORDER BY ts)) * 1000 AS gap_ms
        FROM ingest_resourcesample r WHERE r.project_id = %(project)s {devices}
    ) x WHERE ts > latest - make_interval(days => %(days)s)
), med AS (
    SELECT device, count(*) AS n, min(ts) AS w_start, max(ts) AS w_end,
           {interval} AS interval_ms,
           {medians}
    FROM windowed GROUP BY device
), mad AS (
    SELECT w.device, {mads}
    FROM windowed w JOIN med m USING (device)
    GROUP BY w.device
)
SELECT m.*, {mad_columns}
FROM med m JOIN mad USING (device)
"""


def _save(project: Project, rows: list[dict]) -> int:
    if not rows:
        return 0
    objs = [Baseline(project=project, **row) for row in rows]
    with transaction.atomic():
        Baseline.objects.bulk_create(
            objs, update_conflicts=True, unique_fields=["project", "kind", "key", "device"],
            update_fields=["count", "median_ms", "mad_ms", "p90_ms", "p99_ms", "stats", "window_start",
                           "window_end", "updated_at"])
    return len(objs)


def step_baselines_compute(*, project: Project, since: datetime | None = None,
                           keys: list[tuple[str, str]] | None = None, until: datetime | None = None) -> int:
    """Recompute step baselines: all keys, keys of tasks touched after `since`, or `keys`.
    Either way a key's baseline is computed over its whole window; with `until`, over the
    steps that had ended by then only."""
    params = {"project": project.pk, "days": WINDOW_DAYS}
    where = ""
    if until is not None:
        params["until"] = until
        where = "AND s.ended_at <= %(until)s "
    if keys is not None:
        if not keys:
            return 0
        params.update(kinds=[k for k, _ in keys], names=[n for _, n in keys])
        where += (f"AND (s.kind, {_STEP_KEY}) IN "
                 "(SELECT * FROM unnest(%(kinds)s::text[], %(names)s::text[]))")
    elif since is not None:
        params["since"] = since
        where += (f"AND (s.kind, {_STEP_KEY}) IN (SELECT DISTINCT s.kind, {_STEP_KEY} FROM ingest_step s "
                 "JOIN ingest_task t ON t.id = s.task_id AND t.project_id = s.project_id AND t.last_event_at > %(since)s "
                 "WHERE s.project_id = %(project)s)")
    sql = _STEP_SQL.format(filter=where)
    with transaction.atomic(), connection.cursor() as cursor:
        # The CTEs' row estimates are poor (rows=1 for the slope join), and a nested loop on
        # them re-sorts the window once per step: 90 s instead of 0.2 s on 33k steps.
        cursor.execute("SET LOCAL enable_nestloop = off")
        cursor.execute(sql, params)
        columns = [c.name for c in cursor.description]
        found = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
        heavier = {}
        for name, (statement, read) in _GROUPS.items():
            cursor.execute(statement.format(filter=where), {**params, "min_runs": ARG_MIN_RUNS})
            heavier[name] = _heavier(found, cursor.fetchall(), read)
    rows = [{
        "kind": r["kind"], "key": r["key"][:200], "device": r["device"][:200], "count": r["n"],
        "median_ms": r["d_med"], "mad_ms": r["d_mad"], "p90_ms": r["d_p90"], "p99_ms": r["d_p99"],
        "stats": {"ttft_median": r["t_med"], "ttft_mad": r["t_mad"], "tpot_median": r["p_med"],
                  "tpot_mad": r["p_mad"], "input_median": r["i_med"], "input_mad": r["i_mad"],
                  "log_mad": r["d_lmad"], "ttft_log_mad": r["t_lmad"], "tpot_log_mad": r["p_lmad"],
                  "input_log_mad": r["i_lmad"], "line_a": r["l_a"], "line_b": r["l_b"],
                  "line_log_mad": r["l_lmad"], "prefill_a": r["f_a"], "prefill_b": r["f_b"],
                  "prefill_log_mad": r["f_lmad"],
                  **{name: groups[(r["kind"], r["key"])] for name, groups in heavier.items()
                     if r["device"] == "" and (r["kind"], r["key"]) in groups}},
        "window_start": r["w_start"], "window_end": r["w_end"],
    } for r in found]
    return _save(project, rows)


def _heavier(found: list[dict], groups: list[tuple], read) -> dict[tuple[str, str], list[dict]]:
    """(kind, key) → the groups of a `_GROUPS_SQL` statement that usually take longer than the
    key does (median ≥ (1 + MIN_EXCESS_RATIO) × the key's), the ARG_GROUPS with most runs first;
    `read` turns a group's value back from its text."""
    medians = {(r["kind"], r["key"]): r["d_med"] for r in found if r["device"] == ""}
    out: dict[tuple[str, str], list[dict]] = {}
    for kind, key, value, runs, med, lmad in sorted(groups, key=lambda g: -g[3]):
        usual = medians.get((kind, key))
        if usual is None or med < (1 + MIN_EXCESS_RATIO) * usual:
            continue
        kept = out.setdefault((kind, key), [])
        if len(kept) < ARG_GROUPS:
            kept.append({"value": read(value), "runs": runs, "median": med, "log_mad": lmad})
    return out


def device_normals_compute(*, project: Project, devices: list[str] | None = None,
                           until: datetime | None = None) -> int:
    """Recompute the normals of every device, or of `devices`; with `until`, over the samples
    taken by then only."""
    params = {"project": project.pk, "days": WINDOW_DAYS, "until": until}
    if devices is not None:
        if not devices:
            return 0
        params["devices"] = devices
    metrics = (*_METRICS, *_DERIVED)
    sql = _DEVICE_SQL.format(
        devices=("AND r.device = ANY(%(devices)s)" if devices is not None else "")
        + (" AND r.ts <= %(until)s" if until is not None else ""),
        interval=percentile_cont_sql("gap_ms", 0.5),
        medians=", ".join(f"{percentile_cont_sql(m, 0.5)} AS {m}_med" for m in metrics),
        mads=", ".join(f"{percentile_cont_sql(f'abs(w.{m} - m.{m}_med)', 0.5)} AS {m}_mad" for m in metrics),
        metrics=", ".join([f"r.{m}" for m in _METRICS] + [f"{sql} AS {m}" for m, sql in _DERIVED.items()]),
        mad_columns=", ".join(f"mad.{m}_mad" for m in metrics),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        columns = [c.name for c in cursor.description]
        found = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    rows = []
    for r in found:
        normals = {m: {"median": r[f"{m}_med"], "mad": r[f"{m}_mad"]} for m in metrics
                   if r[f"{m}_med"] is not None}
        rows.append({"kind": DEVICE, "key": r["device"][:200], "device": r["device"][:200], "count": r["n"],
                     "median_ms": None, "mad_ms": None, "p90_ms": None, "p99_ms": None,
                     "stats": {"metrics": normals, "interval_ms": r["interval_ms"]},
                     "window_start": r["w_start"], "window_end": r["w_end"]})
    return _save(project, rows)


def baselines_refresh(*, project: Project, full: bool = False) -> int:
    """Recompute the baselines of keys that got new data since the last refresh (all if
    `full` or never refreshed). Returns the number of baselines written."""
    started = timezone.now()
    last = None if full else (Baseline.objects.filter(project=project).order_by("-updated_at")
                              .values_list("updated_at", flat=True).first())
    if last is None:
        devices = None
    else:
        # Samples carry no ingest time: refresh the devices that steps of touched tasks ran on.
        devices = list(Step.objects.filter(project=project, task__last_event_at__gt=last)
                       .exclude(device="").values_list("device", flat=True).distinct())
    written = sum(_side_by_side(lambda: step_baselines_compute(project=project, since=last),
                                lambda: device_normals_compute(project=project, devices=devices)))
    log.log(logging.INFO if written else logging.DEBUG,  # every 5 minutes: nothing new is routine
            "analysis.baselines_refreshed project=%s written=%d seconds=%.2f", project.pk, written,
            (timezone.now() - started).total_seconds())
    return written


def _side_by_side(*calls) -> list:
    """Run independent statements at once, each on a connection of its own (Postgres runs one
    statement on one core: the step baselines and the device normals of a whole history each
    take seconds). Inside a transaction, whose rows other connections would not see, one after
    the other."""
    if connection.in_atomic_block:
        return [call() for call in calls]

    def run(call):
        try:
            return call()
        finally:
            connection.close()  # the thread's own

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return [future.result() for future in [pool.submit(run, call) for call in calls]]


def baselines_ensure(*, project: Project, keys: set[tuple[str, str]], devices: set[str],
                     until: datetime | None = None) -> None:
    """Compute on demand the baselines a task needs that do not exist yet (with `until`, from
    the data there was by then)."""
    have = set(Baseline.objects.filter(project=project, kind__in={k for k, _ in keys} | {DEVICE})
               .values_list("kind", "key"))
    missing_keys = sorted(k for k in keys if k not in have)
    missing_devices = sorted(d for d in devices if (DEVICE, d) not in have)
    if missing_keys:
        step_baselines_compute(project=project, keys=missing_keys, until=until)
    if missing_devices:
        device_normals_compute(project=project, devices=missing_devices, until=until)
    # Keys with no usable history (only failed steps, a device that sends no telemetry) get an
    # empty row, so the next task does not compute them again; a refresh fills them in later.
    placeholders = [Baseline(project=project, kind=kind, key=key[:200], count=0) for kind, key in missing_keys]
    placeholders += [Baseline(project=project, kind=DEVICE, key=d[:200], device=d[:200], count=0)
                     for d in missing_devices]
    if placeholders:
        Baseline.objects.bulk_create(placeholders, ignore_conflicts=True)


def baselines_as_of(*, project: Project, until: datetime, since: datetime | None = None) -> int:
    """The periodic refresh as it would have run at `until`: the keys with a step that ended in
    (`since`, `until`] (every key with data by then if `since` is None) and the devices with a
    sample in that interval, each over its window of the data there was at `until`. Returns the
    number of baselines written."""
    params = {"project": project.pk, "until": until, "since": since}
    after = "AND s.ended_at > %(since)s" if since is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT s.kind, {_STEP_KEY} FROM ingest_step s WHERE s.project_id = %(project)s "
                       f"AND s.ended_at <= %(until)s {after}", params)
        keys = sorted(cursor.fetchall())
        cursor.execute("SELECT DISTINCT r.device FROM ingest_resourcesample r WHERE r.project_id = %(project)s "
                       "AND r.ts <= %(until)s" + (" AND r.ts > %(since)s" if since is not None else ""), params)
        devices = sorted(r[0] for r in cursor.fetchall())
    return sum(_side_by_side(lambda: step_baselines_compute(project=project, keys=keys, until=until),
                             lambda: device_normals_compute(project=project, devices=devices, until=until)))


def all_projects_refresh() -> None:
    """Every project's baselines, each in a transaction of its own: one that fails is counted and
    retried with back-off (analysis/jobs.py), never stops the others."""
    job = jobs.ProjectJob(jobs.BASELINES)
    for project in Project.objects.order_by("pk"):
        if job.due(project.pk):
            job.run(project.pk, lambda p=project: baselines_refresh(project=p))
