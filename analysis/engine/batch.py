"""Batch analysis: a worker claims hundreds of due tasks at once and analyses them with a
handful of set-based statements instead of ~9 round trips per task.

One batch is: one claim statement (analysis/engine/pipeline.py's conditional INSERT … ON CONFLICT,
over many tasks: only free, expired or `queued` claims are taken, so two workers never
analyse one task); one query for the tasks, one for all their steps, one for the baselines
of every key the batch needs (per project, shared by all its tasks) and one for the device
telemetry around them (the tasks' windows merged per device); the pure analysis
(`analyse.analyse`, the detector registry) task by task; and one transaction that stores the
results of the tasks whose claim is still ours: a multi-row UPDATE of their TaskAnalysis rows
that checks the claim token under the row locks, one DELETE of their old findings and one
COPY of the new ones. A worker killed mid-batch writes nothing; its claims expire and the
sweep hands the tasks out again. Late data makes a task due again (`analyzed_through`).

Each task's context is built exactly as `analyse.load_context` builds it (the same baselines,
the same telemetry window), so a task's findings do not depend on the path that analysed it.
How the time per task went before and after: docs/analysis.md, "Throughput".
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from analysis.engine import analyse, learned, pipeline, serving
from analysis.engine.baselines import DEVICE, baselines_ensure
from analysis.engine.detectors.base import StepData
from analysis.engine.verdicts import telemetry_devices
from ingest.models import Project

log = logging.getLogger("agentops.analysis")

# Tasks per batch: big enough that the fixed cost of a batch (~8 statements) is noise per
# task, small enough that a batch stays well under a second of analysis and its claims are
# released long before they expire.
BATCH_TASKS = 500
# …and at most this many steps (a batch of huge tasks stays bounded in memory).
BATCH_STEPS = 20_000
# A Celery message keeps claiming batches while tasks are due, for at most this long; then it
# returns so the worker's other messages are not starved.
DRAIN_SECONDS = 20.0
# The top-up looks at tasks whose last event is this recent first (the common case: analysis
# keeps up), and only then at the sweep's whole horizon.
RECENT_SECONDS = 300

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _ms_of_us(us: int) -> float:
    """Epoch microseconds as analyse._ms gives a datetime: timestamp() × 1000, bit for bit."""
    return us / 1_000_000 * 1000.0


def _us(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


# --- claiming ------------------------------------------------------------------------------------

_CLAIM = """
INSERT INTO analysis_taskanalysis (task_id, project_id, critical_path, budget, whatif, wasted_ms,
    top_finding, finding_kinds, claim_token, claimed_until, analyzed_through)
SELECT c.id, c.project_id, '{{}}', '{{}}', '{{}}', 0, '', '{{}}', %(token)s, %(until)s, c.analyzed_through
FROM ({candidates}) c
ON CONFLICT (task_id) DO UPDATE SET claim_token = EXCLUDED.claim_token, claimed_until = EXCLUDED.claimed_until
WHERE (analysis_taskanalysis.claimed_until IS NULL OR analysis_taskanalysis.claimed_until < %(now)s
       OR analysis_taskanalysis.claim_token = %(queued)s)
  {unchanged}
