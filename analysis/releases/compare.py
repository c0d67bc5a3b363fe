"""Release comparison: did release B make tasks faster or slower than release A, how sure are we,
and where did the time change? One selector, `release_compare`, builds everything the Releases
page, the API and `manage.py compare_releases` show; `release_list` feeds the releases list.

How it stays fast on millions of tasks (see docs/releases.md for measured figures):
- Exact counts and p50/p90/p95/p99 per task name: one hash-grouped scan ships each (release,
  task name)'s durations (12 bytes a task in binary: 24 MB for two releases of a million tasks) and numpy
  computes the percentile (analysis.measures: percentile_cont's linear interpolation) by
  partition, not by sort.
- The bootstrap interval, the Mann-Whitney test and the ECDF/histogram use at most `SAMPLE_CAP`
  durations per (release, task name), drawn uniformly with the comparison's seed (every task
  below the cap). The interval is centred on the exact difference and scaled to the true counts
  (see stats.py).
- The releases list reads the latency rollups (analysis/rollups/) unless filtered by vendor:
  whole hours pre-aggregated, p50/p95 within 1.93 %.
- "Where it changed" reads per-group sums and histograms from the group rollups (every task,
  exact; raw steps only for the tasks outside the rolled-up hours), or, under filters the
  rollups cannot serve (task name, device, vendor), a sample of `attribution.ATTRIBUTION_TASKS` tasks per
  release (see attribution.py).
- All of it runs in one transaction with a larger `work_mem` (db.WORK_MEM) so sorts stay in
  memory.
- A finished comparison is cached under the version of the data it read (`_cache_key`): asking
  again while neither release's tasks nor any analysis changed answers from the cache.

"Where it changed" (the attribution of the change to steps, tools and models, finding rates,
budget, what-if) lives in attribution.py, which documents its method; stats.py holds the pure
statistics; scope.py says which tasks are compared (the filters and `compared_tasks`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from django.core.cache import cache
from django.db import connections, transaction
from django.db.models import QuerySet

from agentops.db import read_alias
from analysis import rollups
from analysis.filters import FilterError
from analysis.measures import FAILED_SQL, percentile_cont_sql
from analysis.releases import stats
from analysis.releases.attribution import METHOD, where_it_changed
from analysis.releases.db import fetch, set_repeatable_read, set_work_mem
from analysis.releases.scope import CompareFilters, compared_tasks
from ingest.models import Project, Release, Task

log = logging.getLogger("agentops.analysis")

SAMPLE_CAP = 20_000
# A comparison is cached under the version of its data (see _cache_key): reopening a compare
# page, or a CI job asking again, costs two index scans instead of the whole comparison.
CACHE_SECONDS = 24 * 3600
SPARKLINE_BUCKETS = 20


class UnknownRelease(ValueError):
    """A release parameter names no release of the project. `param` is `a` or `b`."""

    def __init__(self, param: str, name: str):
        self.param = param
        self.name = name
        super().__init__(f"{param}: no release {name!r} in this project" if name
                         else f"{param}: required (the name of a release)")


def parse_threshold(params) -> tuple[float, float]:
    """threshold_pct (≥ 0) and alpha (0 < alpha < 1) from query parameters."""
    def number(key: str, default: float) -> float:
        raw = params.get(key)
        if raw in (None, ""):
            return default
        try:
            value = float(raw)
        except ValueError:
            raise FilterError(f"{key}: {raw!r} is not a number") from None
        if value != value:
            raise FilterError(f"{key}: {raw!r} is not a number")
        return value

    threshold = number("threshold_pct", stats.DEFAULT_THRESHOLD_PCT)
    if not 0 <= threshold <= 10_000:
        raise FilterError("threshold_pct: must be between 0 and 10000")
    alpha = number("alpha", stats.DEFAULT_ALPHA)
    if not 0 < alpha < 1:
        raise FilterError("alpha: must be between 0 and 1 (exclusive), e.g. 0.05")
    return threshold, alpha


def _base_sql(qs: QuerySet, *columns: str) -> tuple[str, tuple]:
    sql, params = qs.values(*columns).query.sql_with_params()
    return sql, tuple(params)


def release_exists(*, project: Project, name: str) -> bool:
    return bool(name) and (Release.objects.filter(project=project, name=name).exists()
                           or Task.objects.filter(project=project, release=name).exists())


# --- per task name: exact percentiles, sampled durations, statistics --------------------------

def _task_figures(base: tuple[str, tuple], seed: int
                  ) -> tuple[dict[tuple[str, str | None], dict], dict[tuple[str, str | None], np.ndarray], tuple]:
    """Exact figures per (release, task name) and per release (name None), and a uniform random
    sample of at most SAMPLE_CAP sorted durations of each. One hash-grouped scan ships each
    group's durations as one binary float8 array (array_send: exact, no text); numpy computes
    the percentiles with linear interpolation, i.e. exactly percentile_cont, by partition instead
    of the sort Postgres needs (0.2 s instead of 0.8 s for two 166k-task releases). The sample is
    drawn with `seed`, so the same data gives the same comparison. Also returns the version of
    these tasks for the cache: their count and newest event."""
    rows = fetch(f"""
        SELECT release, name, array_send(array_agg(duration_ms)), sum(step_count),
               count(step_count), sum(input_tokens + output_tokens), count(input_tokens + output_tokens),
               count(*) FILTER (WHERE status {FAILED_SQL}), max(last_event_at)
        FROM ({base[0]}) t GROUP BY release, name""", base[1])
    rng = np.random.default_rng(seed)
    durations: dict[tuple[str, str | None], np.ndarray] = {}
    per_release: dict[str, list[np.ndarray]] = defaultdict(list)
    sums: dict[tuple[str, str | None], np.ndarray] = defaultdict(lambda: np.zeros(5))
    for release, name, sent, steps, with_steps, tokens, with_tokens, failed, _ in rows:
        durations[(release, name)] = values = _float8_array(bytes(sent))
        per_release[release].append(values)
        for key in ((release, name), (release, None)):
            sums[key] += (float(steps or 0), with_steps, float(tokens or 0), with_tokens, failed)
    durations.update({(release, None): np.concatenate(parts) for release, parts in per_release.items()})
    exact, samples = {}, {}
    for key, values in durations.items():
        steps, with_steps, tokens, with_tokens, failed = sums[key]
        exact[key] = {
            "n": int(values.size),
            "percentiles": stats.percentiles(values),
            "mean": float(values.mean()),
            "steps_per_task": steps / with_steps if with_steps else None,
            "tokens_per_task": tokens / with_tokens if with_tokens else None,
            "error_rate": failed / values.size}
        sample = values if values.size <= SAMPLE_CAP else rng.choice(values, SAMPLE_CAP, replace=False)
        samples[key] = np.sort(sample)
    version = (sum(int(v["n"]) for (_, name), v in exact.items() if name is None),
               max((row[-1] for row in rows if row[-1] is not None), default=None))
    return exact, samples, version


def _float8_array(sent: bytes) -> np.ndarray:
    """A float8[] without NULLs in PostgreSQL's binary array format (array_send): a 20-byte header
    (dimensions, NULL flag, element type, length, lower bound), then per element its 4-byte length
    and 8 big-endian bytes. Read straight into numpy: no text round trip."""
    ndim, has_nulls = np.frombuffer(sent, dtype=">i4", count=2)
    if ndim == 0:
        return np.empty(0)
    if ndim != 1 or has_nulls:
        raise ValueError("expected a one-dimensional float8 array without NULLs")
    return np.frombuffer(sent, dtype=[("len", ">i4"), ("value", ">f8")], offset=20)["value"].astype(float)


def _compare_row(name: str | None, ra: dict | None, rb: dict | None, sa, sb, *,
                 threshold_pct: float, alpha: float, seed: int) -> dict:
    empty = np.empty(0)
    ra = ra or {"n": 0, "percentiles": {q: None for q in stats.PERCENTILES}, "mean": None,
                "error_rate": None}
    rb = rb or {"n": 0, "percentiles": {q: None for q in stats.PERCENTILES}, "mean": None,
                "error_rate": None}
    sa = sa if sa is not None else empty
    sb = sb if sb is not None else empty
    both = ra["n"] > 0 and rb["n"] > 0
    estimate = [(rb["percentiles"][q] - ra["percentiles"][q]) if both else np.nan
                for q in stats.PERCENTILES]
    ci = (stats.bootstrap_percentile_diff(sa, sb, level=stats.interval_level(alpha), seed=seed,
                                          population_a=ra["n"], population_b=rb["n"],
                                          estimate=estimate)
          if both and sa.size and sb.size else np.full((len(stats.PERCENTILES), 2), np.nan))
    p_value = stats.mann_whitney_p(sa, sb)
    rows = []
    for i, q in enumerate(stats.PERCENTILES):
        a_value, b_value = ra["percentiles"][q], rb["percentiles"][q]
        delta = (b_value - a_value) if both else None
        rows.append({
            "q": q, "a_ms": a_value, "b_ms": b_value, "delta_ms": delta,
            "delta_pct": (100 * delta / a_value) if delta is not None and a_value else None,
            "ci_low_ms": None if np.isnan(ci[i, 0]) else float(ci[i, 0]),
            "ci_high_ms": None if np.isnan(ci[i, 1]) else float(ci[i, 1]),
        })
    changes = [stats.Change(q=r["q"], before=r["a_ms"], after=r["b_ms"],
                            ci=(r["ci_low_ms"], r["ci_high_ms"]) if r["ci_low_ms"] is not None else None)
               for r in rows if r["q"] in stats.HEADLINE_PERCENTILES]
    verdict = stats.verdict(n_a=ra["n"], n_b=rb["n"], changes=changes, p_value=p_value,
                            threshold_pct=threshold_pct, alpha=alpha)
    return {
        "name": name, "n_a": ra["n"], "n_b": rb["n"], "mean_a_ms": ra["mean"], "mean_b_ms": rb["mean"],
        "error_rate_a": ra["error_rate"], "error_rate_b": rb["error_rate"],
        "percentiles": rows, "p_value": p_value, "label": verdict.label, "verdict": verdict.text,
        "regressed": verdict.regressed, "improved": verdict.improved,
        "significant": verdict.significant, "warnings": verdict.warnings,
        "sampled_a": int(sa.size), "sampled_b": int(sb.size),
    }


# --- the comparison ----------------------------------------------------------------------------

@dataclass
class ReleaseComparison:
    """`report` is the JSON the API returns; `durations` holds the sampled task durations of each
    release (all task names) for the ECDF and histogram."""

    report: dict
    durations: dict[str, np.ndarray] = field(default_factory=dict)


def release_compare(*, project: Project, a: str, b: str, filters: CompareFilters | None = None,
                    threshold_pct: float = stats.DEFAULT_THRESHOLD_PCT,
                    alpha: float = stats.DEFAULT_ALPHA, seed: int = 0) -> ReleaseComparison:
    """Compare release `b` against baseline `a` in `project`. Raises UnknownRelease when a
    release is missing or not one of the project's, FilterError when a and b are the same."""
    filters = filters or CompareFilters()
    for param, name in (("a", a), ("b", b)):
        if not release_exists(project=project, name=name):
            raise UnknownRelease(param, name)
    if a == b:
        raise FilterError("b: must be a different release from a")
    started = time.monotonic()
    params = (filters, threshold_pct, alpha, seed)
    # The replica when the request reads from it (agentops/db.py): every query of the comparison,
    # ORM and raw, then runs in this one transaction there.
    alias = read_alias()
    outermost = not connections[alias].in_atomic_block
    with transaction.atomic(using=alias):
        if outermost:  # one snapshot for every query: tasks, rollups and their watermark agree
            set_repeatable_read()
        set_work_mem()
        base = _base_sql(compared_tasks(project=project, releases=[a, b], filters=filters), "id", "release",
                         "name", "duration_ms", "status", "step_count", "input_tokens", "output_tokens",
                         "last_event_at")
        exact, samples, tasks_version = _task_figures(base, seed)
        key = _cache_key(project=project, a=a, b=b, params=params, tasks_version=tasks_version)
        comparison = cache.get(key)
        if comparison is not None:
            log.info("releases.compared project=%s a=%s b=%s cached=1 ms=%.0f", project.pk, a, b,
                     1000 * (time.monotonic() - started))
            return comparison
        comparison = _release_compare(project=project, a=a, b=b, filters=filters, base=base, exact=exact,
                                      samples=samples, threshold_pct=threshold_pct, alpha=alpha, seed=seed)
    cache.set(key, comparison, CACHE_SECONDS)
    report = comparison.report
    log.info("releases.compared project=%s a=%s b=%s tasks=%s/%s regressed=%s ms=%.0f",
             project.pk, a, b, report["overall"]["n_a"], report["overall"]["n_b"],
             report["regressed"], 1000 * (time.monotonic() - started))
    return comparison


