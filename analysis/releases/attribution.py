"""Where the time changed between two releases: the attribution of the change in task duration
to steps, tools, models and step kinds, plus finding rates, the latency budget and the what-if
projections per release. Called by `compare.release_compare` inside its transaction.

Everything here works on a uniform random sample of at most `ATTRIBUTION_TASKS` tasks per
release (drawn in SQL into session-private temporary tables, with their steps and analyses), so
its cost does not grow with the release. A mean or a rate from 4,000 tasks has a standard error
of 1.6 % of the spread of its per-task values; every contribution carries its own standard error.
(10,000 tasks, 1 %, cost 1.8× the time at 10M steps: 4.3 s against 2.4 s for the comparison.)

Method: a task's duration splits into the self time of each of its steps (its duration minus
its children's, floored at zero, so nested steps are not counted twice) plus the rest (idle gaps
and framework time outside any step, minus overlap of parallel steps). For every group (step
kind + name, step kind, tool, model):
    contribution = Σ over task names t of w_t · (mean self time per task of t in B − in A)
with w_t the pooled share of t's tasks in both releases. Comparing within task names keeps a
different mix of task names (more research tasks in B, say) from being blamed on the steps those
tasks happen to use; that mix effect is reported once, as `mix_ms`, so contributions over all
steps plus the rest plus the mix add up to Δ(mean task duration). Each contribution has a
standard error from the per-task variance and splits into slower calls and more calls.

Ranking: rows that changed significantly come first — their per-call self times differ
(Mann-Whitney, rank-based, so a few timeouts do not hide a tool whose every call doubled) or
their contribution's interval excludes zero, both Bonferroni-corrected for the number of rows —
then by contribution in the direction of the change (what made B slower, when it is slower).
Sorting by contribution alone would let a noisy ±150 ms from LLM calls outrank a certain +70 ms
from a tool that doubled; on the simulator's demo traffic the doubled tool is the top row
(tests/releases/test_simulated_regression.py).
"""

from __future__ import annotations

from collections import defaultdict

from django.db import connection
from scipy import stats as scipy_stats

from analysis.releases import stats
from analysis.releases.db import FAILED_SQL, fetch

ATTRIBUTION_TASKS = 4_000
# Per-call tests read at most this many of the sampled steps (uniformly).
PER_CALL_CAP = 200_000
PER_CALL_MIN = 5
REST_KEY = "(time outside steps)"
METHOD = ("contribution = change in mean self time per task (ms), within task names, weighted by "
          "their pooled share of tasks; significant rows first (per-call Mann-Whitney or the "
          "contribution's interval, Bonferroni over the rows), then by contribution in the "
          "direction of the change; mix_ms = the part due to a different task-name mix")


def where_it_changed(*, base: tuple[str, tuple], a: str, b: str, counts: dict[str, int],
                     alpha: float, direction: int) -> dict:
    """Attribution (steps, kinds, tools, models), budget, finding rates and what-if for the tasks
    of `base` (SQL selecting id, release, name, duration_ms). Must run inside a transaction."""
    _attribution_sample(base, a, b, counts)
    totals = _sample_task_totals(a, b)
    out = {
        "totals": totals,
        "attribution": _step_attribution(a, b, totals, alpha=alpha, direction=direction),
        "budget": _budget(a, b, totals),
        "findings": _finding_rates(a, b, totals),
        "whatif": _whatif(a, b),
    }
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {SAMPLE_TABLE}, {STEPS_TABLE}, {ANALYSES_TABLE}")
    return out


SAMPLE_TABLE = "release_compare_sample"
STEPS_TABLE = "release_compare_steps"
ANALYSES_TABLE = "release_compare_analyses"
# Bits of GROUPING(kind, name, tool_name, model): 1 = that column is not grouped.
_DIMENSIONS = {0b0011: "steps", 0b0111: "kinds", 0b1101: "tools", 0b1110: "models"}
_ALL_STEPS = 0b1111