RETURNING task_id
"""
# The candidates are chosen in the statement's snapshot, but ON CONFLICT takes the newest version of
# a row, after waiting for a worker that is storing it: a task that worker has just analysed (and
# released) would be claimed again and analysed twice. So a due task is taken only if nobody
# analysed it since the candidates were chosen (EXCLUDED carries the analyzed_through they saw).
_UNCHANGED = "AND analysis_taskanalysis.analyzed_through IS NOT DISTINCT FROM EXCLUDED.analyzed_through"

# Ended and quiet, or silent for the abandon period, and not analysed since its last event.
_DUE = """((t.reported AND t.ended_at IS NOT NULL AND t.last_event_at < %(quiet)s) OR t.last_event_at < %(abandon)s)
  AND (a.task_id IS NULL OR a.analyzed_through IS NULL OR a.analyzed_through < t.last_event_at)"""

# The first tasks (by last event) whose steps add up to at most BATCH_STEPS (always one).
_BOUNDED = """SELECT id, project_id, analyzed_through FROM (
    SELECT t.id, t.project_id, a.analyzed_through, row_number() OVER w AS n, sum(greatest(t.step_count, 1)) OVER w AS running
    FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id
    WHERE {where} WINDOW w AS (ORDER BY t.last_event_at ROWS UNBOUNDED PRECEDING)
    ORDER BY t.last_event_at LIMIT %(limit)s) x
  WHERE n = 1 OR running <= %(max_steps)s"""


def _params(now: datetime, token: str, limit: int) -> dict:
    return {"token": token, "until": now + timedelta(seconds=pipeline.CLAIM_SECONDS), "now": now,
            "queued": pipeline.QUEUED, "limit": limit, "max_steps": BATCH_STEPS,
            "quiet": now - timedelta(seconds=settings.ANALYSIS_QUIET_SECONDS),
            "abandon": now - timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)}


def claim_ids(task_pks: list[int], *, force: bool = False) -> tuple[str, list[int]]:
    """Claim these tasks (only the due ones unless `force`) in one statement: (token, the ids
    claimed). A task another worker holds is left out."""
    token = secrets.token_hex(8)
    if not task_pks:
        return token, []
    now = timezone.now()
    where = "t.id = ANY(%(ids)s)" + ("" if force else f" AND {_DUE}")
    candidates = (f"SELECT t.id, t.project_id, a.analyzed_through FROM ingest_task t LEFT JOIN analysis_taskanalysis a"
                  f" ON a.task_id = t.id WHERE {where}")
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM.format(candidates=candidates, unchanged="" if force else _UNCHANGED),
                       {**_params(now, token, 0), "ids": list(task_pks)})
        return token, [r[0] for r in cursor.fetchall()]


def claim_due(*, limit: int = BATCH_TASKS, token: str | None = None, project_id: int | None = None,
              horizon_seconds: int | None = None) -> tuple[str, list[int]]:
    """Claim up to `limit` due tasks nobody holds, oldest last event first, within
    `horizon_seconds` of now (the sweep's horizon by default): (token, ids claimed)."""
    token = token or secrets.token_hex(8)
    if limit <= 0:
        return token, []
    now = timezone.now()
    horizon = pipeline.SWEEP_HORIZON_SECONDS if horizon_seconds is None else horizon_seconds
    where = (f"{_DUE} AND t.last_event_at > %(horizon)s"
             " AND (a.claimed_until IS NULL OR a.claimed_until < %(now)s OR a.claim_token = %(queued)s)")
    params = {**_params(now, token, limit), "horizon": now - timedelta(seconds=horizon)}
    if project_id is not None:
        where += " AND t.project_id = %(project)s"
        params["project"] = project_id
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM.format(candidates=_BOUNDED.format(where=where), unchanged=_UNCHANGED), params)
        return token, [r[0] for r in cursor.fetchall()]


def release(task_pks: list[int], token: str) -> None:
    if task_pks:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE analysis_taskanalysis SET claimed_until = NULL, claim_token = ''"
                           " WHERE task_id = ANY(%s) AND claim_token = %s", [list(task_pks), token])


# --- loading -------------------------------------------------------------------------------------

_TASK_SQL = """SELECT id, project_id, task_id, started_at, ended_at, last_event_at, release, name
FROM ingest_task WHERE id = ANY(%s)"""

_STEP_SQL = """SELECT task_id, step_id, kind, name,
    (extract(epoch FROM started_at) * 1000000)::int8, (extract(epoch FROM ended_at) * 1000000)::int8,
    parent_step_id, status, depends_on, model, device, input_tokens, output_tokens, ttft_ms, tool_name,
    tool_args::text, tool_result, tool_call_id, tool_call_ids, attributes->'agentops.serving'
FROM ingest_step WHERE task_id = ANY(%s) ORDER BY task_id, started_at, step_id"""

_BASELINE_SQL = """SELECT kind, key, device, count, median_ms, mad_ms, p90_ms, p99_ms, stats::text
FROM analysis_baseline WHERE project_id = %s AND kind = ANY(%s) AND key = ANY(%s)"""

