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

Everything a run starts stops when it ends, by an error, Ctrl-C or SIGTERM too: web servers,
sections, the soak and the embedded PostgreSQL and Redis, which this process starts before any
section (unless they were running already: a `make demo` on the same folder keeps its own).
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
    out = otlp_ingest.run(spans=p["spans"], batch=p["batch"], senders=p["senders"], workers=p["web_workers"])
    out["storage"] = storage_bytes()
    out["copy"] = ingest_copy.copy_stored(project_name="bench-otlp")
    from django.db import connections

    connections.close_all()  # the next run drops and remakes the scratch database
    out["encode_in_loop"] = otlp_ingest.run(spans=p["spans"], batch=p["batch"], senders=p["senders"],
                                            workers=p["web_workers"], encode_in_loop=True)
    return out


def child_native(p: dict) -> dict:
    from bench import harness, ingest_copy, ingest_native

    harness.BENCH_DB = "agentops_bench_native"
    out = ingest_native.run(steps=p["spans"], batch=p["native_batch"], senders=p["senders"])
    out["copy"] = ingest_copy.copy_stored(project_name="bench-native")
    return out


def child_analysis(p: dict) -> dict:
    from django.core.management import call_command

    from bench import harness

    harness.BENCH_DB = "agentops_bench_analysis"
    harness.setup_django(harness.bench_database_url())
    harness.migrate()
    from ingest.models import Step, Task

    # The simulator averages ~11 steps per task. It runs in chunks with seeds of their own (ids
    # differ by seed); a chunk the simulator fails on is left out and another seed takes its turn.
    tasks = max(50, p["analysis_steps"] // 11)
    chunk, seed, failures = 10_000, 9, []
    started = time.perf_counter()
    while Task.objects.count() < tasks and len(failures) < 5:
        try:
            call_command("simulate", project="bench-analysis", tasks=min(chunk, tasks - Task.objects.count()),
                         seed=seed, since="7d", stdout=sys.stderr)
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
    call_command("analyze", all=True, project="bench-analysis", stdout=sys.stderr)
    analyse_s = time.perf_counter() - started
    return {"tasks": n_tasks, "steps": steps, "simulate_seconds": round(simulate_s, 1),
            "simulate_steps_per_s": round(steps / simulate_s), "analyse_seconds": round(analyse_s, 1),
            "steps_per_s_per_worker": round(steps / analyse_s), "tasks_per_s_per_worker": round(n_tasks / analyse_s),
            "learned_refresh_seconds": round(learn_s, 2), "learned_profiles": refreshed,
            "learned_pairs": CallPair.objects.count(),
            "learned_refresh_ms_max": round(max(AgentProfile.objects.values_list("refresh_ms", flat=True),
                                                default=0.0), 1),
            "simulate_failures": failures}


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
        project = Project.objects.create(name="bench-queries")
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
    return {"tasks": tasks + 1, "steps": wanted_steps, "load_seconds": load_s, "rollup_seconds": rollup_s,
            "rollups_watermark": mark.isoformat() if mark else None, "runs": p["runs"],
            "queries": results, "storage": storage_bytes()}


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
    """Bytes on disk per step: every partition of ingest_step (heap, TOAST, indexes)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits
                          WHERE inhparent = 'ingest_step'::regclass""")
        total = int(cursor.fetchone()[0])
        cursor.execute("SELECT pg_total_relation_size('ingest_step'::regclass)")
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


def run_child(name: str, params: dict) -> dict:
    """Run one section in a child process; its progress goes straight to our stderr."""
    label = f"== {name} "
    print(f"{label}{'=' * (60 - len(label))}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    proc = harness.run_process([sys.executable, __file__, "--child", name, "--params", json.dumps(params)],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True)
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
    try:
        with harness.embedded_services():
            bench(args, only)
    except KeyboardInterrupt as exc:
        harness.exit_interrupted("bench", exc)


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
    results["seconds"] = round(time.perf_counter() - started)
    results["machine"]["load_average_end"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print()
    print_table(table_rows(results))
    print(f"\n{results['seconds']} s in all; load average {os.getloadavg()[0]:.1f}; results in {out}")


if __name__ == "__main__":
    main()