def _cache_key(*, project: Project, a: str, b: str, params: tuple, tasks_version: tuple) -> str:
    """The cache key of a comparison: its parameters and the version of the data it reads, so a
    cached comparison is never stale: a compared task stored, changed or deleted (count and
    newest event of the tasks, from the scan that computes the exact figures), any task of the
    project (re)analysed (findings, budget, what-if), or a rollup refresh (the group rollups
    behind "where it changed") makes a new key. Asking again costs that one scan and two index
    lookups instead of the whole comparison."""
    (analysed,), = fetch("SELECT max(analyzed_at) FROM analysis_taskanalysis WHERE project_id = %s", [project.pk])
    version = (project.pk, a, b, params, tasks_version, analysed, rollups.watermark(project_id=project.pk))
    return "release-compare:" + hashlib.sha256(repr(version).encode()).hexdigest()


def _release_compare(*, project, a, b, filters, base, exact, samples, threshold_pct, alpha, seed
                     ) -> ReleaseComparison:
    names = sorted({name for (_, name) in exact if name is not None})
    common = dict(threshold_pct=threshold_pct, alpha=alpha)
    overall = _compare_row(None, exact.get((a, None)), exact.get((b, None)),
                           samples.get((a, None)), samples.get((b, None)), seed=seed, **common)
    tasks = [_compare_row(name, exact.get((a, name)), exact.get((b, name)), samples.get((a, name)),
                          samples.get((b, name)), seed=seed + i + 1, **common)
             for i, name in enumerate(names)]
    tasks.sort(key=lambda r: (not r["regressed"], -_headline_delta_pct(r), r["name"]))

    counts = {r: exact.get((r, None), {}).get("n", 0) for r in (a, b)}
    changed = where_it_changed(project=project, filters=filters, base=base, a=a, b=b, counts=counts, alpha=alpha,
                               direction=_direction(overall, tasks))
    attribution, totals = changed["attribution"], changed["totals"]
    step_totals = attribution.pop("totals")
    slower_steps = [
        {"key": r["key"], "p50_a_ms": r["p50_a_ms"], "p50_b_ms": r["p50_b_ms"],
         "contribution_ms": r["contribution_ms"], "per_call_p_value": r["per_call_p_value"]}
        for r in attribution["steps"]
        if r["significant"] and r["contribution_ms"] > 0 and r["p50_a_ms"] and r["p50_b_ms"]
        and r["per_call_p_value"] is not None and r["per_call_p_value"] < alpha
        and 100 * (r["p50_b_ms"] / r["p50_a_ms"] - 1) >= threshold_pct]
    summary = _summary(exact.get((a, None)), exact.get((b, None)), step_totals[a], step_totals[b])
    report = {
        "project": project.name, "a": a, "b": b, "filters": filters.as_query(),
        "threshold_pct": threshold_pct, "alpha": alpha,
        "headline_percentiles": list(stats.HEADLINE_PERCENTILES),
        "interval_level": stats.interval_level(alpha),
        "regressed": any(r["regressed"] for r in tasks),
        "slower_steps": slower_steps,
        "overall": overall, "tasks": tasks, "summary": summary,
        "attribution": {
            "method": METHOD,
            "sample": {"tasks_a": totals[a]["tasks"], "tasks_b": totals[b]["tasks"],
                       "sampled": changed["sampled"],
                       "analyzed_a": totals[a]["analyzed"], "analyzed_b": totals[b]["analyzed"]},
            "mean_delta_ms": totals[b]["mean_ms"] - totals[a]["mean_ms"],
            **attribution,
        },
        "budget": changed["budget"], "findings": changed["findings"], "whatif": changed["whatif"],
    }
    durations = {a: samples.get((a, None), np.empty(0)), b: samples.get((b, None), np.empty(0))}
    return ReleaseComparison(report=report, durations=durations)