def _attribution_sample(base: tuple[str, tuple], a: str, b: str, n: dict[str, int]) -> None:
    """Draws the attribution sample into session-private temporary tables that the queries below
    read: the sampled tasks (id, release, task name, duration) and their steps with self time.
    One scan of the tasks, one index lookup per sampled task, no id lists shipped back and forth."""
    probs = [min(1.0, ATTRIBUTION_TASKS / n[r]) if n.get(r) else 0.0 for r in (a, b)]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {SAMPLE_TABLE}, {STEPS_TABLE}, {ANALYSES_TABLE}")
        cursor.execute(f"""
            CREATE TEMPORARY TABLE {SAMPLE_TABLE} ON COMMIT DROP AS
            SELECT id, release, name, duration_ms FROM ({base[0]}) t
            WHERE random() < CASE release WHEN %s THEN %s::float8 ELSE %s::float8 END""",
                       base[1] + (a, *probs))
        cursor.execute(f"ALTER TABLE {SAMPLE_TABLE} ADD PRIMARY KEY (id)")
        cursor.execute(f"ANALYZE {SAMPLE_TABLE}")
        cursor.execute(f"""
            CREATE TEMPORARY TABLE {ANALYSES_TABLE} ON COMMIT DROP AS
            SELECT rs.id, rs.release, rs.duration_ms, ta.budget, ta.whatif
            FROM {SAMPLE_TABLE} rs JOIN analysis_taskanalysis ta ON ta.task_id = rs.id""")
        cursor.execute(f"""
            CREATE TEMPORARY TABLE {STEPS_TABLE} ON COMMIT DROP AS
            WITH st AS (
                SELECT s.task_id, s.step_id, s.parent_step_id, s.kind, s.name, s.tool_name, s.model,
                       s.duration_ms, (s.status {FAILED_SQL}) AS failed,
                       coalesce(s.input_tokens, 0) + coalesce(s.output_tokens, 0) AS tokens,
                       rs.release, rs.name AS task_name
                -- one index lookup per sampled task (OFFSET 0 keeps the planner from flattening
                -- it into a hash join over every step: 4.2 s on 10M steps for 20k tasks vs 2.8)
                FROM {SAMPLE_TABLE} rs
                CROSS JOIN LATERAL (SELECT * FROM ingest_step x WHERE x.task_id = rs.id OFFSET 0) s
            ), kids AS (
                SELECT task_id, parent_step_id AS step_id, sum(duration_ms) AS child_ms
                FROM st WHERE parent_step_id <> '' GROUP BY 1, 2
            )
            SELECT st.release, st.task_name, st.task_id, st.kind, st.name, st.tool_name, st.model,
                   st.duration_ms, st.failed, st.tokens,
                   greatest(st.duration_ms - coalesce(kids.child_ms, 0), 0) AS self_ms
            FROM st LEFT JOIN kids USING (task_id, step_id)""")


# Per group and release, over all sampled steps: the figures shown next to the contribution.
_GROUP_FIGURES_SQL = f"""
    SELECT release, kind, name, tool_name, model, GROUPING(kind, name, tool_name, model),
           count(*), sum(self_ms), sum(self_ms * self_ms),
           percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY duration_ms),
           avg(failed::int), sum(tokens)
    FROM {STEPS_TABLE}
    GROUP BY GROUPING SETS ((release), (release, kind), (release, kind, name), (release, tool_name),
                            (release, model))"""

# Per group, release and task name: Σ and Σ² over tasks of the group's self time in a task, for
# the stratified mean and its standard error.
_GROUP_MOMENTS_SQL = f"""
    WITH per_task AS (
        SELECT release, task_name, task_id, kind, name, tool_name, model,
               GROUPING(kind, name, tool_name, model) AS g, sum(self_ms) AS self_ms,
               count(*) AS calls
        FROM {STEPS_TABLE}
        GROUP BY GROUPING SETS ((release, task_name, task_id, kind, name),
                                (release, task_name, task_id, kind),
                                (release, task_name, task_id, tool_name),
                                (release, task_name, task_id, model))
    )
    SELECT release, task_name, kind, name, tool_name, model, g, sum(self_ms), sum(self_ms * self_ms),
           sum(calls), sum(calls * calls)
    FROM per_task GROUP BY release, task_name, kind, name, tool_name, model, g"""

