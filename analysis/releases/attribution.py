"""Where the time changed between two releases: the attribution of the change in task duration
to steps, tools, models and step kinds, plus finding rates, the latency budget and the what-if
projections per release. Called by `compare.release_compare` inside its transaction.

Where the figures come from: every figure here is a sum over tasks (Σ and Σ² of a group's self
time per task, calls, errors, tokens, wasted ms, budget and what-if ms) or a histogram of the self
time per call, so it merges across hours. `rollups.group_rows_sql` computes them per hour of the
task's start, release, environment and task name into `analysis_group_rollup` (and its daily
table), on every rollup refresh. A comparison reads whole days and hours from there and computes
the same rows from raw steps only for the tasks outside them (the fresh tail since the last
refresh, partial hours at the edges of a time filter): **exact, over every task**, at the cost of
a few thousand rollup rows. Filters the rollups cannot serve (task name: the histograms are
rolled up across names; device, vendor), or no rollups yet, fall back to a uniform random sample of at most `ATTRIBUTION_TASKS` tasks per release
through the same SQL (a mean from 4,000 tasks has a standard error of 1.6 % of the spread of its
per-task values; every contribution carries its own standard error). The per-call percentiles
and the per-call test use the histograms (60 log buckets a decade: percentiles within 1.93 %).

The method (self time, contributions within task names, the mix effect) and the order of the
rows are docs/releases.md, "Where it changed".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from agentops.db import read_connection
from analysis import rollups
from analysis.releases import stats
from analysis.releases.db import fetch
from analysis.releases.scope import compared_tasks

ATTRIBUTION_TASKS = 4_000
# Below this a contribution is floating-point noise (a sum of per-task differences that cancel).
_ROUNDING_MS = 1e-6
PER_CALL_MIN = 5
REST_KEY = "(time outside steps)"
METHOD = ("contribution = change in mean self time per task (ms), within task names, weighted by "
          "their pooled share of tasks; significant rows first (per-call Mann-Whitney or the "
          "contribution's interval, Bonferroni over the rows), then by contribution in the "
          "direction of the change; mix_ms = the part due to a different task-name mix")

SAMPLE_TABLE = "release_compare_sample"
RAW_TABLE = "release_compare_groups"
# Report dimension → analysis_group_rollup dimension.
_DIMENSIONS = {"steps": "step", "kinds": "kind", "tools": "tool", "models": "model"}
# The time bucket of raw rows computed for one comparison: one for all hours.
_ALL_HOURS = "'-infinity'::timestamptz"
_SUMS = {name: i for i, name in enumerate(rollups.GROUP_SUMS)}


@dataclass
class GroupFigures:
    """The merged analysis_group_rollup rows of both releases: `sums[(release, task name,
    dimension, kind, key)]` holds GROUP_SUMS (plus max_ms last), `bins[(release, dimension, kind,
    key)]` the histogram of self time per call. `sampled`: from a sample of the tasks."""

    sampled: bool = False
    sums: dict[tuple, np.ndarray] = field(default_factory=lambda: defaultdict(lambda: np.zeros(len(_SUMS) + 1)))
    bins: dict[tuple, np.ndarray] = field(default_factory=lambda: defaultdict(lambda: np.zeros(rollups.NBINS)))

    def add(self, source: str, where: str, params: list) -> None:
        """Merge the rows of `source` (a table, alias r) matching `where`."""
        sums = ", ".join(f"sum(r.{c})::float8" for c in rollups.GROUP_SUMS)
        for release, task_name, dimension, kind, key, *values, max_ms in fetch(
                f"SELECT r.release, r.task_name, r.dimension, r.kind, r.key, {sums}, max(r.max_ms)"
                f" FROM {source} r WHERE {where} AND left(r.dimension, 2) <> 'h_' GROUP BY 1, 2, 3, 4, 5", params):
            row = self.sums[(release, task_name, dimension, kind, key)]
            row[:-1] += np.asarray(values, dtype=float)
            if max_ms is not None:
                row[-1] = max(row[-1], max_ms)
        for release, dimension, kind, key, index, n in fetch(
                f"SELECT r.release, substr(r.dimension, 3), r.kind, r.key, u.b, sum(u.n)::float8 FROM {source} r,"
                f" unnest(r.bins, r.counts) AS u(b, n) WHERE {where} AND left(r.dimension, 2) = 'h_'"
                f" GROUP BY 1, 2, 3, 4, 5", params):
            self.bins[(release, dimension, kind, key)][index] += n

    def add_raw(self, where: str, params: list | tuple, *, project_id: int) -> None:
        """Compute the rows of the project's tasks matching `where` (alias t) from raw steps, then merge."""
        rows = rollups.group_rows_sql(where, project_id=project_id, hour=_ALL_HOURS, lookup=True)
        with read_connection().cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
            cursor.execute(f"CREATE TEMPORARY TABLE {RAW_TABLE} ({', '.join(rollups.GROUP_COLUMNS)}) ON COMMIT DROP AS"
                           f" {rows}", params)
        self.add(RAW_TABLE, "true", [])
        with read_connection().cursor() as cursor:
            cursor.execute(f"DROP TABLE {RAW_TABLE}")

    def of(self, dimension: str) -> dict[tuple, dict[tuple[str, str], np.ndarray]]:
        """{(kind, key): {(release, task name): sums}} of one dimension."""
        out: dict[tuple, dict[tuple[str, str], np.ndarray]] = defaultdict(dict)
        for (release, task_name, dim, kind, key), values in self.sums.items():
            if dim == dimension:
                out[(kind, key)][(release, task_name)] = values
        return out

    def per_release(self, dimension: str) -> dict[tuple, dict[str, np.ndarray]]:
        """{(kind, key): {release: sums over task names}} of one dimension."""
        out: dict[tuple, dict[str, np.ndarray]] = defaultdict(dict)
        for group, cells in self.of(dimension).items():
            for (release, _), values in cells.items():
                if release in out[group]:
                    total = out[group][release]
                    total[:-1] += values[:-1]
                    total[-1] = max(total[-1], values[-1])
                else:
                    out[group][release] = values.copy()
        return out


