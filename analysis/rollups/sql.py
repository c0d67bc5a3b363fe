"""What a rollup row is: the tables, their dimensions, hours and days, and the SQL that computes
rollup rows from raw rows (hourly, daily, per release). Nothing here runs a statement; refresh.py
and reads.py do (docs/rollups.md, "What is stored")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from analysis.measures import FAILED_SQL, tpot_sql
from analysis.models import COUNTED_FINDING_SQL
from analysis.rollups.histograms import bin_sql

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
ORIGIN = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"

TASK_DIMENSIONS = ("release", "environment", "name")
STEP_DIMENSIONS = ("release", "environment", "kind", "name", "tool_name", "model", "device")
# Dashboard group_by → step rollup column.
STEP_GROUPS = {"kind": "kind", "name": "name", "tool": "tool_name", "model": "model", "device": "device"}
# Byte order for every text key: the grouping sorts compare millions of keys, and the
# database's linguistic collation costs several times more per comparison than memcmp. Equality,
# hence every group, is the same.
_C = 'COLLATE "C"'
# Concatenates arrays across rows (migration 0011): merging histograms row by row.
ARRAY_CAT_AGG = "agentops_array_cat_agg"


def _project(project_id: int) -> str:
    """The project's id as SQL: a number written into the statement (int(), never text from a
    request). Each table a rollup statement reads names the project, so that on Citus the
    statement runs on the one worker holding the project (docs/scaling.md, step 6); the
    statements' other parameters are positional, in the callers' `where`, so it is not one of them."""
    return str(int(project_id))


# A user turn: a task with a session (docs/sessions.md). The task rollup keeps the durations of
# the row's turns in a histogram of their own (turn_bins, turn_counts), so that the time per turn
# over months reads rollup rows, not every turn.
TURN_SQL = "t.session_id <> ''"


def task_rollup_sql(where: str) -> str:
    """INSERT … SELECT of the task rollup rows of the tasks matching `where` (alias t): all tasks,
    and the timed ones that are user turns (TURN_SQL)."""
    return f"""
        INSERT INTO analysis_task_rollup (project_id, hour, release, environment, name, tasks, errors,
                                          sum_ms, max_ms, first_at, last_at, bins, counts,
                                          turns, turn_sum_ms, turn_max_ms, turn_bins, turn_counts)
        SELECT project_id, hour, release, environment, name, sum(n), sum(e), sum(s), max(mx),
               min(lo), max(hi),
               coalesce(array_agg(b ORDER BY b) FILTER (WHERE b IS NOT NULL), '{{}}'),
               coalesce(array_agg(n ORDER BY b) FILTER (WHERE b IS NOT NULL), '{{}}'),
               sum(tn), sum(ts), max(tmx),
               coalesce(array_agg(b ORDER BY b) FILTER (WHERE b IS NOT NULL AND tn > 0), '{{}}'),
               coalesce(array_agg(tn ORDER BY b) FILTER (WHERE b IS NOT NULL AND tn > 0), '{{}}')
        FROM (SELECT t.project_id, date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN}) AS hour,
                     t.release, t.environment, t.name, {bin_sql('t.duration_ms')} AS b, count(*) AS n,
                     count(*) FILTER (WHERE t.status {FAILED_SQL}) AS e,
                     coalesce(sum(t.duration_ms), 0) AS s, max(t.duration_ms) AS mx,
                     min(t.started_at) AS lo, max(t.started_at) AS hi,
                     count(t.duration_ms) FILTER (WHERE {TURN_SQL}) AS tn,
                     coalesce(sum(t.duration_ms) FILTER (WHERE {TURN_SQL}), 0) AS ts,
                     max(t.duration_ms) FILTER (WHERE {TURN_SQL}) AS tmx
              FROM ingest_task t WHERE {where}
              GROUP BY 1, 2, 3, 4, 5, 6) g
        GROUP BY 1, 2, 3, 4, 5"""


# The step rollup's histograms: column prefix → the value binned (steps aliased s).
STEP_HISTOGRAMS = {"": "s.duration_ms", "ttft_": "s.ttft_ms", "tpot_": tpot_sql("s")}


def _counted(values: str, *, nulls: bool = False) -> str:
    """A LATERAL subquery making (bins, counts) of an array of bucket numbers: each bucket once,
    in order, with how many times it occurs (a NULL bucket, a value without one, kept with
    `nulls`, else left out)."""
    where = "" if nulls else " WHERE b IS NOT NULL"
    return (f"(SELECT array_agg(b ORDER BY b) AS bins, array_agg(n ORDER BY b) AS counts"
            f" FROM (SELECT b, count(*) AS n FROM unnest({values}) AS u(b){where} GROUP BY 1) y)")


def step_rollup_sql(where: str, *, project_id: int) -> str:
    """One pass over the steps: grouped once by the row's keys, each step's duration, TTFT and
    TPOT buckets gathered into arrays and counted within the row (rather than three groupings by
    keys and bucket: each sorted every step again). The steps are fetched task by task through
    the (task, step_id) index: a join would hash every step of every week (the step partitions
    are by the step's own time, which the task's hour does not bound)."""
    p = _project(project_id)
    dims = ", ".join(f"s.{d} {_C} AS {d}" for d in STEP_DIMENSIONS[2:])
    keys = "project_id, hour, release, environment, kind, name, tool_name, model, device"
    return f"""
        INSERT INTO analysis_step_rollup ({keys}, steps, errors, sum_ms, max_ms, bins, counts,
                                          ttft_bins, ttft_counts, tpot_bins, tpot_counts)
        SELECT {", ".join(f"g.{k}" for k in keys.split(", "))}, g.n, g.e, g.s, g.mx, d.bins, d.counts,
               coalesce(f.bins, '{{}}'), coalesce(f.counts, '{{}}'), coalesce(p.bins, '{{}}'), coalesce(p.counts, '{{}}')
        FROM (SELECT {keys}, count(*) AS n, count(*) FILTER (WHERE failed) AS e, coalesce(sum(d), 0) AS s,
                     max(d) AS mx, array_agg(b) AS b, array_agg(tb) AS tb, array_agg(pb) AS pb
              FROM (SELECT t.project_id, date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN}) AS hour,
                           t.release {_C} AS release, t.environment {_C} AS environment, {dims},
                           s.status {FAILED_SQL} AS failed,
                           s.duration_ms AS d, {bin_sql('s.duration_ms')} AS b, {bin_sql('s.ttft_ms')} AS tb,
                           {bin_sql(f"({STEP_HISTOGRAMS['tpot_']})")} AS pb
                    FROM ingest_task t CROSS JOIN LATERAL (
                        SELECT kind, name, tool_name, model, device, status, duration_ms, ttft_ms, output_tokens
                        FROM ingest_step x WHERE x.project_id = {p} AND x.task_id = t.id OFFSET 0) s
                    WHERE {where}) x
              GROUP BY {keys}) g
        CROSS JOIN LATERAL {_counted("g.b", nulls=True)} d
        CROSS JOIN LATERAL {_counted("g.tb")} f
        CROSS JOIN LATERAL {_counted("g.pb")} p"""


def budget_rollup_sql(where: str, *, project_id: int) -> str:
    """UPDATE of the task rollup rows' budget figures from the analyses of the tasks matching
    `where` (alias t): analysed tasks (a non-empty budget) and the sum per budget category, the
    categories summed within each row (no join of per-category sums back to the rows: planned as
    a nested loop, that join cost seconds). The rows' figures are complete in the CTE `k` before
    the UPDATE reads them (Citus plans no UPDATE whose FROM holds a LATERAL over a CTE it ran
    apart: "plan should not reference subplan's variable"). Parameters: those of `where`, then
    the project's id."""
    p = _project(project_id)
    dims = "hour, release, environment, name"
    return f"""
        WITH n AS (SELECT {dims}, count(*) AS n, jsonb_agg(x.budget) AS budgets
                   FROM (SELECT date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN}) AS hour, t.release,
                                t.environment, t.name, x.budget
                         FROM ingest_task t JOIN analysis_taskanalysis x ON x.task_id = t.id AND x.project_id = {p}
                         WHERE {where} AND x.budget <> '{{}}'::jsonb) x
                   GROUP BY 1, 2, 3, 4),
        k AS (SELECT n.{dims.replace(", ", ", n.")}, n.n, s.sums FROM n CROSS JOIN LATERAL (
            SELECT jsonb_object_agg(key, total) AS sums
            FROM (SELECT e.key, sum((e.value)::float8) AS total
                  FROM jsonb_array_elements(n.budgets) b,
                       jsonb_each(CASE WHEN jsonb_typeof(b) = 'object' THEN b ELSE '{{}}'::jsonb END) e
                  WHERE jsonb_typeof(e.value) = 'number' GROUP BY 1) c) s)
        UPDATE analysis_task_rollup r SET analysed = k.n, budget_ms = coalesce(k.sums, '{{}}'::jsonb)
        FROM k
        WHERE r.project_id = %s AND r.hour = k.hour AND r.release = k.release
          AND r.environment = k.environment AND r.name = k.name"""


