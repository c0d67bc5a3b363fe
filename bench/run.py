"""`make bench`: every performance figure of agentops side by side in one run, as a ratio
where a reference exists, printed as a table and written to bench/results/latest.json.

    .venv/bin/python bench/run.py                      # default: ~10-15 min on 2 cores
    .venv/bin/python bench/run.py --scale 1 --analysis-steps 1000000 --peer-spans 100000
                                                       # full size (10M steps, 1M analysed)
    .venv/bin/python bench/run.py --only queries,storage --scale 0.02   # a quick look

Sections (each runs in a child process of its own, so each has its own Django setup and
scratch database beside the product's; the product's database is never touched):

- ingest: `--spans` GenAI spans made by the OpenTelemetry SDK and sent by its OTLPSpanExporter
  in batches of `--batch` (the BatchSpanProcessor's 512), `--senders` concurrent senders, to
  `/v1/traces` on gunicorn: encoded by the exporter's encoder before the clock (an agent
  encodes on its own machine), and once more with `export()` timed whole (encoding on these
  same cores); the same number of steps to `POST /api/v1/ingest`. Rates count rows *stored*
  (read back), not accepted. Each is compared with a raw COPY of exactly the rows it stored
  (bench/ingest_copy.copy_stored) and the OTLP rate with Arize Phoenix receiving the very same
  request bodies from the same exporter (bench/peer.py; `--skip-peer` to leave it out).
- analysis: `manage.py simulate` into a scratch database, the learned call pairs refreshed for
  every agent and release (`learned.refresh_due`, timed), then `manage.py analyze --all` (one
  process = one worker); steps/s per worker.
- queries: bench/loader.py loads `--scale` × (500k tasks, 10M steps) plus one 50,000-step
  task, findings on 5% of tasks and an analysis row per task; then the median and p95 of each
  dashboard query through the product's own selectors (bench/queries.py).
- storage: bytes on disk per step (every partition of ingest_step with its indexes, TOAST
  included, over the row count), for the loaded dataset and for the OTLP-ingested rows.

Targets (issue 9): stored OTLP ingest ≥ 15,000 spans/s, ≥ 100× Phoenix, ≥ 25% of raw COPY;
each dashboard query ≤ 500 ms median on 10M steps; the 50,000-step task detail ≤ 1 s.

Single node vs Citus (`--citus`; ingest, analysis and queries/storage only): each section runs
twice, on the single node as above and then on the local Citus cluster (agentops/citus.py, under
the same data folder: started unless it is running, and then stopped at the end), in scratch
databases of its own there (`citus_agentops_bench_*`, joined to the workers). One table gives
each figure on both sides and the ratio Citus / single, the queries' answers on both (counts),
where each project's data lives and where the queries' reads ran. Ingest and the analysis spread
their data over `--projects` (4) projects on both sides, 2 per worker on Citus; the queries'
project is on the first worker (docs/scaling.md, step 6).

    .venv/bin/python bench/run.py --citus --only ingest,analysis,queries --scale 1 \
        --analysis-steps 1000000 --skip-peer

Everything a run starts stops when it ends, by an error, Ctrl-C or SIGTERM too: web servers,
sections, the soak and the embedded PostgreSQL and Redis, which this process starts before any
section (unless they were running already: a `make demo` on the same folder keeps its own), and
the Citus cluster likewise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "latest.json"
SECTIONS = ("ingest", "analysis", "queries", "storage", "export")
# Run only when named (`--only soak`, `make soak`): the whole stack for ~25 minutes (bench/soak.py).
ON_REQUEST = ("soak",)
# What `--citus` runs on both sides.
CITUS_SECTIONS = ("ingest", "analysis", "queries", "storage")

FULL_TASKS = 500_000  # --scale 1: 500k tasks of 20 steps = 10M steps
STEPS_PER_TASK = 20
QUERY_TARGET_MS = 500
DETAIL_TARGET_MS = 1000
INGEST_TARGET = 15_000
PEER_TARGET_RATIO = 100
COPY_TARGET_SHARE = 0.25


# --- children: one section each, JSON on the last line of stdout ----------------------------


def child_otlp(p: dict) -> dict:
    from bench import harness, ingest_copy, otlp_ingest

    harness.BENCH_DB = "agentops_bench_otlp"
    projects = p.get("projects", 1)
    out = otlp_ingest.run(spans=p["spans"], batch=p["batch"], senders=p["senders"], workers=p["web_workers"],
                          projects=projects)
    out["storage"] = storage_bytes()
    out["copy"] = ingest_copy.copy_stored(project_name="bench-otlp", projects=projects)
    from django.db import connections

    connections.close_all()  # the next run drops and remakes the scratch database
    out["encode_in_loop"] = otlp_ingest.run(spans=p["spans"], batch=p["batch"], senders=p["senders"],
                                            workers=p["web_workers"], encode_in_loop=True, projects=projects)
    return out


def child_native(p: dict) -> dict:
    from bench import harness, ingest_copy, ingest_native

    harness.BENCH_DB = "agentops_bench_native"
    projects = p.get("projects", 1)
    out = ingest_native.run(steps=p["spans"], batch=p["native_batch"], senders=p["senders"], projects=projects)
    out["copy"] = ingest_copy.copy_stored(project_name="bench-native", projects=projects)
    return out


def child_analysis(p: dict) -> dict:
    from django.core.management import call_command

    from bench import harness

    harness.BENCH_DB = "agentops_bench_analysis"
    harness.setup_django(harness.bench_database_url())
    harness.migrate()
    from bench.otlp_ingest import project_names
    from ingest.models import Step, Task

    # The simulator averages ~11 steps per task. It runs in chunks with seeds of their own (ids
    # differ by seed); a chunk the simulator fails on is left out and another seed takes its turn.
    # Several projects (`projects`, on Citus spread over the workers) take the chunks in turn.
    names = project_names("bench-analysis", p.get("projects", 1))
    made = harness.projects_create(names)
    tasks = max(50, p["analysis_steps"] // 11)
    rounds = -(-tasks // (10_000 * len(names)))  # chunks of at most 10,000, as many per project
    chunk = -(-tasks // (rounds * len(names)))
    seed, failures = 9, []
    started = time.perf_counter()
    while Task.objects.count() < tasks and len(failures) < 5:
        try:
            call_command("simulate", project=names[(seed - 9) % len(names)],
                         tasks=min(chunk, tasks - Task.objects.count()), seed=seed, since="7d", stdout=sys.stderr)
        except Exception as exc:
            failures.append(f"seed {seed}: {type(exc).__name__}: {exc}"[:200])
            print(f"   simulate failed on {failures[-1]}; trying another seed", file=sys.stderr, flush=True)
        seed += 1
    simulate_s = time.perf_counter() - started
    steps = Step.objects.count()
    n_tasks = Task.objects.count()
    # The learned call pairs, as the workers' periodic refresh keeps them: learned once from the
    # runs there are (every agent and release), before the analysis that reads them.
    from analysis.engine import learned
    from analysis.models import AgentProfile, CallPair

    started = time.perf_counter()
    refreshed = learned.refresh_due(limit=100_000)
    learn_s = time.perf_counter() - started
    started = time.perf_counter()
    call_command("analyze", all=True, **({"project": names[0]} if len(names) == 1 else {}), stdout=sys.stderr)
    analyse_s = time.perf_counter() - started
    return {"tasks": n_tasks, "steps": steps, "simulate_seconds": round(simulate_s, 1),
            "simulate_steps_per_s": round(steps / simulate_s), "analyse_seconds": round(analyse_s, 1),
            "steps_per_s_per_worker": round(steps / analyse_s), "tasks_per_s_per_worker": round(n_tasks / analyse_s),
            "learned_refresh_seconds": round(learn_s, 2), "learned_profiles": refreshed,
            "learned_pairs": CallPair.objects.count(),
            "learned_refresh_ms_max": round(max(AgentProfile.objects.values_list("refresh_ms", flat=True),
                                                default=0.0), 1),
            "simulate_failures": failures, "placement": harness.placement([project for project, _ in made]),
            "steps_per_project": {project.name: Step.objects.filter(project=project).count() for project, _ in made}}


def query_dataset(p: dict):
    """The queries' dataset (`--scale` × 10M steps) in its scratch database, loaded unless a
    previous run left it at this size: (project, tasks, steps, load seconds or None)."""
    from bench import harness

    harness.BENCH_DB = "agentops_bench_queries"
    tasks = max(1000, int(FULL_TASKS * p["scale"]))
    wanted_steps = tasks * STEPS_PER_TASK + 50_000
    url = harness.bench_database_url(fresh=False)
    harness.setup_django(url)
    harness.migrate()
    from django.db import connection

    from bench import loader
    from ingest.models import Project

    project = Project.objects.filter(name="bench-queries").first()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ingest_step WHERE project_id = %s", [project.pk if project else 0])
        have = cursor.fetchone()[0]
    load_s = None
    if have != wanted_steps:  # a previous run at the same scale is reused as it is
        from ingest import partitions

        connection.close()
        harness.bench_database_url(fresh=True)  # the same name, dropped and made again
        partitions.forget_cache()
        harness.migrate()
        project = harness.projects_create(["bench-queries"])[0][0]  # on Citus: on the first worker
        started = time.perf_counter()
        with connection.cursor() as cursor:
            loader.load(cursor, project_id=project.pk, tasks=tasks, steps_per_task=STEPS_PER_TASK)
            loader.decorate(cursor, project_id=project.pk)
        load_s = round(time.perf_counter() - started, 1)
    with connection.cursor() as cursor:
        loader.catalog(cursor, project_id=project.pk)
    return project, tasks, wanted_steps, load_s


def child_queries(p: dict) -> dict:
    from bench import harness, queries

    project, tasks, wanted_steps, load_s = query_dataset(p)
    from django.db import connection

    from bench import devices_fleet

    with connection.cursor() as cursor:  # the servers and devices page's telemetry and verdicts, once
        if devices_fleet.load(cursor, project_id=project.pk):
            print("   device fleet added (18 devices, telemetry every 30 s, hardware findings)", file=sys.stderr, flush=True)
    # The loader writes raw rows with SQL, as a backfill would: build the latency rollups from
    # them the way an operator would (`manage.py rollups_rebuild`), as of the newest task, which
    # is where the periodic job keeps them on a live system: the tasks of the hour in progress
    # stay raw and every reader merges them in. Every project (the scratch database holds only
    # this one): only a whole rebuild sets the watermark the readers need.
    rollup_s = None
    wanted = [w.strip() for w in (p.get("queries") or "").split(",") if w.strip()]
    try:
        if wanted:  # a few named queries (that read no rollups): no rebuild
            raise _SkipRebuild
        from analysis import rollups

        with connection.cursor() as cursor:
            cursor.execute("SELECT max(started_at) FROM ingest_task WHERE project_id = %s", [project.pk])
            newest = cursor.fetchone()[0]
        started = time.perf_counter()
        hours = rollups.rollups_rebuild(now=newest)
        rollup_s = round(time.perf_counter() - started, 1)
        print(f"   rollups_rebuild: {sum(hours.values())} hours in {rollup_s} s", file=sys.stderr, flush=True)
    except _SkipRebuild:
        print("   rollups_rebuild skipped (--queries)", file=sys.stderr, flush=True)
    except Exception as exc:
        print(f"   rollups_rebuild failed: {exc}", file=sys.stderr, flush=True)
    from analysis.rollups import watermark

    mark = watermark()
    # Without a watermark every dashboard query falls back to its exact raw scan: say so.
    print(f"   rollups: {'up to ' + mark.isoformat() if mark else 'none (queries scan raw rows)'}",
          file=sys.stderr, flush=True)
    results = {}
    suite = queries.query_suite(project)
    if wanted:
        suite = {name: fn for name, fn in suite.items() if any(w in name for w in wanted)}
    for n, (name, fn) in enumerate(suite.items(), 1):
        harness.progress("queries", n - 1, len(suite))
        try:
            results[name] = queries.timed(fn, runs=p["runs"])
        except Exception as exc:  # a selector that changed under us is reported, not fatal
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    harness.progress("queries", len(suite), len(suite))
    from ingest.models import Project

    return {"tasks": tasks + 1, "steps": wanted_steps, "load_seconds": load_s, "rollup_seconds": rollup_s,
            "rollups_watermark": mark.isoformat() if mark else None, "runs": p["runs"],
            "queries": results, "storage": storage_bytes(), "answers": answers(project),
            "placement": harness.placement(Project.objects.filter(name__in=["bench-queries", "bench-diff"])),
            "routing": routing(project)}


# Task list filters whose count the loader fixes (no random duration in them): the same on any engine.
ANSWER_FILTERS = {"release v2, checkout-agent": {"release": "v2", "name": "checkout-agent"},
                  "tool search_inventory": {"tool": "search_inventory"},
                  'error "HTTP 503"': {"error": '"HTTP 503"'}, "attr gen_ai.system:openai": {"attr": "gen_ai.system:openai"}}


def answers(project) -> dict[str, int]:
    """Counts the queries' dataset must give whatever the engine: the project's rows per table and
    the task list's count for filters the loader decides, through the product's selector."""
    from analysis.dashboard import selectors
    from analysis.filters import TaskFilters
    from analysis.models import Finding, TaskAnalysis
    from ingest.models import Step, Task

    out = {"tasks": Task.objects.filter(project=project).count(),
           "steps": Step.objects.filter(project=project).count(),
           "analyses": TaskAnalysis.objects.filter(project=project).count(),
           "findings": Finding.objects.filter(project=project).count()}
    for label, filters in ANSWER_FILTERS.items():
        out[f"task list count: {label}"] = selectors.task_count(project=project, filters=TaskFilters(**filters),
                                                                cap=1_000_000)[0]
    return out


def routing(project) -> dict[str, str]:
    """On Citus, where two of the dashboard's reads run, from Citus's EXPLAIN: the task list's first
    page and a count of the project's steps ('1 task, on worker <port>' when routed to one)."""
    import re

    from django.db import connection

    from analysis.filters import TaskFilters, task_queryset
    from ingest.models import Step

    if not harness.on_citus():
        return {}
    statements = {"task list (first page)": task_queryset(project=project, filters=TaskFilters())
                  .select_related("analysis").order_by("-started_at")[:50],
                  "the project's steps (count)": Step.objects.filter(project=project).values("pk")}
    out = {}
    for label, queryset in statements.items():
        sql, params = queryset.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        count = re.search(r"Task Count: (\d+)", plan)
        ports = sorted(set(re.findall(r"port=(\d+)", plan)))
        out[label] = (f"{count.group(1) if count else '?'} task(s), on worker {', '.join(ports) or '?'}")
    return out