def group_figures(*, project, filters, base: tuple[str, tuple], a: str, b: str,
                  counts: dict[str, int]) -> GroupFigures:
    """Both releases' figures: from the rollups (plus raw rows for the tasks outside the rolled-up
    hours) when the filters allow, else from a sample of at most ATTRIBUTION_TASKS tasks each."""
    # The histograms are rolled up across task names: a task-name filter samples too.
    span = None if filters.vendor or filters.name else rollups.covered_hours(
        project_id=project.pk, filters=filters.task_filters(), allowed=rollups.TASK_FILTERS)
    figures = GroupFigures()
    if span is None:
        figures.sampled = _sample(base, a, b, counts)
        figures.add_raw(f"t.id IN (SELECT id FROM {SAMPLE_TABLE})", [], project_id=project.pk)
        return figures
    lo, hi = span
    if lo is None and filters.until is None and _totals_fit(project, a, b, hi):
        # all of both releases' time: their totals
        where = "r.project_id = %s AND r.release = ANY(%s)" + (" AND r.environment = %s" if filters.environment else "")
        figures.add(rollups.RELEASE_TABLE, where, [project.pk, [a, b]] + ([filters.environment] if filters.environment else []))
    else:
        for suffix, seg_lo, seg_hi in rollups.sources(lo, hi, days=True):
            where, params = rollups.rollup_where(
                project=project, lo=seg_lo, hi=seg_hi,
                equal={"environment": filters.environment}, extra="r.release = ANY(%s)")
            figures.add(f"analysis_group_rollup{suffix}", where, params + [[a, b]])
    edge = compared_tasks(project=project, releases=[a, b], filters=filters).filter(rollups.edge(lo, hi))
    if edge.exists():
        sql, params = edge.values("pk").query.sql_with_params()
        figures.add_raw(f"t.id IN ({sql})", params, project_id=project.pk)
    return figures