def _direction(overall: dict, tasks: list[dict]) -> int:
    """Which way "where it changed" looks: +1 (what made B slower) when a task name or the whole
    regressed or got significantly slower, −1 when B got significantly faster and nothing got
    slower, 0 (strongest change either way) when nothing changed significantly."""
    rows = [overall, *tasks]
    if any(r["label"] in ("regressed", "slower") for r in rows):
        return 1
    if any(r["label"] in ("improved", "faster") for r in rows):
        return -1
    return 0


def _headline_delta_pct(row: dict) -> float:
    for p in row["percentiles"]:
        if p["q"] == stats.HEADLINE_PERCENTILES[-1] and p["delta_pct"] is not None:
            return p["delta_pct"]
    return float("-inf")


def _summary(ea: dict | None, eb: dict | None, sa: dict, sb: dict) -> list[dict]:
    """Per-task figures side by side: steps, tool calls, tokens, error rates."""
    ea, eb = ea or {}, eb or {}
    pairs = [
        ("tasks", ea.get("n", 0), eb.get("n", 0)),
        ("mean duration (ms)", ea.get("mean"), eb.get("mean")),
        ("steps per task", ea.get("steps_per_task"), eb.get("steps_per_task")),
        ("tool calls per task", sa["tool_calls_per_task"], sb["tool_calls_per_task"]),
        ("tokens per task", ea.get("tokens_per_task"), eb.get("tokens_per_task")),
        ("task error rate", ea.get("error_rate"), eb.get("error_rate")),
        ("step error rate", sa["step_error_rate"], sb["step_error_rate"]),
    ]
    rows = []
    for metric, va, vb in pairs:
        delta = (vb - va) if va is not None and vb is not None else None
        rows.append({"metric": metric, "a": va, "b": vb, "delta": delta,
                     "delta_pct": (100 * delta / va) if delta is not None and va else None})
    return rows