# Per release and task name: tasks, and Σ, Σ² of task duration and of time outside steps.
_STRATA_SQL = f"""
    SELECT rs.release, rs.name, count(*), sum(rs.duration_ms),
           sum(rs.duration_ms - coalesce(t.self_ms, 0)),
           sum((rs.duration_ms - coalesce(t.self_ms, 0)) ^ 2)
    FROM {SAMPLE_TABLE} rs
    LEFT JOIN (SELECT task_id, sum(self_ms) AS self_ms FROM {STEPS_TABLE} GROUP BY task_id) t
           ON t.task_id = rs.id
    GROUP BY 1, 2"""


def _group_key(dimension: str, kind, name, tool, model) -> str | None:
    if dimension == "steps":
        return f"{kind}:{name}" if name else f"{kind}:(unnamed)"
    if dimension == "kinds":
        return kind
    if dimension == "tools":
        return tool or None
    return model or None


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


def _per_call_tests(a: str, b: str) -> dict[str, dict[str, float]]:
    """Mann-Whitney p-value per dimension and group of the per-call self time, A against B, over
    a uniform sample of at most PER_CALL_CAP of the sampled steps. Rank-based, so a tool whose
    every call got twice as slow stands out even when a few timeouts make its mean noisy."""
    total = fetch(f"SELECT count(*) FROM {STEPS_TABLE}")[0][0]
    rows = fetch(f"""SELECT release, kind, name, tool_name, model, self_ms FROM {STEPS_TABLE}
                      WHERE random() < %s""", (min(1.0, PER_CALL_CAP / max(total, 1)),))
    values: dict[str, dict[str, dict[str, list[float]]]] = {
        d: defaultdict(lambda: {a: [], b: []}) for d in _DIMENSIONS.values()}
    for release, kind, name, tool, model, self_ms in rows:
        for dimension in ("steps", "kinds", "tools", "models"):
            key = _group_key(dimension, kind, name, tool, model)
            if key is not None:
                values[dimension][key][release].append(self_ms)
    out: dict[str, dict[str, float]] = {}
    for dimension, groups in values.items():
        out[dimension] = {}
        for key, sides in groups.items():
            if len(sides[a]) >= PER_CALL_MIN and len(sides[b]) >= PER_CALL_MIN:
                p = stats.mann_whitney_p(sides[a], sides[b])
                if p is not None:
                    out[dimension][key] = p
    return out


def _ranked(rows: list[dict], *, direction: int, alpha: float, p_values: dict[str, float]) -> list[dict]:
    """Rows whose change is significant first, then the others; within each, by contribution in
    `direction` (+1: what made B slower first, −1: what made it faster, 0: largest either way).

    Significant = its calls got slower or faster (per-call Mann-Whitney p below alpha / rows) or
    its contribution's interval excludes zero (z for alpha / rows): Bonferroni over the rows, so
    with sixty groups one lucky row does not outrank a tool whose every call got twice as slow."""
    tests = max(len(rows), 1)
    z = float(scipy_stats.norm.ppf(1 - alpha / (2 * tests)))
    for r in rows:
        p = p_values.get(r["key"])
        r["per_call_p_value"] = p
        r["significant"] = bool((p is not None and p < alpha / tests)
                                or abs(r["contribution_ms"]) > z * r["contribution_se_ms"])

    def size(r: dict) -> float:
        return direction * r["contribution_ms"] if direction else abs(r["contribution_ms"])

    return sorted(rows, key=lambda r: (not r["significant"], -size(r), r["key"]))