class _SkipRebuild(Exception):
    pass


def child_export(p: dict) -> dict:
    from bench import export, harness

    project, tasks, steps, load_s = query_dataset(p)
    url = harness.bench_database_url(fresh=False)
    out = {"tasks": tasks + 1, "steps": steps, "load_seconds": load_s,
           "steps_export": export.run(database_url=url, project=project)}
    if p.get("export_subset"):  # a third of the rows: the peak RSS must not follow the size
        out["steps_export_v1"] = export.run(database_url=url, project=project, formats=("parquet",),
                                            filters={"release": "v1"})
    return out


def storage_bytes() -> dict:
    """Bytes on disk per step: every partition of ingest_step (heap, TOAST, indexes); on Citus,
    of every shard of them on the workers (citus_total_relation_size)."""
    from django.db import connection

    from bench import harness

    size = "citus_total_relation_size" if harness.on_citus() else "pg_total_relation_size"
    with connection.cursor() as cursor:
        cursor.execute(f"""SELECT coalesce(sum({size}(inhrelid)), 0) FROM pg_inherits
                           WHERE inhparent = 'ingest_step'::regclass""")
        total = int(cursor.fetchone()[0])
        cursor.execute(f"SELECT {size}('ingest_step'::regclass)")
        total += cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM ingest_step")
        rows = cursor.fetchone()[0]
    return {"bytes": total, "rows": rows, "bytes_per_step": round(total / rows) if rows else None}