# One index range scan per window (LATERAL): a join would read every sample of the project.
_SAMPLE_SQL = f"""SELECT w.device, (extract(epoch FROM r.ts) * 1000000)::int8, {", ".join(f"r.{m}" for m in analyse._SAMPLE_METRICS)}
FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[]) w(device, lo, hi)
CROSS JOIN LATERAL (SELECT * FROM ingest_resourcesample x WHERE x.project_id = %s AND x.device = w.device
                    AND x.ts >= w.lo AND x.ts <= w.hi OFFSET 0) r
ORDER BY w.device, r.ts"""


def _binary_rows(cursor, sql: str, params: list) -> list[tuple]:
    """The rows of a big load in the binary protocol, on the same connection (and transaction):
    integers and floats arrive as machine values, not text to parse (a quarter less of a
    worker's time in decoding the steps)."""
    with psycopg.Cursor(cursor.cursor.connection) as raw:
        raw.execute(sql, params, binary=True)
        return raw.fetchall()


class _Task:
    __slots__ = ("pk", "project_id", "task_id", "started_at", "ended_at", "last_event_at", "release", "name",
                 "steps")

    def __init__(self, row):
        (self.pk, self.project_id, self.task_id, self.started_at, self.ended_at, self.last_event_at, self.release,
         self.name) = row
        self.steps: list[StepData] = []


def _steps_load(cursor, tasks: dict[int, _Task]) -> None:
    loads = json.loads
    for r in _binary_rows(cursor, _STEP_SQL, [list(tasks)]):
        tasks[r[0]].steps.append(StepData(
            step_id=r[1], kind=r[2], name=r[3], start_ms=_ms_of_us(r[4]), end_ms=_ms_of_us(r[5]),
            parent_step_id=r[6], status=r[7], depends_on=tuple(r[8] or ()), model=r[9], device=r[10],
            input_tokens=r[11], output_tokens=r[12], ttft_ms=r[13], tool_name=r[14],
            tool_args=loads(r[15]) if r[15] is not None else None, tool_result=r[16], tool_call_id=r[17],
            tool_call_ids=tuple(r[18] or ()), serving=r[19]))


def _baselines_load(cursor, project_id: int, needs: list[tuple[set, set]]) -> tuple[dict, dict]:
    """({(kind, key): {(kind, key, device): BaselineStats}}, {device: DeviceNormal}) for every
    key and device these tasks need (their `baseline_keys`), computing the missing ones on
    demand as one task would."""
    keys: set[tuple[str, str]] = set()
    devices: set[str] = set()
    for k, d in needs:
        keys |= k
        devices |= d
    if not keys and not devices:
        return {}, {}

    def fetch() -> list[tuple]:
        cursor.execute(_BASELINE_SQL, [project_id, sorted({k for k, _ in keys} | {DEVICE}),
                                       sorted({n for _, n in keys} | devices)])
        return cursor.fetchall()

    rows = fetch()
    found = {(r[0], r[1]) for r in rows}
    if any(k not in found for k in keys) or any((DEVICE, d) not in found for d in devices):
        baselines_ensure(project=Project(pk=project_id), keys=keys, devices=devices)
        rows = fetch()
    stats: dict[tuple[str, str], dict] = defaultdict(dict)
    normals: dict[str, object] = {}
    for kind, key, device, count, median, mad, p90, p99, raw in rows:
        entry = analyse.baseline_entry(kind, key, device, count, median, mad, p90, p99,
                                      json.loads(raw) if raw is not None else None)
        if entry is None:
            continue
        if kind == DEVICE:
            normals[key] = entry
        elif (kind, key) in keys:
            stats[(kind, key)][(kind, key, device)] = entry
    return stats, normals