def _step_attribution(a: str, b: str, task_totals: dict[str, dict], *, alpha: float,
                      direction: int) -> dict:
    figures: dict[str, dict[str, dict]] = defaultdict(lambda: defaultdict(dict))
    labels: dict[tuple[str, str], dict] = {}
    totals: dict[str, dict] = {}
    for (release, kind, name, tool, model, g, count, self_ms, self_squares, pcts, error_rate,
         tokens) in fetch(_GROUP_FIGURES_SQL):
        row = {"count": count, "self_ms": float(self_ms or 0), "self_squares": float(self_squares or 0),
               "p50_ms": pcts[0], "p95_ms": pcts[1], "error_rate": float(error_rate),
               "tokens": int(tokens or 0)}
        if g == _ALL_STEPS:
            totals[release] = row
            continue
        dimension = _DIMENSIONS[g]
        key = _group_key(dimension, kind, name, tool, model)
        if key is not None:
            figures[dimension][key][release] = row
            labels[(dimension, key)] = {"kind": kind if dimension in ("steps", "kinds") else "",
                                        "name": name if dimension == "steps" else ""}

    per_call = _per_call_tests(a, b)
    strata: dict[str, dict[str, int]] = {a: {}, b: {}}
    duration_sums: dict[str, dict[str, float]] = {a: {}, b: {}}
    rest: dict[str, dict[str, tuple[float, float]]] = {a: {}, b: {}}
    for release, task_name, n, duration, rest_sum, rest_squares in fetch(_STRATA_SQL):
        strata[release][task_name] = n
        duration_sums[release][task_name] = float(duration)
        rest[release][task_name] = (float(rest_sum), float(rest_squares))
    common = set(strata[a]) & set(strata[b])
    pooled = sum(strata[a][t] + strata[b][t] for t in common)
    weights = {t: (strata[a][t] + strata[b][t]) / pooled for t in common} if pooled else {}

    moments: dict[tuple[str, str], dict[str, dict[str, tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(dict))
    call_moments: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0, 0.0]))
    for (release, task_name, kind, name, tool, model, g, total, squares, calls,
         call_squares) in fetch(_GROUP_MOMENTS_SQL):
        dimension = _DIMENSIONS[g]
        key = _group_key(dimension, kind, name, tool, model)
        if key is None:
            continue
        if task_name in common:
            moments[(dimension, key)][release][task_name] = (float(total or 0), float(squares or 0))
        acc = call_moments[(dimension, key)][release]
        acc[0] += float(calls)
        acc[1] += float(call_squares)

    n = {r: max(task_totals[r]["tasks"], 1) for r in (a, b)}
    overall_delta = task_totals[b]["mean_ms"] - task_totals[a]["mean_ms"]
    within_delta = sum(w * (duration_sums[b][t] / strata[b][t] - duration_sums[a][t] / strata[a][t])
                       for t, w in weights.items())

    def row(dimension: str, key: str, per_release: dict[str, dict], contribution, se) -> dict:
        fa, fb = per_release.get(a, {}), per_release.get(b, {})
        effects = _effects(fa, fb, call_moments.get((dimension, key), {}).get(a, [0.0, 0.0]),
                           call_moments.get((dimension, key), {}).get(b, [0.0, 0.0]), n[a], n[b])
        return {
            "key": key, **labels.get((dimension, key), {"kind": "", "name": ""}),
            "contribution_ms": contribution, "contribution_se_ms": se, **effects,
            "contribution_share": (contribution / within_delta) if within_delta else None,
            "mean_a_ms": fa.get("self_ms", 0.0) / n[a], "mean_b_ms": fb.get("self_ms", 0.0) / n[b],
            "share_a": _ratio(fa.get("self_ms", 0.0), task_totals[a]["sum_ms"]),
            "share_b": _ratio(fb.get("self_ms", 0.0), task_totals[b]["sum_ms"]),
            "p50_a_ms": fa.get("p50_ms"), "p50_b_ms": fb.get("p50_ms"),
            "p95_a_ms": fa.get("p95_ms"), "p95_b_ms": fb.get("p95_ms"),
            "calls_per_task_a": fa.get("count", 0) / n[a], "calls_per_task_b": fb.get("count", 0) / n[b],
            "tokens_per_task_a": fa.get("tokens", 0) / n[a], "tokens_per_task_b": fb.get("tokens", 0) / n[b],
            "error_rate_a": fa.get("error_rate"), "error_rate_b": fb.get("error_rate"),
        }

    out: dict[str, list[dict]] = {}
    for dimension in ("steps", "kinds", "tools", "models"):
        rows = []
        for key, per in figures[dimension].items():
            contribution, se = _stratified(moments[(dimension, key)], strata, weights, a, b)
            rows.append(row(dimension, key, per, contribution, se))
        if dimension == "steps":
            contribution, se = _stratified(rest, strata, weights, a, b)
            outside = {r: {"self_ms": task_totals[r]["sum_ms"] - totals.get(r, {}).get("self_ms", 0.0)}
                       for r in (a, b)}
            rows.append(row("steps", REST_KEY, outside, contribution, se) | {
                "kind": "", "name": REST_KEY, "frequency_effect_ms": None, "frequency_effect_se_ms": None})
        out[dimension] = _ranked(rows, direction=direction, alpha=alpha,
                                 p_values=per_call[dimension])
    tool_rows = {r: figures["kinds"].get("tool", {}).get(r, {}) for r in (a, b)}
    out["totals"] = {
        r: {"steps_per_task": totals.get(r, {}).get("count", 0) / n[r],
            "tool_calls_per_task": tool_rows[r].get("count", 0) / n[r],
            "tokens_per_task": totals.get(r, {}).get("tokens", 0) / n[r],
            "step_error_rate": totals.get(r, {}).get("error_rate")}
        for r in (a, b)}
    out["within_delta_ms"] = within_delta
    out["mix_ms"] = overall_delta - within_delta
    return out


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _sample_task_totals(a: str, b: str) -> dict[str, dict]:
    sql = f"""SELECT rs.release, count(*), sum(rs.duration_ms), count(ta.id)
              FROM {SAMPLE_TABLE} rs LEFT JOIN {ANALYSES_TABLE} ta ON ta.id = rs.id
              GROUP BY rs.release"""
    out = {r: {"tasks": 0, "sum_ms": 0.0, "mean_ms": 0.0, "analyzed": 0} for r in (a, b)}
    for release, n, total, analyzed in fetch(sql):
        out[release] = {"tasks": n, "sum_ms": float(total), "mean_ms": float(total) / n,
                        "analyzed": analyzed}
    return out