# --- per-group figures of the release comparison ------------------------------------------------

# Rows of analysis_group_rollup; `dimension` says what a row describes:
#   step / kind / tool / model: the steps of a group (step: kind + name, kind, tool name, model)
#       tasks = tasks with a call, calls and calls_sq = Σ calls and Σ calls² per task,
#       sum_ms and sum_sq = Σ self time and Σ (self time per task)², call_sq = Σ self time² per
#       call, errors and tokens of those calls, max_ms = longest self time of a call;
#       and, in rows of their own (dimension h_step / h_kind / h_tool / h_model, task name '',
#       zero sums), the histogram of self time per call across task names (a comparison merges
#       1/names as many buckets);
#   task: all tasks (key ''): calls = steps, sum_ms / sum_sq = time outside steps per task
#       (duration − Σ self time), other_ms = Σ duration, analysed = tasks with an analysis,
#       max_ms = longest task;
#   finding (key = finding kind): tasks with one, sum_ms = Σ wasted ms; counted findings only
#       (COUNTED_FINDING_SQL: low-confidence ones are in no total);
#   budget (key = category): tasks with it, sum_ms = Σ ms;
#   whatif (key = scenario): tasks with it, sum_ms = Σ projected ms, other_ms = Σ saved ms.
# Self time: a step's duration minus its children's, floored at zero, so nested steps are not
# counted twice.
GROUP_DIMENSIONS = ("release", "environment", "task_name", "dimension", "kind", "key")
GROUP_SUMS = ("tasks", "calls", "calls_sq", "sum_ms", "sum_sq", "call_sq", "errors", "tokens", "other_ms",
              "analysed")