def child_purge(p: dict) -> dict:
    from bench import harness

    harness.setup_django(harness.bench_database_url(fresh=False))
    return {"purged": harness.purge_bench_queue()}


CHILDREN = {"otlp": child_otlp, "native": child_native, "analysis": child_analysis,
            "queries": child_queries, "export": child_export, "purge": child_purge}


def run_child(name: str, params: dict, *, citus: bool = False) -> dict:
    """Run one section in a child process; its progress goes straight to our stderr. `citus`: its
    scratch databases on the local Citus cluster (harness.CITUS_ENV)."""
    label = f"== {name}{' on Citus' if citus else ''} "
    print(f"{label}{'=' * (60 - len(label))}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    env = {**os.environ, harness.CITUS_ENV: "1" if citus else ""}
    proc = harness.run_process([sys.executable, __file__, "--child", name, "--params", json.dumps(params)],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        print(f"   {name} failed (exit {proc.returncode}); continuing", file=sys.stderr, flush=True)
        return {"error": f"exit {proc.returncode}"}
    try:
        out = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"unreadable output: {lines[-1][:200]}"}
    print(f"   {name} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return out


# --- the table -------------------------------------------------------------------------------


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value < 100:
        return f"{value:,.1f}{unit}"
    return f"{value:,.0f}{unit}"


def table_rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    """(figure, value, reference, ratio, target) rows from the results dict."""
    rows = []
    ingest = results.get("ingest", {})
    otlp, native, peer = ingest.get("otlp", {}), ingest.get("native", {}), ingest.get("peer", {})
    otlp_rate = otlp.get("spans_per_s")
    copy = otlp.get("copy", {}) if isinstance(otlp.get("copy"), dict) else {}
    if otlp_rate:
        rows.append((f"OTLP ingest, spans/s stored ({otlp['spans']:,} spans, {otlp['senders']} senders)",
                     _fmt(otlp_rate), "", "", f"≥ {INGEST_TARGET:,}"))
    in_loop = otlp.get("encode_in_loop", {})
    if in_loop.get("spans_per_s"):
        rows.append(("  the same with the exporter's encoding timed too (sender on these 2 cores)",
                     _fmt(in_loop["spans_per_s"]), "", "", ""))
    if otlp_rate and copy.get("steps_per_s"):
        rows.append(("  raw COPY of the same rows, rows/s", _fmt(copy["steps_per_s"]), "OTLP / COPY",
                     f"{100 * otlp_rate / copy['steps_per_s']:.1f}%", f"≥ {100 * COPY_TARGET_SHARE:.0f}%"))
    if peer.get("spans_per_s"):
        rows.append((f"  Arize Phoenix {peer.get('version', '')}, spans/s stored ({peer['stored']:,} spans)",
                     _fmt(peer["spans_per_s"]), "OTLP / Phoenix",
                     f"{otlp_rate / peer['spans_per_s']:.0f}×" if otlp_rate else "—", f"≥ {PEER_TARGET_RATIO}×"))
    elif peer:
        rows.append(("  Arize Phoenix", "—", peer.get("skipped", peer.get("error", "not run"))[:40], "", ""))
    if native.get("steps_per_s"):
        ncopy = native.get("copy", {}) if isinstance(native.get("copy"), dict) else {}
        rows.append((f"native ingest, steps/s stored ({native['steps']:,} steps)", _fmt(native["steps_per_s"]),
                     "", "", ""))
        if ncopy.get("steps_per_s"):
            rows.append(("  raw COPY of the same rows, rows/s", _fmt(ncopy["steps_per_s"]), "native / COPY",
                         f"{100 * native['steps_per_s'] / ncopy['steps_per_s']:.1f}%", ""))
    analysis = results.get("analysis", {})
    if analysis.get("steps_per_s_per_worker"):
        rows.append((f"analysis, steps/s per worker ({analysis['steps']:,} steps)",
                     _fmt(analysis["steps_per_s_per_worker"]),
                     f"{analysis['tasks_per_s_per_worker']} tasks/s", "", ""))
        if "learned_refresh_seconds" in analysis:
            rows.append((f"learned call pairs refresh, s ({analysis['learned_profiles']} agent profiles, "
                         f"{analysis['learned_pairs']:,} pairs)", _fmt(analysis["learned_refresh_seconds"]),
                         f"slowest profile {analysis['learned_refresh_ms_max']} ms", "", ""))
    q = results.get("queries", {})
    if q.get("queries"):
        rows.append((f"queries on {q['steps']:,} steps / {q['tasks']:,} tasks: median (p95) ms", "", "", "", ""))
        for name, r in q["queries"].items():
            target = DETAIL_TARGET_MS if "detail" in name else QUERY_TARGET_MS
            if "error" in r:
                rows.append((f"  {name}", "error", r["error"][:40], "", ""))
                continue
            rows.append((f"  {name}", f"{r['median_ms']:,.1f} ({r['p95_ms']:,.0f})", f"target {target} ms",
                         f"{r['median_ms'] / target:.2f}", f"≤ {target} ms"))
    exported = results.get("export", {})
    for fmt, r in (exported.get("steps_export") or {}).items():
        if isinstance(r, dict) and r.get("rows_per_s"):
            rows.append((f"export of {r['rows']:,} steps as {fmt} over HTTP, rows/s (peak RSS of the web worker)",
                         _fmt(r["rows_per_s"]), f"{r['peak_rss_mib']:,.0f} MiB peak",
                         f"{r['rss_before_mib']:,.0f} MiB before", "bounded"))
    for label, storage in (("loaded dataset", q.get("storage")), ("OTLP-ingested rows", otlp.get("storage"))):
        if storage and storage.get("bytes_per_step"):
            rows.append((f"storage, bytes per step on disk ({label}, {storage['rows']:,} rows)",
                         _fmt(storage["bytes_per_step"]), f"{storage['bytes'] / 2**20:,.0f} MiB", "", ""))
    return rows


def print_table(rows) -> None:
    widths = [max(len(str(r[i])) for r in rows + [("figure", "value", "reference", "ratio", "target")])
              for i in range(5)]
    header = ("figure", "value", "reference", "ratio", "target")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]:>{widths[3]}}  "
              f"{row[4]:<{widths[4]}}")