def _finding_rates(a: str, b: str, totals: dict[str, dict]) -> list[dict]:
    """Share of analysed tasks with at least one finding of each kind, and wasted ms per task."""
    sql = f"""SELECT rs.release, f.kind, count(DISTINCT f.task_id), sum(f.wasted_ms)
              FROM analysis_finding f JOIN {SAMPLE_TABLE} rs ON rs.id = f.task_id GROUP BY 1, 2"""
    figures: dict[str, dict[str, tuple[int, float]]] = defaultdict(dict)
    for release, kind, tasks, wasted in fetch(sql):
        figures[kind][release] = (tasks, float(wasted or 0))
    rows = []
    for kind, per in figures.items():
        row = {"kind": kind}
        for side, r in (("a", a), ("b", b)):
            tasks, wasted = per.get(r, (0, 0.0))
            analyzed = totals[r]["analyzed"]
            row[f"rate_{side}"] = _ratio(tasks, analyzed)
            row[f"wasted_per_task_{side}_ms"] = _ratio(wasted, analyzed)
        row["delta_rate"] = (row["rate_b"] or 0) - (row["rate_a"] or 0)
        row["delta_wasted_ms"] = (row["wasted_per_task_b_ms"] or 0) - (row["wasted_per_task_a_ms"] or 0)
        row["summary"] = (f"{kind} went from {100 * (row['rate_a'] or 0):.0f}% to "
                          f"{100 * (row['rate_b'] or 0):.0f}% of tasks")
        rows.append(row)
    rows.sort(key=lambda r: (-r["delta_wasted_ms"], -r["delta_rate"], r["kind"]))
    return rows