GROUP_COLUMNS = ("project_id", "hour", *GROUP_DIMENSIONS, *GROUP_SUMS, "max_ms", "bins", "counts")
# The merge of every rolled-up hour per release (`hour` = the end of the hours merged).
RELEASE_TABLE = "analysis_group_rollup_release"
# GROUPING(kind, name, tool_name, model) of each step dimension's grouping set.
_GROUPINGS = {3: "step", 7: "kind", 13: "tool", 14: "model"}


def _whatif_scenarios(p: str) -> str:
    """What-if documents as analysis/engine/whatif.py writes them: top-level `<scenario>_ms`
    projections (`actual_ms`, the critical path, and `llm_path_ms` are inputs) and per hardware
    family {"ms", "with_fixes_ms"}. Savings are against `actual_ms` when present, else the
    duration. One row per task of `tk` and scenario; `p` the project (_project)."""
    return rf"""
    SELECT tk.id, left(kv.key, -3) AS scenario, (kv.value)::text::float8 AS projected
    FROM tk JOIN analysis_taskanalysis ta ON ta.task_id = tk.id AND ta.project_id = {p}, jsonb_each(ta.whatif) kv
    WHERE jsonb_typeof(ta.whatif) = 'object' AND jsonb_typeof(kv.value) = 'number'
      AND kv.key LIKE '%%\_ms' AND kv.key NOT IN ('actual_ms', 'llm_path_ms', 'unknown_hardware_ms')
    UNION ALL
    SELECT tk.id, 'hardware ' || hw.key || suffix.label, (hw.value ->> suffix.field)::float8
    FROM tk JOIN analysis_taskanalysis ta ON ta.task_id = tk.id AND ta.project_id = {p},
         jsonb_each(CASE jsonb_typeof(ta.whatif -> 'hardware') WHEN 'object'
                    THEN ta.whatif -> 'hardware' ELSE '{{}}'::jsonb END) hw,
         (VALUES ('ms', ''), ('with_fixes_ms', ' + fixes')) suffix(field, label)
    WHERE jsonb_typeof(ta.whatif) = 'object' AND jsonb_typeof(hw.value -> suffix.field) = 'number'"""