def _ratio(single, citus) -> str:
    return f"{citus / single:.2f}" if single and citus is not None else "—"


def citus_rows(single: dict, citus: dict) -> list[tuple[str, str, str, str]]:
    """(figure, single node, Citus, Citus / single) rows: rates (/s, higher is better) and times
    (ms, s: lower is better) side by side; the counts the queries' dataset gives on each."""
    rows = []

    def add(label, path, fmt=_fmt):
        def get(side):
            value = side
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            return value
        a, b = get(single), get(citus)
        if a is not None or b is not None:
            rows.append((label, fmt(a), fmt(b), _ratio(a, b) if isinstance(a, int | float) else "—"))

    otlp = single.get("ingest", {}).get("otlp", {})
    if otlp.get("spans"):
        rows.append((f"ingest: {otlp['spans']:,} spans / steps each, {len(otlp.get('placement', {}))} projects, "
                     f"{otlp['senders']} senders", "", "", ""))
    add("  OTLP /v1/traces, spans/s stored", ("ingest", "otlp", "spans_per_s"))
    add("  OTLP, export() timed whole (encoding on these cores), spans/s", ("ingest", "otlp", "encode_in_loop",
                                                                          "spans_per_s"))
    add("  raw COPY of the OTLP rows, rows/s", ("ingest", "otlp", "copy", "steps_per_s"))
    add("  native /api/v1/ingest, steps/s stored", ("ingest", "native", "steps_per_s"))
    add("  raw COPY of the native rows, rows/s", ("ingest", "native", "copy", "steps_per_s"))
    add("  storage, bytes per OTLP step", ("ingest", "otlp", "storage", "bytes_per_step"))
    analysis = single.get("analysis", {})
    if analysis.get("steps"):
        rows.append((f"analysis: {analysis['steps']:,} simulated steps, {len(analysis.get('placement', {}))} "
                     "projects (Citus: as simulated there)", "", "", ""))
    add("  simulate (in process), steps/s", ("analysis", "simulate_steps_per_s"))
    add("  learned call pairs refresh, s", ("analysis", "learned_refresh_seconds"))
    add("  analyze --all, steps/s per worker", ("analysis", "steps_per_s_per_worker"))
    add("  analyze --all, tasks/s per worker", ("analysis", "tasks_per_s_per_worker"))
    q, qc = single.get("queries", {}), citus.get("queries", {})
    if q.get("steps"):
        rows.append((f"queries: {q['steps']:,} steps / {q['tasks']:,} tasks, median ms of {q['runs']} runs",
                     "", "", ""))
    add("  bulk load (loader.load + decorate), s", ("queries", "load_seconds"))
    add("  rollups rebuild, s", ("queries", "rollup_seconds"))
    ratios = []
    for name, r in (q.get("queries") or {}).items():
        rc = (qc.get("queries") or {}).get(name, {})
        a, b = r.get("median_ms"), rc.get("median_ms")
        rows.append((f"  {name}", _fmt(a) if a is not None else "error", _fmt(b) if b is not None else
                     f"error: {rc.get('error', 'not run')[:60]}", _ratio(a, b)))
        if a and b is not None:
            ratios.append(b / a)
    if ratios:
        import statistics

        rows.append((f"  median of the {len(ratios)} queries' ratios", "", "", f"{statistics.median(ratios):.2f}"))
    add("  storage, bytes per loaded step", ("queries", "storage", "bytes_per_step"))
    for name, value in (q.get("answers") or {}).items():
        other = (qc.get("answers") or {}).get(name)
        rows.append((f"  answer: {name}", _fmt(value), _fmt(other), "same" if value == other else "DIFFERS"))
    return rows