# --- the releases list -------------------------------------------------------------------------

def release_names(*, project: Project) -> list[str]:
    """The project's release names, newest first (ingest records one Release row per name)."""
    return list(Release.objects.filter(project=project).order_by("-first_seen", "-name")
                .values_list("name", flat=True))


def release_list(*, project: Project, filters: CompareFilters | None = None) -> list[dict]:
    """Every release of the project, newest first: first/last task start, task volume, p50/p95
    and a p95 sparkline over SPARKLINE_BUCKETS equal slices of the release's own time span."""
    filters = filters or CompareFilters()
    releases = list(Release.objects.filter(project=project).order_by("-first_seen", "-name"))
    names = [r.name for r in releases]
    if not names:
        return []
    figures = None if filters.vendor else _release_figures_rolled_up(project=project, filters=filters)
    if figures is not None:
        spans, sparks = figures
    else:
        base = _base_sql(compared_tasks(project=project, releases=names, filters=filters),
                         "release", "started_at", "duration_ms", "status")
        with transaction.atomic():
            set_work_mem()
            spans, sparks = _release_figures(base)
    by_name = {r.name: r for r in releases}
    out = []
    for name in names:
        row = by_name.get(name)
        span = spans.get(name, {})
        # Seen = when its tasks started; the Release row (when it was ingested) when none match.
        out.append({
            "name": name,
            "first_seen": span.get("lo") or (row.first_seen if row else None),
            "last_seen": span.get("hi") or (row.last_seen if row else None),
            "tasks": span.get("tasks", 0), "p50_ms": span.get("p50_ms"), "p95_ms": span.get("p95_ms"),
            "sparkline": sparks.get(name, []),
        })
    out.sort(key=lambda r: (r["first_seen"] is not None, r["first_seen"] or 0, r["name"]), reverse=True)
    return out