# A group rollup row's figures, each named, with what a row that does not have it holds.
_ZERO = "0::float8"
_FIGURES = {"tasks": "0", "calls": "0", "calls_sq": _ZERO, "sum_ms": _ZERO, "sum_sq": _ZERO, "call_sq": _ZERO,
            "errors": "0", "tokens": "0", "other_ms": _ZERO, "analysed": "0", "max_ms": "NULL::float8",
            "bins": "'{}'::smallint[]", "counts": "'{}'::integer[]"}
_TASK_KEYS = "tk.project_id, tk.hour, tk.release, tk.environment, tk.task_name"


def _row(keys: str, **figures: str) -> str:
    """A SELECT list in GROUP_COLUMNS order: the eight key columns (`keys`), then the figures this
    kind of row has, by name; every other figure is zero, or empty for a histogram."""
    assert set(figures) <= set(_FIGURES), set(figures) - set(_FIGURES)
    return ", ".join([keys, *(figures.get(name, default) for name, default in _FIGURES.items())])


def _group_ctes(where: str, *, hour: str, lookup: bool, p: str) -> str:
    """tk (the tasks), st (their steps), calls (each step's self time), per_task (sums per task and
    grouping set), moments (sums over tasks per group), hist (self time per call, bucketed), and
    whatif (the what-if projections, one row per task and scenario)."""
    columns = "task_id, step_id, parent_step_id, kind, name, tool_name, model, duration_ms, status, input_tokens, output_tokens"
    steps = (f"CROSS JOIN LATERAL (SELECT {columns} FROM ingest_step x WHERE x.project_id = {p} AND x.task_id = tk.id"
             " OFFSET 0) s" if lookup else f"JOIN ingest_step s ON s.task_id = tk.id AND s.project_id = {p}")
    h = "project_id, hour, release, environment, task_name"
    hh = "project_id, hour, release, environment"  # histograms: across task names
    dimension = "CASE g " + " ".join(f"WHEN {g} THEN '{d}'" for g, d in _GROUPINGS.items()) + " END"
    labelled = (f"{dimension} AS dimension, CASE WHEN g IN (3, 7) THEN kind ELSE '' END AS kind,"
                " CASE g WHEN 3 THEN name WHEN 13 THEN tool_name WHEN 14 THEN model ELSE '' END AS key")
    wanted = "g IN (3, 7) OR (g = 13 AND tool_name <> '') OR (g = 14 AND model <> '')"
    sets = "({k}, kind, name{b}), ({k}, kind{b}), ({k}, tool_name{b}), ({k}, model{b})"
    C = _C
    return f"""
        WITH {_tasks_cte(where, hour=hour, p=p)}, st AS MATERIALIZED (
            SELECT s.task_id, s.step_id {C} AS step_id, s.parent_step_id {C} AS parent_step_id,
                   s.kind {C} AS kind, s.name {C} AS name, s.tool_name {C} AS tool_name, s.model {C} AS model,
                   s.duration_ms AS d, (s.status {FAILED_SQL}) AS failed,
                   coalesce(s.input_tokens, 0) + coalesce(s.output_tokens, 0) AS tokens
            FROM tk {steps}
        ), calls AS MATERIALIZED (
            SELECT st.task_id, st.kind, st.name, st.tool_name, st.model, st.failed, st.tokens,
                   greatest(st.d - coalesce(k.child, 0), 0) AS self
            FROM st LEFT JOIN (SELECT task_id, parent_step_id AS step_id, sum(d) AS child FROM st
                               WHERE parent_step_id <> '' GROUP BY 1, 2) k USING (task_id, step_id)
        ), per_task AS MATERIALIZED (
            SELECT task_id, kind, name, tool_name, model, GROUPING(kind, name, tool_name, model) AS g,
                   count(*) AS c, sum(self) AS sm, sum(self * self) AS sq,
                   count(*) FILTER (WHERE failed) AS e, sum(tokens) AS tok, max(self) AS mx
            FROM calls
            GROUP BY GROUPING SETS ({sets.format(k="task_id", b="")}, (task_id))
        ), moments AS (
            SELECT {h}, {labelled}, count(*) AS tasks, sum(c) AS calls, sum(c * c)::float8 AS calls_sq,
                   sum(sm) AS sum_ms, sum(sm * sm) AS sum_sq, sum(sq) AS call_sq, sum(e) AS errors,
                   sum(tok) AS tokens, max(mx) AS max_ms
            FROM per_task JOIN tk ON tk.id = per_task.task_id WHERE {wanted} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
        ), hist AS (
            SELECT {hh}, dimension, kind, key, h.bins, h.counts
            FROM (SELECT {hh}, {labelled}, bs FROM (
                      SELECT {hh}, kind, name, tool_name, model, GROUPING(kind, name, tool_name, model) AS g,
                             array_agg(b) AS bs
                      FROM (SELECT {_TASK_KEYS}, c.kind, c.name, c.tool_name, c.model, {bin_sql('c.self')} AS b
                            FROM calls c JOIN tk ON tk.id = c.task_id) c
                      GROUP BY GROUPING SETS ({sets.format(k=hh, b="")})) x
                  WHERE {wanted}) y
            CROSS JOIN LATERAL {_counted("y.bs", nulls=True)} h
        ), whatif AS ({_whatif_scenarios(p)})"""