def _samples_load(cursor, project_id: int, windows: dict[int, tuple[datetime, datetime]],
                  devices_of: dict[int, set[str]]) -> dict[str, tuple[list[int], list]]:
    """Per device: (epoch µs of each sample, Samples) over the union of the tasks' windows."""
    spans: dict[str, list[list[datetime]]] = defaultdict(list)
    for pk, (lo, hi) in windows.items():
        for device in devices_of[pk]:
            spans[device].append([lo, hi])
    devices, los, his = [], [], []
    for device, ranges in spans.items():
        ranges.sort()
        merged = [ranges[0]]
        for lo, hi in ranges[1:]:
            if lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for lo, hi in merged:
            devices.append(device)
            los.append(lo)
            his.append(hi)
    out: dict[str, tuple[list[int], list]] = {}
    if not devices:
        return out
    for row in _binary_rows(cursor, _SAMPLE_SQL, [devices, los, his, project_id]):
        times, samples = out.setdefault(row[0], ([], []))
        times.append(row[1])
        samples.append(analyse.sample_of(_ms_of_us(row[1]), row[2:]))
    return out


def _contexts(cursor, tasks: dict[int, _Task]) -> dict[int, object]:
    """Every task's TaskContext, built from the batch's shared baselines and telemetry. Telemetry
    is read only for the devices whose samples the verdicts will look at (`telemetry_devices`),
    over the task's whole window as one task reads it: the samples a verdict sees are the same."""
    by_project: dict[int, list[_Task]] = defaultdict(list)
    for task in tasks.values():
        by_project[task.project_id].append(task)
    contexts = {}
    for project_id, group in by_project.items():
        needs = {t.pk: analyse.baseline_keys(t.steps) for t in group}
        related = serving.related_devices(project_id, set().union(*(d for _, d in needs.values())))
        needs = {pk: (k, serving.expand(d, related)) for pk, (k, d) in needs.items()}
        stats, normals = _baselines_load(cursor, project_id, list(needs.values()))
        profiles = learned.profiles_for(project_id, [(t.name, t.release) for t in group])
        for task in group:
            baselines = {}
            for key in needs[task.pk][0]:
                baselines.update(stats.get(key, ()))
            contexts[task.pk] = analyse.context_build(
                task_id=task.task_id, started_at=task.started_at, ended_at=task.ended_at, steps=task.steps,
                baselines=baselines, device_normals=normals, samples={},
                profile=profiles.get((task.name, task.release)), related=related)
        wanted = {t.pk: devices for t in group if (devices := telemetry_devices(contexts[t.pk]))}
        windows = {pk: w for pk in wanted if (w := analyse.sample_window(tasks[pk].steps)) is not None}
        telemetry = _samples_load(cursor, project_id, windows, wanted)
        for pk, (lo, hi) in windows.items():
            lo, hi = _us(lo), _us(hi)
            for device in wanted[pk]:
                times, rows = telemetry.get(device, ((), ()))
                chosen = rows[bisect_left(times, lo):bisect_right(times, hi)]
                if chosen:
                    contexts[pk].samples[device] = chosen
    return contexts


# --- storing -------------------------------------------------------------------------------------

# The results go to a session-local staging table by COPY (no per-value quoting on the client),
# then one UPDATE applies those still claimed with our token.
_STAGE = "analysis_stage_result"
_STAGE_SQL = f"""CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (task_id int8, through timestamptz, path text[],
    budget jsonb, whatif jsonb, wasted float8, top text, kinds text[]) ON COMMIT DELETE ROWS"""
_STORE_SQL = f"""
UPDATE analysis_taskanalysis a SET analyzed_at = %s, analyzed_through = v.through, critical_path = v.path,
    budget = v.budget, whatif = v.whatif, wasted_ms = v.wasted, top_finding = v.top, finding_kinds = v.kinds,
    claimed_until = NULL, claim_token = ''
FROM {_STAGE} v WHERE a.task_id = v.task_id AND a.claim_token = %s
RETURNING a.task_id
"""

_FINDING_COLUMNS = ("project_id", "task_id", "kind", "step_ids", "wasted_ms", "severity", "summary", "evidence",
                    "confidence", "confidence_reason", "task_started_at", "release", "created_at")