def _release_figures_rolled_up(*, project: Project, filters: CompareFilters
                               ) -> tuple[dict[str, dict], dict[str, list]] | None:
    """The list's figures from the latency rollups (analysis/rollups/; raw rows binned the same way
    where they cannot answer): p50/p95 within 1.93 %, sparkline slices at hour granularity."""
    task_filters = filters.task_filters()
    summaries = rollups.task_summaries(project=project, filters=task_filters, group="release", raw=True)
    if summaries is None:
        return None
    spans = {}
    for (_, release), s in summaries.items():
        if s.timed:
            p50, p95 = s.quantiles((0.5, 0.95))
            spans[release] = {"lo": s.first_at, "hi": s.last_at, "tasks": s.timed, "p50_ms": p50, "p95_ms": p95}
    sparks: dict[str, list] = defaultdict(list)
    sliced = rollups.task_summaries(project=project, filters=task_filters, group="release", raw=True, slices=(
        {r: (span["lo"], span["hi"]) for r, span in spans.items()}, SPARKLINE_BUCKETS)) if spans else {}
    for (bucket, release), s in sorted((sliced or {}).items()):
        if s.timed:
            sparks[release].append({"bucket": bucket, "p95_ms": s.quantiles((0.95,))[0], "tasks": s.timed})
    return spans, sparks