def _totals_fit(project, a: str, b: str, hi) -> bool:
    """Whether the release totals of a and b hold exactly the hours before `hi`: each was merged
    up to an hour no later than hi (an older one means no hour of that release came since). A
    later one (a watermark that went back, a refresh that committed after `hi` was read outside
    a repeatable-read transaction) would count an hour twice with the raw rows from hi on."""
    (latest,), = fetch(f"SELECT max(hour) FROM {rollups.RELEASE_TABLE} WHERE project_id = %s AND release = ANY(%s)",
                       [project.pk, [a, b]])
    return latest is None or latest <= hi


def _sample(base: tuple[str, tuple], a: str, b: str, n: dict[str, int]) -> bool:
    """Draws a uniform random sample of at most ATTRIBUTION_TASKS tasks per release of `base`
    into a session-private temporary table; True when some task was left out."""
    probs = [min(1.0, ATTRIBUTION_TASKS / n[r]) if n.get(r) else 0.0 for r in (a, b)]
    with read_connection().cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {SAMPLE_TABLE}")
        cursor.execute(f"""
            CREATE TEMPORARY TABLE {SAMPLE_TABLE} ON COMMIT DROP AS
            SELECT id FROM ({base[0]}) t
            WHERE random() < CASE release WHEN %s THEN %s::float8 ELSE %s::float8 END""",
                       base[1] + (a, *probs))
        cursor.execute(f"ALTER TABLE {SAMPLE_TABLE} ADD PRIMARY KEY (id)")
        cursor.execute(f"ANALYZE {SAMPLE_TABLE}")
    return any(p < 1.0 for p in probs)


def where_it_changed(*, project, filters, base: tuple[str, tuple], a: str, b: str, counts: dict[str, int],
                     alpha: float, direction: int) -> dict:
    """Attribution (steps, kinds, tools, models), budget, finding rates and what-if for the tasks
    of `base` (SQL selecting id, release, name, duration_ms), which `filters` select. Must run
    inside a transaction."""
    figures = group_figures(project=project, filters=filters, base=base, a=a, b=b, counts=counts)
    totals = _task_totals(figures, a, b)
    return {
        "totals": totals, "sampled": figures.sampled,
        "attribution": _step_attribution(figures, a, b, totals, alpha=alpha, direction=direction),
        "budget": _budget(figures, a, b, totals),
        "findings": _finding_rates(figures, a, b, totals),
        "whatif": _whatif(figures, a, b),
    }


def _display_key(dimension: str, kind: str, key: str) -> str:
    if dimension == "steps":
        return f"{kind}:{key}" if key else f"{kind}:(unnamed)"
    return kind if dimension == "kinds" else key


def _column(values: np.ndarray, name: str) -> float:
    return float(values[_SUMS[name]])