def print_citus_table(rows) -> None:
    header = ("figure", "single node", "Citus", "Citus / single")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}")


def placement_lines(citus: dict) -> list[str]:
    """Where each section's projects live on Citus, and where the queries' reads ran."""
    lines = []
    for label, found in (("ingest (OTLP)", citus.get("ingest", {}).get("otlp", {}).get("placement")),
                         ("ingest (native)", citus.get("ingest", {}).get("native", {}).get("placement")),
                         ("analysis", citus.get("analysis", {}).get("placement")),
                         ("queries", citus.get("queries", {}).get("placement"))):
        if found:
            lines.append(f"{label}: " + ", ".join(f"{name} on {where}" for name, where in found.items()))
    for label, where in (citus.get("queries", {}).get("routing") or {}).items():
        lines.append(f"queries, {label}: {where}")
    return lines


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--spans", type=int, default=100_000, help="spans (OTLP) and steps (native) sent")
    parser.add_argument("--batch", type=int, default=512, help="spans per OTLP request")
    parser.add_argument("--native-batch", type=int, default=1000, help="events per native request")
    parser.add_argument("--senders", type=int, default=4, help="concurrent senders")
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--skip-peer", action="store_true", help="leave Arize Phoenix out")
    parser.add_argument("--peer-spans", type=int, default=20_000,
                        help="spans sent to Phoenix (it stores a few hundred a second; 100k takes minutes)")
    parser.add_argument("--peer-timeout", type=float, default=300, help="seconds to wait for Phoenix to store")
    parser.add_argument("--analysis-steps", type=int, default=100_000, help="simulated steps to analyse")
    parser.add_argument("--scale", type=float, default=0.1, help="query dataset: 1 = 10M steps / 500k tasks")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per query")
    parser.add_argument("--queries", default="",
                        help="comma-separated parts of query names: time only those, without rebuilding the "
                             "rollups first (for queries that read none, e.g. 'diff,session,search')")
    parser.add_argument("--export-subset", action="store_true",
                        help="export: also export release v1 alone (a third of the steps) to compare peak RSS")
    parser.add_argument("--soak-args", default="", help="arguments for bench/soak.py (--only soak), e.g. '--short'")
    parser.add_argument("--citus", action="store_true",
                        help="each of ingest, analysis and queries on the single node, then on the local "
                             "Citus cluster (agentops.citus, started if needed): both sides and the ratio")
    parser.add_argument("--projects", type=int, default=None,
                        help="projects ingest and the analysis spread their data over (default: 4 with "
                             "--citus, spread 2 per worker there; 1 otherwise)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    args = parser.parse_args()
    harness.stop_on_signals()
    if args.child:
        try:
            out = CHILDREN[args.child](json.loads(args.params))
        except KeyboardInterrupt as exc:
            harness.exit_interrupted(f"bench section {args.child}", exc)
        sys.stdout.write("\n" + json.dumps(out, default=str) + "\n")
        return

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS) - set(ON_REQUEST)
    if unknown:
        parser.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}; choose from "
                     f"{', '.join(SECTIONS + ON_REQUEST)}")
    if args.citus and only - set(CITUS_SECTIONS):
        parser.error(f"--citus: only {', '.join(CITUS_SECTIONS)} run on both sides (not "
                     f"{', '.join(sorted(only - set(CITUS_SECTIONS)))})")
    if args.projects is None:
        args.projects = 4 if args.citus else 1
    try:
        with harness.embedded_services():
            if args.citus:
                with harness.citus_cluster() as coordinator:
                    bench_citus(args, only, coordinator)
            else:
                bench(args, only)
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("bench", exc)