def _release_figures(base: tuple[str, tuple]) -> tuple[dict[str, dict], dict[str, list]]:
    """The list's figures from raw rows (a vendor filter, which the rollups have no dimension for):
    p50/p95 binned as the rollups bin, as in every other case; the sparkline's exact p95."""
    spans = {}
    for release, s in rollups.binned_summaries(base[0], base[1], key="t.release").items():
        if s.timed:
            p50, p95 = s.quantiles((0.5, 0.95))
            spans[release] = {"lo": s.first_at, "hi": s.last_at, "tasks": s.timed, "p50_ms": p50, "p95_ms": p95}
    sparks: dict[str, list] = defaultdict(list)
    if not spans:
        return spans, sparks
    # Each release's own span, passed in rather than recomputed: one more scan, no materialised CTE.
    values = ", ".join(["(%s, %s::float8, %s::float8)"] * len(spans))
    bounds = tuple(v for release, span in spans.items()
                   for v in (release, span["lo"].timestamp(), span["hi"].timestamp() + 0.001))
    for release, bucket, p95, n in fetch(f"""
            SELECT t.release, width_bucket(extract(epoch FROM t.started_at), s.lo, s.hi, %s),
                   {percentile_cont_sql("t.duration_ms", 0.95)}, count(*)
            FROM ({base[0]}) t JOIN (VALUES {values}) s(release, lo, hi) ON s.release = t.release
            GROUP BY 1, 2 ORDER BY 1, 2""", (SPARKLINE_BUCKETS,) + base[1] + bounds):
        sparks[release].append({"bucket": bucket, "p95_ms": p95, "tasks": n})
    return spans, sparks