def _group_rows(p: str) -> str:
    """The rows themselves, one SELECT per kind of row (docs/releases.md, "Where it changed"): a
    step group's sums over tasks, its histogram of self time per call, a task name's own time
    and counts, then the rows analyses make (_analysis_rows)."""
    moments = _row("m.project_id, m.hour, m.release, m.environment, m.task_name, m.dimension, m.kind, m.key",
                   tasks="m.tasks", calls="m.calls", calls_sq="m.calls_sq", sum_ms="m.sum_ms", sum_sq="m.sum_sq",
                   call_sq="m.call_sq", errors="m.errors", tokens="m.tokens", max_ms="m.max_ms")
    hist = _row("project_id, hour, release, environment, '', 'h_' || dimension, kind, key", bins="bins",
                counts="counts")
    own = "tk.duration_ms - coalesce(a.sm, 0)"  # a task's time outside its steps' self time
    task = _row(f"{_TASK_KEYS}, 'task', '', ''", tasks="count(*)", calls="coalesce(sum(a.c), 0)",
                calls_sq="coalesce(sum(a.c * a.c), 0)::float8", sum_ms=f"sum({own})", sum_sq=f"sum(({own}) ^ 2)",
                errors="coalesce(sum(a.e), 0)", tokens="coalesce(sum(a.tok), 0)", other_ms="sum(tk.duration_ms)",
                analysed="count(ta.task_id)", max_ms="max(tk.duration_ms)")
    return f"""
        SELECT {moments} FROM moments m
        UNION ALL
        SELECT {hist} FROM hist
        UNION ALL
        SELECT {task}
        FROM tk LEFT JOIN per_task a ON a.task_id = tk.id AND a.g = 15
                LEFT JOIN analysis_taskanalysis ta ON ta.task_id = tk.id AND ta.project_id = {p}
                                                   AND ta.analyzed_at IS NOT NULL
        GROUP BY 1, 2, 3, 4, 5
        UNION ALL{_analysis_rows(p)}"""