def _stratified(moments: dict[str, dict[str, tuple[float, float]]], strata: dict[str, dict[str, int]],
                weights: dict[str, float], a: str, b: str) -> tuple[float, float]:
    """Σ_name w · (mean_B − mean_A) of a per-task quantity and its standard error, from Σ and Σ²
    per (release, task name); a task without the group counts as 0."""
    delta, variance = 0.0, 0.0
    for name, w in weights.items():
        for sign, r in ((1, b), (-1, a)):
            n = strata[r][name]
            total, squares = moments.get(r, {}).get(name, (0.0, 0.0))
            mean = total / n
            var = max(squares / n - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0
            delta += sign * w * mean
            variance += w * w * var / n
    return delta, variance ** 0.5


def _effects(fa: dict, fb: dict, calls_a: list[float], calls_b: list[float], n_a: int, n_b: int
             ) -> dict[str, float | None]:
    """Splits a group's change in time per task into slower calls and more calls:
        c_B·d_B − c_A·d_A = c̄·(d_B − d_A) + d̄·(c_B − c_A)
    with c the calls per task, d the mean self time per call and bars the averages of A and B.
    Standard errors: d from the per-call variance, c from the per-task variance of call counts.
    `duration_effect_ms` is None when one release never made the call."""
    def per_call(f: dict) -> tuple[float | None, float]:
        count = f.get("count", 0)
        if not count:
            return None, 0.0
        mean = f["self_ms"] / count
        var = max(f["self_squares"] / count - mean * mean, 0.0) * count / max(count - 1, 1)
        return mean, var / count

    def per_task(calls: list[float], n: int) -> tuple[float, float]:
        mean = calls[0] / n
        var = max(calls[1] / n - mean * mean, 0.0) * n / max(n - 1, 1)
        return mean, var / n

    (d_a, vd_a), (d_b, vd_b) = per_call(fa), per_call(fb)
    (c_a, vc_a), (c_b, vc_b) = per_task(calls_a, n_a), per_task(calls_b, n_b)
    out: dict[str, float | None] = {"duration_effect_ms": None, "duration_effect_se_ms": None}
    if d_a is not None and d_b is not None:
        c_mid = (c_a + c_b) / 2
        out = {"duration_effect_ms": c_mid * (d_b - d_a), "duration_effect_se_ms": c_mid * (vd_a + vd_b) ** 0.5}
    known = [d for d in (d_a, d_b) if d is not None]
    d_mid = sum(known) / len(known) if known else 0.0
    out.update({"frequency_effect_ms": d_mid * (c_b - c_a),
                "frequency_effect_se_ms": d_mid * (vc_a + vc_b) ** 0.5})
    return out


def _per_call_test(figures: GroupFigures, dimension: str, kind: str, key: str, a: str, b: str) -> float | None:
    """Mann-Whitney p-value of the self time per call, A against B, from the two histograms. Rank-
    based, so a tool whose every call got twice as slow stands out even when a few timeouts make
    its mean noisy."""
    ha = figures.bins.get((a, dimension, kind, key))
    hb = figures.bins.get((b, dimension, kind, key))
    if ha is None or hb is None or ha.sum() < PER_CALL_MIN or hb.sum() < PER_CALL_MIN:
        return None
    return stats.mann_whitney_binned_p(ha, hb)


def _per_call_quantiles(figures: GroupFigures, release: str, dimension: str, kind: str, key: str,
                        max_ms: float) -> tuple[float | None, float | None]:
    """p50 and p95 of the self time per call, from the histogram (within 1.93 %)."""
    hist = figures.bins.get((release, dimension, kind, key))
    if hist is None or not hist.any():
        return None, None
    p50, p95 = rollups.Summary(max_ms=max_ms, bins=hist.astype(np.int64)).quantiles((0.5, 0.95))
    return p50, p95


def _ranked(rows: list[dict], *, direction: int, alpha: float) -> list[dict]:
    """Rows whose change is significant first, then the others; within each, by contribution in
    `direction` (+1: what made B slower first, −1: what made it faster, 0: largest either way).

    Significant = its calls got slower or faster (per-call Mann-Whitney p below alpha / rows) or
    its contribution's interval excludes zero (z for alpha / rows): Bonferroni over the rows, so
    with sixty groups one lucky row does not outrank a tool whose every call got twice as slow."""
    tests = max(len(rows), 1)
    z = float(scipy_stats.norm.ppf(1 - alpha / (2 * tests)))
    for r in rows:
        p = r["per_call_p_value"]
        r["significant"] = bool((p is not None and p < alpha / tests)
                                or abs(r["contribution_ms"]) > max(z * r["contribution_se_ms"], _ROUNDING_MS))

    def size(r: dict) -> float:
        return _rounded(direction * r["contribution_ms"] if direction else abs(r["contribution_ms"]))

    return sorted(rows, key=lambda r: (not r["significant"], -size(r), r["key"]))


def _task_totals(figures: GroupFigures, a: str, b: str) -> dict[str, dict]:
    """Per release: tasks, Σ and mean duration, analysed tasks, steps, failed steps, tokens."""
    out = {r: {"tasks": 0, "sum_ms": 0.0, "mean_ms": 0.0, "analyzed": 0, "steps": 0, "errors": 0, "tokens": 0}
           for r in (a, b)}
    for (release, _), values in figures.of("task").get(("", ""), {}).items():
        if release in out:
            row = out[release]
            row["tasks"] += int(_column(values, "tasks"))
            row["sum_ms"] += _column(values, "other_ms")
            row["analyzed"] += int(_column(values, "analysed"))
            row["steps"] += int(_column(values, "calls"))
            row["errors"] += int(_column(values, "errors"))
            row["tokens"] += int(_column(values, "tokens"))
    for row in out.values():
        row["mean_ms"] = row["sum_ms"] / row["tasks"] if row["tasks"] else 0.0
    return out


def _step_attribution(figures: GroupFigures, a: str, b: str, task_totals: dict[str, dict], *, alpha: float,
                      direction: int) -> dict:
    """Per dimension, a row per group with its contribution, ranked; the per-task totals; the
    change within task names and the part due to the task-name mix."""
    strata = _Strata.of(figures, a, b)
    n = {r: max(task_totals[r]["tasks"], 1) for r in (a, b)}
    overall_delta = task_totals[b]["mean_ms"] - task_totals[a]["mean_ms"]
    within_delta = sum(w * (strata.duration_sums[b][t] / strata.tasks[b][t]
                            - strata.duration_sums[a][t] / strata.tasks[a][t])
                       for t, w in strata.weights.items())
    sides = _Sides(a, b, n, task_totals, within_delta)
    out: dict[str, list[dict]] = {}
    for dimension, stored in _DIMENSIONS.items():
        rows = _group_rows(figures, dimension, stored, strata, sides)
        if dimension == "steps":
            contribution, se = _stratified(strata.rest, strata.tasks, strata.weights, a, b)
            outside = {r: {"self_ms": sum(m[0] for m in strata.rest[r].values())} for r in (a, b)}
            rows.append(sides.row(REST_KEY, {"kind": "", "name": REST_KEY}, outside[a], outside[b], {}, contribution,
                                  se, None) | {"frequency_effect_ms": None, "frequency_effect_se_ms": None})
        out[dimension] = _ranked(rows, direction=direction, alpha=alpha)
    tools = figures.per_release("kind").get(("tool", ""), {})
    out["totals"] = {
        r: {"steps_per_task": task_totals[r]["steps"] / n[r],
            "tool_calls_per_task": (_column(tools[r], "calls") if r in tools else 0) / n[r],
            "tokens_per_task": task_totals[r]["tokens"] / n[r],
            "step_error_rate": _ratio(task_totals[r]["errors"], task_totals[r]["steps"])}
        for r in (a, b)}
    out["within_delta_ms"] = within_delta
    out["mix_ms"] = overall_delta - within_delta
    return out


@dataclass
class _Strata:
    """Both releases' tasks by task name, the strata the contributions are computed within: per
    release and name the tasks (`tasks`), their summed duration (`duration_sums`) and the Σ and
    Σ² of their time outside steps (`rest`); the names both releases ran (`common`) and their
    pooled share of those releases' tasks (`weights`)."""

    tasks: dict[str, dict[str, int]]
    duration_sums: dict[str, dict[str, float]]
    rest: dict[str, dict[str, tuple[float, float]]]
    common: set[str]
    weights: dict[str, float]

    @classmethod
    def of(cls, figures: GroupFigures, a: str, b: str) -> _Strata:
        strata: dict[str, dict[str, int]] = {a: {}, b: {}}
        duration_sums: dict[str, dict[str, float]] = {a: {}, b: {}}
        rest: dict[str, dict[str, tuple[float, float]]] = {a: {}, b: {}}
        for (release, task_name), values in figures.of("task").get(("", ""), {}).items():
            if release in strata and _column(values, "tasks"):
                strata[release][task_name] = int(_column(values, "tasks"))
                duration_sums[release][task_name] = _column(values, "other_ms")
                rest[release][task_name] = (_column(values, "sum_ms"), _column(values, "sum_sq"))
        common = set(strata[a]) & set(strata[b])
        pooled = sum(strata[a][t] + strata[b][t] for t in common)
        weights = {t: (strata[a][t] + strata[b][t]) / pooled for t in common} if pooled else {}
        return cls(strata, duration_sums, rest, common, weights)


@dataclass(frozen=True)
class _Sides:
    """Releases a and b as every attribution row compares them: tasks per release (at least 1),
    their totals, and the change in mean duration within task names."""

    a: str
    b: str
    n: dict[str, int]
    task_totals: dict[str, dict]
    within_delta: float

    def row(self, key: str, labels: dict, fa: dict, fb: dict, calls: dict[str, list[float]], contribution, se,
            p_value) -> dict:
        """One group's row: its contribution, the split into slower and more calls, and its
        figures per task and per call in each release (`fa`, `fb`: from `_release_figures`)."""
        a, b, n, task_totals = self.a, self.b, self.n, self.task_totals
        effects = _effects(fa, fb, calls.get(a, [0.0, 0.0]), calls.get(b, [0.0, 0.0]), n[a], n[b])
        return {
            "key": key, **labels,
            "contribution_ms": contribution, "contribution_se_ms": se, **effects,
            "contribution_share": (contribution / self.within_delta) if self.within_delta else None,
            "mean_a_ms": fa.get("self_ms", 0.0) / n[a], "mean_b_ms": fb.get("self_ms", 0.0) / n[b],
            "share_a": _ratio(fa.get("self_ms", 0.0), task_totals[a]["sum_ms"]),
            "share_b": _ratio(fb.get("self_ms", 0.0), task_totals[b]["sum_ms"]),
            "p50_a_ms": fa.get("p50_ms"), "p50_b_ms": fb.get("p50_ms"),
            "p95_a_ms": fa.get("p95_ms"), "p95_b_ms": fb.get("p95_ms"),
            "calls_per_task_a": fa.get("count", 0) / n[a], "calls_per_task_b": fb.get("count", 0) / n[b],
            "tokens_per_task_a": fa.get("tokens", 0) / n[a], "tokens_per_task_b": fb.get("tokens", 0) / n[b],
            "error_rate_a": fa.get("error_rate"), "error_rate_b": fb.get("error_rate"),
            "per_call_p_value": p_value,
        }


def _group_rows(figures: GroupFigures, dimension: str, stored: str, strata: _Strata, sides: _Sides) -> list[dict]:
    """A row per group of one dimension (`stored`: its name in the rollups), unranked: its
    contribution within task names, its per-call test and figures."""
    a, b = sides.a, sides.b
    rows = []
    per_release = figures.per_release(stored)
    for (kind, key), cells in figures.of(stored).items():
        moments: dict[str, dict[str, tuple[float, float]]] = {a: {}, b: {}}
        calls: dict[str, list[float]] = {a: [0.0, 0.0], b: [0.0, 0.0]}
        for (release, task_name), values in cells.items():
            if release not in moments:
                continue
            if task_name in strata.common:
                moments[release][task_name] = (_column(values, "sum_ms"), _column(values, "sum_sq"))
            calls[release][0] += _column(values, "calls")
            calls[release][1] += _column(values, "calls_sq")
        per = _release_figures(figures, stored, kind, key, per_release[(kind, key)])
        contribution, se = _stratified(moments, strata.tasks, strata.weights, a, b)
        labels = {"kind": kind if dimension in ("steps", "kinds") else "",
                  "name": key if dimension == "steps" else ""}
        rows.append(sides.row(_display_key(dimension, kind, key), labels, per.get(a, {}), per.get(b, {}), calls,
                              contribution, se, _per_call_test(figures, stored, kind, key, a, b)))
    return rows


def _release_figures(figures: GroupFigures, dimension: str, kind: str, key: str,
                     per: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per release, a group's calls, Σ and Σ² of self time per call, p50/p95, error rate, tokens."""
    out = {}
    for r, values in per.items():
        count = _column(values, "calls")
        p50, p95 = _per_call_quantiles(figures, r, dimension, kind, key, float(values[-1]))
        out[r] = {"count": int(count), "self_ms": _column(values, "sum_ms"),
                  "self_squares": _column(values, "call_sq"), "p50_ms": p50, "p95_ms": p95,
                  "error_rate": _column(values, "errors") / count if count else None,
                  "tokens": int(_column(values, "tokens"))}
    return out


def _rounded(value: float) -> float:
    """A sort key without float noise: sums taken in another order (rollups, raw rows) keep the
    rows' order, ties going by name."""
    return round(value / _ROUNDING_MS) * _ROUNDING_MS


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _finding_rates(figures: GroupFigures, a: str, b: str, totals: dict[str, dict]) -> list[dict]:
    """Share of analysed tasks with at least one finding of each kind, and wasted ms per task."""
    rows = []
    for (_, kind), per in figures.per_release("finding").items():
        row = {"kind": kind}
        for side, r in (("a", a), ("b", b)):
            values = per.get(r)
            tasks, wasted = (_column(values, "tasks"), _column(values, "sum_ms")) if values is not None else (0, 0.0)
            analyzed = totals[r]["analyzed"]
            row[f"rate_{side}"] = _ratio(tasks, analyzed)
            row[f"wasted_per_task_{side}_ms"] = _ratio(wasted, analyzed)
        row["delta_rate"] = (row["rate_b"] or 0) - (row["rate_a"] or 0)
        row["delta_wasted_ms"] = (row["wasted_per_task_b_ms"] or 0) - (row["wasted_per_task_a_ms"] or 0)
        row["summary"] = (f"{kind} went from {100 * (row['rate_a'] or 0):.0f}% to "
                          f"{100 * (row['rate_b'] or 0):.0f}% of tasks")
        rows.append(row)
    rows.sort(key=lambda r: (-_rounded(r["delta_wasted_ms"]), -_rounded(r["delta_rate"]), r["kind"]))
    return rows


def _budget(figures: GroupFigures, a: str, b: str, totals: dict[str, dict]) -> list[dict]:
    """Mean ms per analysed task in each latency-budget category, and its share of the budget."""
    sums = {key: {r: _column(v, "sum_ms") for r, v in per.items()}
            for (_, key), per in figures.per_release("budget").items()}
    whole = {r: sum(per.get(r, 0.0) for per in sums.values()) for r in (a, b)}
    rows = []
    for key, per in sums.items():
        mean_a = _ratio(per.get(a, 0.0), totals[a]["analyzed"])
        mean_b = _ratio(per.get(b, 0.0), totals[b]["analyzed"])
        rows.append({"category": key, "mean_a_ms": mean_a, "mean_b_ms": mean_b,
                     "delta_ms": (mean_b or 0) - (mean_a or 0),
                     "share_a": _ratio(per.get(a, 0.0), whole[a]),
                     "share_b": _ratio(per.get(b, 0.0), whole[b])})
    rows.sort(key=lambda r: (-_rounded(abs(r["delta_ms"])), r["category"]))
    return rows


def _whatif(figures: GroupFigures, a: str, b: str) -> list[dict]:
    """Mean projected duration and saving per scenario, over the analysed tasks that have it.
    The saving is measured against the task's critical path (`actual_ms`) when the analysis
    gives it, else against the task duration."""
    rows = []
    for (_, name), per in figures.per_release("whatif").items():
        row = {"scenario": name}
        for side, r in (("a", a), ("b", b)):
            values = per.get(r)
            n = int(_column(values, "tasks")) if values is not None else 0
            row.update({f"projected_{side}_ms": _column(values, "sum_ms") / n if n else None,
                        f"saved_{side}_ms": _column(values, "other_ms") / n if n else None, f"tasks_{side}": n})
        rows.append(row)
    rows.sort(key=lambda r: (-_rounded(r["saved_b_ms"] or 0), r["scenario"]))
    return rows