def _store(tasks: dict[int, _Task], results: dict[int, dict], *, token: str) -> list[int]:
    """Write the results of the tasks still claimed with `token`, in one transaction; returns
    their ids (the others' claims were lost and their results are dropped)."""
    if not results:
        return []
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_STAGE_SQL)
        cursor.execute(f"TRUNCATE {_STAGE}")  # several batches may share a caller's transaction
        with cursor.cursor.copy(f"COPY {_STAGE} FROM STDIN") as copy:
            for pk, result in results.items():
                totals: dict[str, float] = defaultdict(float)
                for f in analyse.counted(result["findings"]):
                    totals[f.kind] += f.wasted_ms
                copy.write_row((pk, tasks[pk].last_event_at, result["critical_path"], Jsonb(result["budget"]),
                                Jsonb(result["whatif"]), round(result["wasted_ms"], 3),
                                max(totals, key=totals.get) if totals else "", sorted(totals)))
        # The UPDATE locks the rows until commit: the claim check and the writes are atomic.
        cursor.execute(_STORE_SQL, [now, token])
        mine = [r[0] for r in cursor.fetchall()]
        if not mine:
            return []
        cursor.execute("DELETE FROM analysis_finding WHERE task_id = ANY(%s)", [mine])
        with cursor.cursor.copy(f"COPY analysis_finding ({', '.join(_FINDING_COLUMNS)}) FROM STDIN") as copy:
            for pk in mine:
                task = tasks[pk]
                for f in results[pk]["findings"]:
                    copy.write_row((task.project_id, pk, f.kind, list(f.step_ids), round(f.wasted_ms, 3),
                                    f.severity, f.summary, Jsonb(f.evidence), f.confidence, f.confidence_reason,
                                    task.started_at, task.release, now))
    return mine


# --- a batch -------------------------------------------------------------------------------------


def _load(task_pks: list[int], token: str) -> tuple[dict[int, _Task], dict[int, object]]:
    try:
        with connection.cursor() as cursor:
            cursor.execute(_TASK_SQL, [list(task_pks)])
            tasks = {row[0]: _Task(row) for row in cursor.fetchall()}
            if tasks:
                _steps_load(cursor, tasks)
            return tasks, _contexts(cursor, tasks)
    except Exception:
        release(task_pks, token)
        raise


def _analyse(contexts: dict[int, object]) -> tuple[dict[int, dict], list[int]]:
    results, failed = {}, []
    for pk, ctx in contexts.items():
        try:
            results[pk] = analyse.analyse(ctx)
        except Exception:
            log.exception("analysis.task_failed task=%s", pk)
            failed.append(pk)
    return results, failed


def _finish(task_pks: list[int], token: str, tasks: dict, results: dict, failed: list[int],
            timings: tuple[float, float]) -> dict[str, int]:
    """Store a batch's results; the outcome counts."""
    started = time.monotonic()
    try:
        mine = _store(tasks, results, token=token)
    except Exception:
        release(task_pks, token)
        raise
    lost = set(results) - set(mine)
    for pk in sorted(lost):
        log.warning("analysis.claim_lost task=%s", pk)
    outcome = {"analysed": len(mine), "claim_lost": len(lost), "failed": len(failed),
               "steps": sum(len(tasks[pk].steps) for pk in mine)}
    log.info("analysis.batch_done tasks=%d steps=%d lost=%d failed=%d load_s=%.3f analyse_s=%.3f store_s=%.3f",
             len(mine), outcome["steps"], len(lost), len(failed), *timings, time.monotonic() - started)
    return outcome


def analyse_claimed(task_pks: list[int], *, token: str) -> dict[str, int]:
    """Analyse tasks this worker claimed with `token` and store their results. Returns counts
    of outcomes: analysed, claim_lost, failed (a task whose analysis raised keeps its claim until
    it expires, then the sweep hands it out again: no retry loop within a drain), plus `steps`."""
    if not task_pks:
        return {"analysed": 0, "claim_lost": 0, "failed": 0, "steps": 0}
    started = time.monotonic()
    tasks, contexts = _load(task_pks, token)
    loaded = time.monotonic()
    results, failed = _analyse(contexts)
    return _finish(task_pks, token, tasks, results, failed, (loaded - started, time.monotonic() - loaded))