# The group rollup rows an analysis alone makes (a late analysis recomputes just these, and the
# task rows' analysed count): ANALYSIS_DIMENSIONS.
ANALYSIS_DIMENSIONS = ("finding", "budget", "whatif")


def _analysis_rows(p: str) -> str:
    """SELECTs of a task name's findings, time budget and what-if projections, over the CTEs `tk`
    (the tasks) and `whatif`."""
    finding = _row(f"{_TASK_KEYS}, 'finding', '', f.kind {_C}", tasks="count(DISTINCT f.task_id)",
                   sum_ms="sum(f.wasted_ms)")
    budget = _row(f"{_TASK_KEYS}, 'budget', '', e.key {_C}", tasks="count(*)", sum_ms="sum((e.value)::text::float8)")
    actual = ("CASE jsonb_typeof(ta.whatif -> 'actual_ms') WHEN 'number'"
              " THEN (ta.whatif ->> 'actual_ms')::float8 ELSE tk.duration_ms END")
    whatif = _row(f"{_TASK_KEYS}, 'whatif', '', w.scenario {_C}", tasks="count(*)", sum_ms="sum(w.projected)",
                  other_ms=f"sum({actual} - w.projected)")
    return f"""
        SELECT {finding}
        FROM tk JOIN analysis_finding f ON f.task_id = tk.id AND f.project_id = {p} AND {COUNTED_FINDING_SQL}
        GROUP BY 1, 2, 3, 4, 5, 8
        UNION ALL
        SELECT {budget}
        FROM tk JOIN analysis_taskanalysis ta ON ta.task_id = tk.id AND ta.project_id = {p},
             jsonb_each(CASE WHEN jsonb_typeof(ta.budget) = 'object' THEN ta.budget ELSE '{{}}'::jsonb END) e
        WHERE jsonb_typeof(e.value) = 'number' GROUP BY 1, 2, 3, 4, 5, 8
        UNION ALL
        SELECT {whatif}
        FROM whatif w JOIN tk ON tk.id = w.id JOIN analysis_taskanalysis ta ON ta.task_id = tk.id AND ta.project_id = {p}
        GROUP BY 1, 2, 3, 4, 5, 8"""


def _tasks_cte(where: str, *, hour: str, p: str) -> str:
    """The CTE `tk`: the project's ended tasks matching `where` (alias t), their row's keys in byte order."""
    return f"""tk AS MATERIALIZED (
            SELECT t.id, t.project_id, {hour} AS hour, t.release {_C} AS release,
                   t.environment {_C} AS environment, t.name {_C} AS task_name, t.duration_ms
            FROM ingest_task t WHERE t.project_id = {p} AND {where} AND t.duration_ms IS NOT NULL
                                     AND t.started_at IS NOT NULL
        )"""