def _budget(a: str, b: str, totals: dict[str, dict]) -> list[dict]:
    """Mean ms per analysed task in each latency-budget category, and its share of the budget."""
    sql = f"""SELECT ta.release, kv.key, sum((kv.value)::text::float8)
              FROM {ANALYSES_TABLE} ta,
                   jsonb_each(CASE jsonb_typeof(ta.budget) WHEN 'object' THEN ta.budget
                              ELSE '{{}}'::jsonb END) kv
              WHERE jsonb_typeof(kv.value) = 'number'
              GROUP BY 1, 2"""
    sums: dict[str, dict[str, float]] = defaultdict(dict)
    for release, key, total in fetch(sql):
        sums[key][release] = float(total)
    whole = {r: sum(per.get(r, 0.0) for per in sums.values()) for r in (a, b)}
    rows = []
    for key, per in sums.items():
        mean_a = _ratio(per.get(a, 0.0), totals[a]["analyzed"])
        mean_b = _ratio(per.get(b, 0.0), totals[b]["analyzed"])
        rows.append({"category": key, "mean_a_ms": mean_a, "mean_b_ms": mean_b,
                     "delta_ms": (mean_b or 0) - (mean_a or 0),
                     "share_a": _ratio(per.get(a, 0.0), whole[a]),
                     "share_b": _ratio(per.get(b, 0.0), whole[b])})
    rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["category"]))
    return rows


# What-if scenarios as the analysis stores them (analysis/whatif.py): top-level `<name>_ms`
# projections (parallel, cached, parallel_cached; `actual_ms` and `llm_path_ms` are inputs), and
# per hardware family {"ms", "with_fixes_ms"}. Anything else in the document is ignored.
_WHATIF_SQL = r"""
    WITH w AS (
        SELECT release, duration_ms, whatif FROM {analyses} WHERE jsonb_typeof(whatif) = 'object'
    ), scenario AS (
        SELECT w.release, w.duration_ms, w.whatif, left(kv.key, -3) AS name,
               (kv.value)::text::float8 AS projected
        FROM w, jsonb_each(w.whatif) kv
        WHERE jsonb_typeof(kv.value) = 'number' AND kv.key LIKE '%\_ms'
          AND kv.key NOT IN ('actual_ms', 'llm_path_ms')
        UNION ALL
        SELECT w.release, w.duration_ms, w.whatif, 'hardware ' || hw.key || suffix.label,
               (hw.value ->> suffix.field)::float8
        FROM w,
             jsonb_each(CASE jsonb_typeof(w.whatif -> 'hardware') WHEN 'object'
                        THEN w.whatif -> 'hardware' ELSE '{{}}'::jsonb END) hw,
             (VALUES ('ms', ''), ('with_fixes_ms', ' + fixes')) suffix(field, label)
        WHERE jsonb_typeof(hw.value -> suffix.field) = 'number'
    )
    SELECT release, name, avg(projected),
           avg(CASE jsonb_typeof(whatif -> 'actual_ms') WHEN 'number'
               THEN (whatif ->> 'actual_ms')::float8 ELSE duration_ms END - projected),
           count(*)
    FROM scenario GROUP BY release, name"""


def _whatif(a: str, b: str) -> list[dict]:
    """Mean projected duration and saving per scenario, over the analysed tasks that have it.
    The saving is measured against the task's critical path (`actual_ms`) when the analysis
    gives it, else against the task duration."""
    figures: dict[str, dict[str, tuple]] = defaultdict(dict)
    for release, name, projected, saved, n in fetch(_WHATIF_SQL.format(analyses=ANALYSES_TABLE)):
        figures[name][release] = (projected, saved, n)
    rows = []
    for name, per in figures.items():
        row = {"scenario": name}
        for side, r in (("a", a), ("b", b)):
            projected, saved, n = per.get(r, (None, None, 0))
            row.update({f"projected_{side}_ms": projected, f"saved_{side}_ms": saved, f"tasks_{side}": n})
        rows.append(row)
    rows.sort(key=lambda r: (-(r["saved_b_ms"] or 0), r["scenario"]))
    return rows