def bench_citus(args, only: set[str], coordinator: str) -> None:
    """`--citus`: each section on the single node, then at once on the Citus cluster, in scratch
    databases of their own on each (the product's database on neither is touched); one table of
    both sides and their ratio, and where each project's data lived on Citus."""
    params = {k: v for k, v in vars(args).items() if k not in {"child", "params", "only", "out"}}
    results: dict = {"started_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_average": os.getloadavg()},
                     "params": params, "citus_coordinator": coordinator.rsplit("/", 1)[0],
                     "single": {}, "citus": {}}
    started = time.perf_counter()
    children = {"ingest": ("otlp", "native"), "analysis": ("analysis",), "queries": ("queries",)}
    if "storage" in only:
        only = only | {"queries"}
    for section, names in children.items():
        if section not in only:
            continue
        for side in ("single", "citus"):
            figures = {name: run_child(name, params, citus=side == "citus") for name in names}
            results[side][section] = figures if section == "ingest" else figures[section]
    run_child("purge", params)
    out = _write(results, started, args.out)
    print()
    print_citus_table(citus_rows(results["single"], results["citus"]))
    print("\nOn Citus (" + results["citus_coordinator"] + ", 2 workers):")
    for line in placement_lines(results["citus"]):
        print(f"  {line}")
    _ended(results, out)