def analysis_rows_sql(where: str, *, project_id: int) -> str:
    """SELECT of the group rollup rows analyses make (ANALYSIS_DIMENSIONS) for the project's ended
    tasks matching `where` (alias t): the part of group_rows_sql that reads no step."""
    hour = f"date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN})"
    p = _project(project_id)
    return f"""
        WITH {_tasks_cte(where, hour=hour, p=p)}, whatif AS ({_whatif_scenarios(p)}){_analysis_rows(p)}"""


def group_rows_sql(where: str, *, project_id: int, hour: str = "", lookup: bool = False) -> str:
    """SELECT of analysis_group_rollup rows (columns GROUP_COLUMNS) for the project's ended tasks
    matching `where` (alias t, placeholders used once). `hour`: the SQL of the row's time bucket (default:
    the hour of the task's start; a constant such as "'-infinity'::timestamptz" merges all hours).
    `lookup`: fetch steps task by task through the index (a few thousand tasks) instead of letting
    the planner join (a refresh's hours)."""
    hour = hour or f"date_bin(INTERVAL '1 hour', t.started_at, {ORIGIN})"
    p = _project(project_id)
    return _group_ctes(where, hour=hour, lookup=lookup, p=p) + _group_rows(p)


def _days_sql(table: str, dims: Sequence[str], sums: Sequence[str], *, task: bool,
              histograms: Sequence[str] = ("",), maxima: Sequence[str] = ("max_ms",)) -> str:
    """INSERT … SELECT of the daily rows of `table` from its hourly rows in a day range
    (params: project, from, to, those of a clause put in place of /*filter*/, project): totals
    summed; each histogram (column prefix in `histograms`) merged bucket by bucket within its
    row: a day's hourly arrays are concatenated (ARRAY_CAT_AGG) and the few dozen buckets summed,
    rather than every (row, bucket) pair sorted across the range. A task row's budget (ms per
    category) is summed per category the same way."""
    d = ", ".join(dims)
    # h: the hourly rows of the range, narrowed to what the merge reads, the day computed once and
    # the text keys in byte order.
    narrow = ", ".join([f"{x} {_C} AS {x}" for x in dims] + list(sums) + list(maxima)
                       + (["first_at", "last_at", "analysed", "budget_ms"] if task else [])
                       + [f"{h}bins, {h}counts" for h in histograms])
    totals = [f"sum({x}) AS {x}" for x in sums] + [f"max({x}) AS {x}" for x in maxima]
    totals += (["min(first_at) AS first_at", "max(last_at) AS last_at", "sum(analysed) AS analysed",
                "jsonb_agg(budget_ms) AS budgets"] if task else [])
    totals += [f"{ARRAY_CAT_AGG}({h}bins) AS {h}b, {ARRAY_CAT_AGG}({h}counts) AS {h}n" for h in histograms]
    merges = "".join(f"""
        CROSS JOIN LATERAL (SELECT array_agg(b ORDER BY b) AS bins, array_agg(n ORDER BY b) AS counts
                            FROM (SELECT u.b, sum(u.n) AS n FROM unnest(g.{h}b, g.{h}n) AS u(b, n) GROUP BY 1) x) m{i}"""
                     for i, h in enumerate(histograms))
    if task:
        merges += """
        CROSS JOIN LATERAL (SELECT jsonb_object_agg(key, total) AS budget
                            FROM (SELECT e.key, sum(e.value::float8) AS total
                                  FROM jsonb_array_elements(g.budgets) j, jsonb_each_text(j) e GROUP BY 1) x) k"""
    columns = [d, ", ".join(sums), ", ".join(maxima)] + (["first_at, last_at, analysed, budget_ms"] if task else [])
    columns += [f"{h}bins, {h}counts" for h in histograms]
    values = [", ".join(f"g.{x}" for x in (*dims, *sums, *maxima))]
    values += (["g.first_at, g.last_at, g.analysed, coalesce(k.budget, '{}'::jsonb)"] if task else [])
    values += [f"coalesce(m{i}.bins, '{{}}'), coalesce(m{i}.counts, '{{}}')" for i in range(len(histograms))]
    return f"""
        WITH h AS MATERIALIZED (
            SELECT date_bin(INTERVAL '1 day', hour, {ORIGIN}) AS day, {narrow}
            FROM {table} WHERE project_id = %s AND hour >= %s AND hour < %s /*filter*/)
        INSERT INTO {table}_day (project_id, hour, {", ".join(columns)})
        SELECT %s, g.day, {", ".join(values)}
        FROM (SELECT day, {d}, {", ".join(totals)} FROM h GROUP BY day, {d}) g{merges}"""