def analyse_pipelined(claims: Iterator[tuple[str, list[int]]]) -> dict[str, int]:
    """analyse_claimed over a stream of claims, with the database work of the batches before and
    after overlapping the analysis of the current one: one thread claims and loads the next batch,
    another stores the previous one (each on its own connection), while this thread runs the
    detectors. The database waits (about a third of a batch) hide behind the pure analysis; the
    guarantees are analyse_claimed's, batch by batch. `claims` is consumed in the loader thread."""
    import queue
    import threading

    if connection.in_atomic_block:  # other connections would not see this transaction's rows
        total: dict[str, int] = {}
        for token, pks in claims:
            _add(total, analyse_claimed(pks, token=token))
        return total
    loaded: queue.Queue = queue.Queue(maxsize=1)
    stored: queue.Queue = queue.Queue(maxsize=1)
    total: dict[str, int] = {}
    errors: list[BaseException] = []

    def loader() -> None:
        try:
            for token, pks in claims:
                if errors:
                    break
                if pks:
                    started = time.monotonic()
                    loaded.put((token, pks, *_load(pks, token), time.monotonic() - started))
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)
        finally:
            loaded.put(None)
            connection.close()

    def storer() -> None:
        try:
            while (item := stored.get()) is not None:
                if not errors:
                    _add(total, _finish(*item))
                else:
                    release(item[0], item[1])
        except BaseException as exc:
            errors.append(exc)
            while stored.get() is not None:  # let the producer finish
                pass
        finally:
            connection.close()

    threads = [threading.Thread(target=loader, daemon=True), threading.Thread(target=storer, daemon=True)]
    for t in threads:
        t.start()
    try:
        while (item := loaded.get()) is not None:
            token, pks, tasks, contexts, load_s = item
            if errors:
                release(pks, token)
                continue
            started = time.monotonic()
            results, failed = _analyse(contexts)
            stored.put((pks, token, tasks, results, failed, (load_s, time.monotonic() - started)))
    finally:
        stored.put(None)
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return total


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


def run_ids(task_pks: list[int], *, force: bool = False, top_up: bool = True,
            drain_seconds: float | None = None) -> dict[str, int]:
    """The batch path behind the ingest trigger, the sweep and `analyze`: claim these tasks
    (the due ones unless `force`); with `top_up`, fill the batch up with other due tasks and keep
    claiming full batches of due tasks for up to `drain_seconds`, whether or not these tasks
    were still there to claim (the ingest trigger sends one message per window, so the tasks of
    the window another worker did not reach have no message of their own). When the time is up
    while batches were still being claimed, the outcome says `more_due`: the caller sends the
    drain on, so due tasks never wait for the sweep behind a busy worker."""
    deadline = time.monotonic() + (DRAIN_SECONDS if drain_seconds is None else drain_seconds)
    wanted = len(set(task_pks))
    state = {"skipped": 0, "more_due": 0}

    def claims():
        token, claimed = claim_ids(task_pks, force=force)
        state["skipped"] = wanted - len(claimed)
        if top_up and len(claimed) < BATCH_TASKS:
            claimed += _claim_more(token=token, limit=BATCH_TASKS - len(claimed))
        yield token, claimed
        while top_up and claimed:
            if time.monotonic() >= deadline:
                state["more_due"] = 1
                return
            token = secrets.token_hex(8)
            claimed = _claim_more(token=token, limit=BATCH_TASKS)
            yield token, claimed

    outcome = analyse_pipelined(claims())
    outcome["claimed_elsewhere_or_not_due"] = state["skipped"]
    outcome["more_due"] = state["more_due"]
    return outcome


def _claim_more(*, token: str, limit: int) -> list[int]:
    """Due tasks nobody holds: the recent ones first (cheap), then the sweep's whole horizon."""
    _, more = claim_due(limit=limit, token=token, horizon_seconds=RECENT_SECONDS)
    if len(more) < limit:
        more += claim_due(limit=limit - len(more), token=token)[1]
    return more


def run_due(*, limit: int = BATCH_TASKS, project_id: int | None = None) -> dict[str, int]:
    """Claim and analyse one batch of due tasks (of one project, if given)."""
    token, claimed = claim_due(limit=limit, project_id=project_id)
    return analyse_claimed(claimed, token=token)