def _write(results: dict, started: float, path: str) -> Path:
    """The run's JSON, with its duration and the load average at its end."""
    results["seconds"] = round(time.perf_counter() - started)
    results["machine"]["load_average_end"] = os.getloadavg()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return out


def _ended(results: dict, out: Path) -> None:
    print(f"\n{results['seconds']} s in all; load average {os.getloadavg()[0]:.1f}; results in {out}")


def bench(args, only: set[str]) -> None:
    params = {k: v for k, v in vars(args).items() if k not in {"child", "params", "only", "out"}}
    results: dict = {"started_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_average": os.getloadavg()},
                     "params": params}
    started = time.perf_counter()
    peer_install = None
    if "ingest" in only and not args.skip_peer:
        from bench import peer

        peer_install = peer.install_in_background()  # big: minutes on a fresh machine
        if peer_install is not None:
            # Never beside our own ingest: pip on the same 2 cores took 35-45 % off its rate (a
            # fresh machine's full run: 7,315 spans/s stored, 11,324 alone right after).
            print("   waiting for the install before timing ingest", file=sys.stderr, flush=True)
            try:
                peer.installed(peer_install)
            except BaseException:  # interrupted: pip goes too (the next run installs again)
                harness.stop_process(peer_install, grace=30, group=True)
                raise
    if "ingest" in only:
        ingest = results["ingest"] = {"otlp": run_child("otlp", params), "native": run_child("native", params)}
        if args.skip_peer:
            ingest["peer"] = {"skipped": "--skip-peer"}
        else:
            from bench import peer

            print(f"== peer (Arize Phoenix) {'=' * 37}", file=sys.stderr, flush=True)
            ingest["peer"] = peer.run(spans=args.peer_spans, batch=args.batch, senders=args.senders,
                                      timeout=args.peer_timeout, install=peer_install)
    if "analysis" in only:
        results["analysis"] = run_child("analysis", params)
    if "queries" in only or "storage" in only:
        results["queries"] = run_child("queries", params)
    if "export" in only:
        results["export"] = run_child("export", params)
    if "soak" in only:  # its own stack, database and queue; prints its own table (bench/soak.py)
        print(f"== soak {'=' * 52}", file=sys.stderr, flush=True)
        soak_out = Path(args.out).with_name("soak.json")
        code = harness.run_process([sys.executable, str(ROOT / "bench" / "soak.py"), *args.soak_args.split(),
                                    "--out", str(soak_out)], cwd=ROOT).returncode
        results["soak"] = {"exit": code, "results": str(soak_out), "chart": str(soak_out.with_suffix(".html"))}
    run_child("purge", params)
    out = _write(results, started, args.out)
    print()
    print_table(table_rows(results))
    _ended(results, out)


if __name__ == "__main__":
    main()