TASK_DAYS_SQL = _days_sql("analysis_task_rollup", TASK_DIMENSIONS, ("tasks", "errors", "sum_ms", "turns", "turn_sum_ms"),
                          task=True, histograms=("", "turn_"), maxima=("max_ms", "turn_max_ms"))
STEP_DAYS_SQL = _days_sql("analysis_step_rollup", STEP_DIMENSIONS, ("steps", "errors", "sum_ms"), task=False,
                           histograms=tuple(STEP_HISTOGRAMS))
GROUP_DAYS_SQL = _days_sql("analysis_group_rollup", GROUP_DIMENSIONS, GROUP_SUMS, task=False)


_SUMMED = ", ".join(f"sum({c}) AS {c}" for c in GROUP_SUMS)
_KEYS = "release, environment, task_name, dimension, kind, key"
RELEASE_TOTALS_SQL = f"""
    WITH h AS (
        SELECT * FROM analysis_group_rollup_day WHERE project_id = %s AND hour < %s {{releases}}
        UNION ALL
        SELECT * FROM analysis_group_rollup WHERE project_id = %s AND hour >= %s AND hour < %s {{releases}}
    ), s AS (
        SELECT project_id, {_KEYS}, {_SUMMED}, max(max_ms) AS max_ms FROM h GROUP BY 1, 2, 3, 4, 5, 6, 7
    ), b AS (
        SELECT {_KEYS}, array_agg(b ORDER BY b) AS bins, array_agg(n ORDER BY b) AS counts
        FROM (SELECT {_KEYS}, u.b, sum(u.n) AS n FROM h, unnest(h.bins, h.counts) AS u(b, n)
              GROUP BY 1, 2, 3, 4, 5, 6, 7) x
        GROUP BY 1, 2, 3, 4, 5, 6
    )
    INSERT INTO {RELEASE_TABLE} ({", ".join(GROUP_COLUMNS)})
    SELECT s.project_id, %s, {", ".join(f"s.{c}" for c in GROUP_DIMENSIONS)}, {", ".join(f"s.{c}" for c in GROUP_SUMS)},
           s.max_ms, coalesce(b.bins, '{{{{}}}}'), coalesce(b.counts, '{{{{}}}}')
    FROM s LEFT JOIN b USING ({_KEYS})"""


HOURLY_TABLES = ("analysis_task_rollup", "analysis_step_rollup", "analysis_group_rollup")
# Device telemetry per device and hour of the samples' own time (samples.py): not a task table,
# so neither recomputed with the task hours nor merged into days.
SAMPLE_TABLE = "analysis_sample_rollup"
TABLES = HOURLY_TABLES + tuple(f"{table}_day" for table in HOURLY_TABLES) + (RELEASE_TABLE, SAMPLE_TABLE)

def utc_now() -> datetime:
    return datetime.now(tz=UTC)


def day_floor(value: datetime) -> datetime:
    return hour_floor(value).replace(hour=0)


def hour_floor(value: datetime) -> datetime:
    value = value.astimezone(UTC)
    return value.replace(minute=0, second=0, microsecond=0)


def hour_ceil(value: datetime) -> datetime:
    floor = hour_floor(value)
    return floor if floor == value else floor + HOUR
