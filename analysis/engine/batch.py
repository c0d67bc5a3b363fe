"""The analysis of claimed tasks, one path for one task or hundreds: who may analyse a task (the due
rule and the claim), how a batch of them is loaded, analysed and stored.

A task is *due* when it has ended (a task event with an end, or an OTLP root span) and no event
arrived for ANALYSIS_QUIET_SECONDS — or, if its end was never reported, after
ANALYSIS_ABANDON_SECONDS of silence — and it was never analysed or got events after the last
analysis (`TaskAnalysis.analyzed_through` < `Task.last_event_at`): `DUE_SQL`, the one rule the
claims, the sweep, `is_due` and the status page read.

Claiming is one conditional INSERT … ON CONFLICT DO UPDATE (`_CLAIM`) over any number of tasks:
it sets `claimed_until` and a random `claim_token` only where nobody holds an unexpired claim, so
two workers never analyse one task. A worker may take a task that is `queued` (the sweep marks due
tasks so, with a short lease, before it enqueues them; the same statement with the token QUEUED).

One batch is: that claim; one query for the tasks, one for all their steps, one for the baselines
of every key the batch needs (per project, shared by all its tasks) and one for the device
telemetry around them (the tasks' windows merged per device); the pure analysis
(`analyse.analyse`, the detector registry) task by task; and one transaction that stores the
results of the tasks whose claim is still ours: a multi-row UPDATE of their TaskAnalysis rows
that checks the claim token under the row locks, one DELETE of their old findings and one
COPY of the new ones. A worker whose claim expired (stalled, or SIGKILLed and later resurrected)
can never overwrite the new owner's results; a worker killed mid-batch writes nothing: its claims
expire and the sweep hands the tasks out again. A claim's lease is short (CLAIM_SECONDS) and renewed
while the worker holds it (`Heartbeat`), so that expiry comes within a minute of a worker's death
and never to live work. Due tasks are claimed in turns across projects (`_CANDIDATES`); a task of
more than HUGE_TASK_STEPS steps is analysed over its first HUGE_TASK_STEPS (`_huge_load`). Late data makes a task due again
(`analyzed_through`). One task ("analyse this one now", `pipeline.run`) is a batch of one.
How the time per task went: docs/analysis.md, "Throughput".
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone
from psycopg.rows import dict_row, kwargs_row
from psycopg.types.json import Jsonb

from agentops.db import deadlock_retried
from analysis.engine import analyse, learned, serving
from analysis.engine.baselines import DEVICE, baselines_ensure, sample_metric_sql
from analysis.engine.detectors.base import StepData, TaskContext, transports
from analysis.engine.steps import binary_rows, load_steps, ms_of_us
from analysis.engine.verdicts import telemetry_devices
from ingest.models import Project

log = logging.getLogger("agentops.analysis")

# Tasks per batch: big enough that the fixed cost of a batch (~8 statements) is noise per
# task, small enough that a batch stays well under a second of analysis and its claims are
# released long before they expire.
BATCH_TASKS = 500
# …and at most this many steps (a batch of huge tasks stays bounded in memory).
BATCH_STEPS = 20_000
# A task of more steps than this is too large to analyse fully: its analysis covers its first
# HUGE_TASK_STEPS steps (in start order) and the time until the next one starts, and TaskAnalysis
# .limited says so (the task page and the API show it). 50,000 steps is the size the engine is
# built and tested for (the critical path, the budget, the detectors' windows: linear, seconds,
# ~200 MB); a 200,000-span trace analysed whole took 3.3 GB and over 10 minutes (issue #39).
# Bounded so, the memory of one analysis is that of a 50,000-step task whatever the task's size.
HUGE_TASK_STEPS = 50_000
# A Celery message keeps claiming batches while tasks are due, for at most this long; then it
# returns so the worker's other messages are not starved.
DRAIN_SECONDS = 20.0
# The top-up looks at tasks whose last event is this recent first (the common case: analysis
# keeps up), and only then at the sweep's whole horizon.
RECENT_SECONDS = 300
# A claim's lease is short and renewed while its worker holds the tasks (`Heartbeat`, every
# HEARTBEAT_SECONDS): live work is never claimed again however long it runs (a 200,000-step task's
# analysis outlived a 300 s lease and ran twice), and a dead worker's tasks are free CLAIM_SECONDS
# after its last renewal at most; the sweep (every 5 s) then hands them out again: retried within a
# minute. A third of the lease between renewals leaves room for two missed ones (a renewal skips
# the rows a store has locked).
CLAIM_SECONDS = settings.ANALYSIS_CLAIM_SECONDS
HEARTBEAT_SECONDS = CLAIM_SECONDS / 3
# The claim token of a task the sweep enqueued: any worker may take it.
QUEUED = "queued"
# Due tasks are looked for among those whose last event is at most this old, so each claim reads
# a recent slice of the (project, last_event_at) index instead of every task ever stored. Tasks
# left unanalysed longer (an outage of hours) are picked up by `manage.py analyze --due`.
SWEEP_HORIZON_SECONDS = getattr(settings, "ANALYSIS_SWEEP_HORIZON_SECONDS", 6 * 3600)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _us(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


# --- claiming ------------------------------------------------------------------------------------

# Ended and quiet, or silent for the abandon period, and not analysed since its last event
# (`t` the task, `a` its TaskAnalysis row if any; the thresholds from `due_params`).
DUE_SQL = """((t.reported AND t.ended_at IS NOT NULL AND t.last_event_at < %(quiet)s) OR t.last_event_at < %(abandon)s)
  AND (a.task_id IS NULL OR a.analyzed_through IS NULL OR a.analyzed_through < t.last_event_at)"""

# Nobody holds the claim: never claimed, released, expired, or queued by the sweep (which only a
# worker's claim may take: the sweep does not queue a task twice).
_FREE = """(a.claimed_until IS NULL OR a.claimed_until < %(now)s
        OR (a.claim_token = %(queued)s AND %(token)s <> %(queued)s))"""

# The candidates in turns across projects: each project's oldest (by last event) first, then each
# one's second... so a project with thousands of due tasks cannot fill every batch while another
# project's task waits behind them. Up to `limit`, and up to `max_steps` steps in all (always one;
# NULL: no bound).
_CANDIDATES = """SELECT id, project_id, analyzed_through FROM (
    SELECT id, project_id, analyzed_through, row_number() OVER w AS n, sum(greatest(step_count, 1)) OVER w AS running
    FROM (SELECT t.id, t.project_id, a.analyzed_through, t.step_count, t.last_event_at,
                 row_number() OVER (PARTITION BY t.project_id ORDER BY t.last_event_at, t.id) AS turn
          FROM ingest_task t LEFT JOIN analysis_taskanalysis a ON a.task_id = t.id AND a.project_id = t.project_id
          WHERE {where}) r
    WINDOW w AS (ORDER BY turn, last_event_at, id ROWS UNBOUNDED PRECEDING)
    ORDER BY turn, last_event_at, id LIMIT %(limit)s) x
  WHERE n = 1 OR %(max_steps)s::int8 IS NULL OR running <= %(max_steps)s"""

# Rows are inserted (and conflicting rows locked) in (project, task id) order, whatever order the
# candidates were chosen in, the order the store locks them in too: two workers claiming
# overlapping sets in different orders (ties of last_event_at are common: a batch's tasks share
# one) deadlocked on the unique index, and the loser's message was lost until the sweep
# (tests/scale/test_two_workers.py, on a loaded machine). The key is (task_id, project_id), the
# project in it so that Citus can distribute the table by project (docs/scaling.md, step 6).
# The candidates are chosen in the statement's snapshot, but ON CONFLICT takes the newest version of
# a row, after waiting for a worker that is storing it: a task that worker has just analysed (and
# released) would be claimed again and analysed twice. So, unless forced, a task is taken only if
# nobody analysed it since the candidates were chosen (EXCLUDED carries the analyzed_through they saw).
_CLAIM = """
INSERT INTO analysis_taskanalysis AS a (task_id, project_id, critical_path, budget, whatif, wasted_ms,
    top_finding, finding_kinds, claim_token, claimed_until, analyzed_through)
SELECT c.id, c.project_id, '{{}}', '{{}}', '{{}}', 0, '', '{{}}', %(token)s, %(until)s, c.analyzed_through
FROM ({candidates}) c ORDER BY c.project_id, c.id
ON CONFLICT (task_id, project_id) DO UPDATE SET claim_token = EXCLUDED.claim_token, claimed_until = EXCLUDED.claimed_until
WHERE {free} AND (%(force)s OR a.analyzed_through IS NOT DISTINCT FROM EXCLUDED.analyzed_through)
RETURNING task_id, project_id
"""


def due_params(now: datetime) -> dict:
    """The thresholds DUE_SQL reads, at `now`."""
    return {"quiet": now - timedelta(seconds=settings.ANALYSIS_QUIET_SECONDS),
            "abandon": now - timedelta(seconds=settings.ANALYSIS_ABANDON_SECONDS)}


# What a claim returns: each claimed task's id and its project, in (project, id) order. The loads,
# the release and the store of a batch name the projects, so that on Citus each reads or writes the
# shards of the batch's projects, not every shard (docs/scaling.md, step 6). A bare list of task ids
# is accepted wherever a claim is (the evaluation's and the tests' loads): its reads ask every shard.
Claimed = dict[int, int]


def projects_of(task_pks: Mapping[int, int] | list[int]) -> list[int] | None:
    """The projects of a claim's tasks, None for bare task ids (read without their project)."""
    return sorted(set(task_pks.values())) if isinstance(task_pks, Mapping) else None


def _claim(where: str, *, token: str, limit: int, seconds: int | None = None, max_steps: int | None = None,
           force: bool = False, **params) -> Claimed:
    """Claim, with `token` for `seconds`, the tasks (`t`, `a`) matching `where`: {id: project}."""
    now = timezone.now()
    params.update(due_params(now), token=token, until=now + timedelta(seconds=seconds or CLAIM_SECONDS),
                  now=now, queued=QUEUED, limit=limit, max_steps=max_steps, force=force)
    sql = _CLAIM.format(candidates=_CANDIDATES.format(where=where), free=_FREE)

    def claim() -> Claimed:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return dict(sorted(cursor.fetchall(), key=lambda row: (row[1], row[0])))

    return deadlock_retried(claim, what="analysis.claim")


def claim_ids(task_pks: list[int], *, projects: list[int] | None = None,
              force: bool = False) -> tuple[str, Claimed]:
    """Claim these tasks (only the due ones unless `force`) in one statement: (token, the tasks
    claimed). A task another worker holds is left out. `projects`: the tasks' projects, when the
    caller knows them (the ingest trigger, `analyze`): on Citus the claim then runs on their shards
    only; a task of another project is not claimed."""
    token = secrets.token_hex(8)
    if not task_pks:
        return token, {}
    where = "t.id = ANY(%(ids)s)" + ("" if force else f" AND {DUE_SQL}")
    params = {"ids": list(task_pks)}
    if projects is not None:
        where += " AND t.project_id = ANY(%(projects)s)"
        params["projects"] = sorted(set(projects))
    return token, _claim(where, token=token, limit=len(set(task_pks)), force=force, **params)


def claim_due(*, limit: int = BATCH_TASKS, token: str | None = None, project_id: int | None = None,
              horizon_seconds: int | None = None, seconds: int | None = None,
              bounded: bool = True) -> tuple[str, Claimed]:
    """Claim up to `limit` due tasks nobody holds (and, if `bounded`, up to BATCH_STEPS steps),
    oldest last event first, within `horizon_seconds` of now (the sweep's horizon by default), for
    `seconds` (CLAIM_SECONDS by default): (token, the tasks claimed with their projects)."""
    token = token or secrets.token_hex(8)
    if limit <= 0:
        return token, {}
    horizon = SWEEP_HORIZON_SECONDS if horizon_seconds is None else horizon_seconds
    where = f"{DUE_SQL} AND t.last_event_at > %(horizon)s AND {_FREE}"
    params = {"horizon": timezone.now() - timedelta(seconds=horizon)}
    if project_id is not None:
        where += " AND t.project_id = %(project)s"
        params["project"] = project_id
    return token, _claim(where, token=token, limit=limit, seconds=seconds,
                         max_steps=BATCH_STEPS if bounded else None, **params)


def is_due(task_pk: int, *, project_id: int | None = None) -> bool:
    where = "t.id = %(pk)s" + ("" if project_id is None else " AND t.project_id = %(project)s")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM ingest_task t LEFT JOIN analysis_taskanalysis a"
                       f" ON a.task_id = t.id AND a.project_id = t.project_id"
                       f" WHERE {where} AND {DUE_SQL}",
                       {"pk": task_pk, "project": project_id, **due_params(timezone.now())})
        return cursor.fetchone() is not None


def release(task_pks: Mapping[int, int] | list[int], token: str) -> None:
    if task_pks:
        projects = projects_of(task_pks)
        with connection.cursor() as cursor:
            cursor.execute("UPDATE analysis_taskanalysis SET claimed_until = NULL, claim_token = ''"
                           " WHERE task_id = ANY(%s) AND claim_token = %s"
                           + ("" if projects is None else " AND project_id = ANY(%s)"),
                           [list(task_pks), token, *([] if projects is None else [projects])])


class Heartbeat:
    """Renews the leases of the claims a worker holds, every HEARTBEAT_SECONDS, from a thread of its
    own on a connection of its own, for as long as the `with` block runs: `hold` a claim once it
    is taken, `drop` it once it is stored or released. A renewal never waits: rows locked by a
    store (or by anyone) are skipped until the next beat, so it cannot take part in a deadlock.
    Inside a caller's transaction (tests, `analyze` in an atomic block) its claims are invisible to
    other connections, and so to other workers: nothing to renew, no thread is started."""

    def __init__(self) -> None:
        self._held: dict[str, Claimed] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not connection.in_atomic_block:
            self._thread = threading.Thread(target=self._run, name="analysis-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def hold(self, token: str, claimed: Mapping[int, int] | list[int]) -> None:
        if claimed:
            with self._lock:
                self._held[token] = dict(claimed) if isinstance(claimed, Mapping) else dict.fromkeys(claimed)

    def drop(self, token: str) -> None:
        with self._lock:
            self._held.pop(token, None)

    def renew(self) -> int:
        """Extend every held claim still ours by CLAIM_SECONDS from now: the rows renewed."""
        with self._lock:
            held = list(self._held.items())
        renewed = 0
        until = timezone.now() + timedelta(seconds=CLAIM_SECONDS)
        with connection.cursor() as cursor:
            for token, claimed in held:
                by_project: dict[int | None, list[int]] = defaultdict(list)
                for pk, project_id in claimed.items():
                    by_project[project_id].append(pk)
                for project_id, pks in sorted(by_project.items(), key=lambda item: item[0] or 0):
                    # One project a statement: on Citus a SELECT … FOR UPDATE must stay on one shard.
                    cursor.execute(
                        "UPDATE analysis_taskanalysis a SET claimed_until = %s FROM ("
                        " SELECT task_id, project_id FROM analysis_taskanalysis WHERE task_id = ANY(%s)"
                        " AND claim_token = %s" + ("" if project_id is None else " AND project_id = %s") +
                        " FOR UPDATE SKIP LOCKED) l WHERE a.task_id = l.task_id AND a.project_id = l.project_id"
                        " AND a.claimed_until < %s",
                        [until, sorted(pks), token, *([] if project_id is None else [project_id]), until])
                    renewed += cursor.rowcount
        return renewed

    def _run(self) -> None:
        try:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                try:
                    self.renew()
                except Exception as exc:  # the database away for a beat: the lease has room for two
                    log.warning("analysis.heartbeat_failed error=%s", exc)
        finally:
            connection.close()


# --- loading -------------------------------------------------------------------------------------

# Rows are read by column name (the aliases), never by position: a column added to a query or a
# field added to StepData cannot shift the others.


@dataclass(slots=True)
class _Task:
    pk: int
    project_id: int
    task_id: str
    started_at: datetime | None
    ended_at: datetime | None
    last_event_at: datetime
    release: str
    name: str
    step_count: int
    steps: list[StepData] = field(default_factory=list)
    # A task over HUGE_TASK_STEPS: what its analysis covered (TaskAnalysis.limited), and the end of
    # the part analysed.
    limited: dict | None = None
    analysed_until: datetime | None = None


_LOADED = ("steps", "limited", "analysed_until")  # not columns: filled in by the loading
_TASK_SQL = f"""SELECT {", ".join("id AS pk" if f.name == "pk" else f.name for f in fields(_Task) if f.name not in _LOADED)}
FROM ingest_task WHERE id = ANY(%s)"""

_BASELINE_SQL = """SELECT kind, key, device, count, median_ms, mad_ms, p90_ms, p99_ms, stats::text AS stats
FROM analysis_baseline WHERE project_id = %s AND kind = ANY(%s) AND key = ANY(%s)"""

# One index range scan per window (LATERAL): a join would read every sample of the project.
# Its metric columns are analyse._SAMPLE_METRICS, in that order (`analyse.sample_of`).
_SAMPLE_SQL = f"""SELECT w.device, (extract(epoch FROM r.ts) * 1000000)::int8, {", ".join(sample_metric_sql(m) for m in analyse._SAMPLE_METRICS)}
FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[]) w(device, lo, hi)
CROSS JOIN LATERAL (SELECT * FROM ingest_resourcesample x WHERE x.project_id = %s AND x.device = w.device
                    AND x.ts >= w.lo AND x.ts <= w.hi OFFSET 0) r
ORDER BY w.device, r.ts"""


def task_query(task_pks: Mapping[int, int] | list[int]) -> tuple[str, list]:
    """The statement and parameters that read these tasks' rows: by their projects too, for a claim."""
    projects = projects_of(task_pks)
    if projects is None:
        return _TASK_SQL, [list(task_pks)]
    return _TASK_SQL + " AND project_id = ANY(%s)", [list(task_pks), projects]


def _tasks_load(cursor, task_pks: Mapping[int, int] | list[int]) -> dict[int, _Task]:
    """The tasks, each with its steps in start order; a task of more than HUGE_TASK_STEPS steps
    with its first HUGE_TASK_STEPS only, read on their own (`_huge_load`)."""
    tasks = {t.pk: t for t in binary_rows(cursor, *task_query(task_pks), kwargs_row(_Task))}
    huge = [t for t in tasks.values() if t.step_count > HUGE_TASK_STEPS]
    rest = [pk for pk, t in tasks.items() if t.step_count <= HUGE_TASK_STEPS]
    projects = {t.project_id for t in tasks.values()}
    for pk, steps in load_steps(cursor, rest, projects=projects).items():
        tasks[pk].steps = steps
    for task in huge:
        _huge_load(cursor, task)
    return tasks


def _huge_load(cursor, task: _Task) -> None:
    """A huge task's first HUGE_TASK_STEPS steps in start order, and the instant the next one
    starts: its analysis covers the task from its start to that instant (every step that started
    before it), and says so (`limited`). Memory and time then stay those of a task of
    HUGE_TASK_STEPS steps, however large the task (docs/analysis.md, "Huge tasks")."""
    steps = load_steps(cursor, [task.pk], projects=[task.project_id], limit=HUGE_TASK_STEPS + 1).get(task.pk, [])
    if len(steps) <= HUGE_TASK_STEPS:  # step_count was ahead of the rows (steps deleted): all of them
        task.steps = steps
        return
    cut = steps.pop()
    task.steps = steps
    task.analysed_until = datetime.fromtimestamp(cut.start_ms / 1000, tz=UTC)
    task.limited = {"reason": "too_large", "steps": task.step_count, "analysed_steps": len(steps),
                    "limit": HUGE_TASK_STEPS, "analysed_until": task.analysed_until.isoformat()}
    log.warning("analysis.task_too_large task=%s steps=%d analysed=%d", task.pk, task.step_count, len(steps))


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

    def fetch() -> list[dict]:
        return binary_rows(cursor, _BASELINE_SQL, [project_id, sorted({k for k, _ in keys} | {DEVICE}),
                                                    sorted({n for _, n in keys} | devices)], dict_row)

    rows = fetch()
    found = {(r["kind"], r["key"]) for r in rows}
    if any(k not in found for k in keys) or any((DEVICE, d) not in found for d in devices):
        baselines_ensure(project=Project(pk=project_id), keys=keys, devices=devices)
        rows = fetch()
    stats: dict[tuple[str, str], dict] = defaultdict(dict)
    normals: dict[str, object] = {}
    for row in rows:
        if row["stats"] is not None:
            row["stats"] = json.loads(row["stats"])
        entry = analyse.baseline_entry(**row)
        if entry is None:
            continue
        kind, key = row["kind"], row["key"]
        if kind == DEVICE:
            normals[key] = entry
        elif (kind, key) in keys:
            stats[(kind, key)][(kind, key, row["device"])] = entry
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
    for row in binary_rows(cursor, _SAMPLE_SQL, [devices, los, his, project_id]):
        times, samples = out.setdefault(row[0], ([], []))
        times.append(row[1])
        samples.append(analyse.sample_of(ms_of_us(row[1]), row[2:]))
    return out


def _contexts(cursor, tasks: dict[int, _Task]) -> dict[int, TaskContext]:
    """Every task's TaskContext, built from the batch's shared baselines and telemetry. Telemetry
    is read only for the devices whose samples the verdicts will look at (`telemetry_devices`),
    over the task's whole window: what a task's analysis sees does not depend on its batch."""
    by_project: dict[int, list[_Task]] = defaultdict(list)
    for task in tasks.values():
        by_project[task.project_id].append(task)
    contexts = {}
    for project_id, group in by_project.items():
        reached = {t.pk: transports(t.steps) for t in group}  # once per task: keys, context, window
        needs = {t.pk: analyse.baseline_keys(t.steps, reached[t.pk]) for t in group}
        related = serving.related_devices(project_id, set().union(*(d for _, d in needs.values())))
        needs = {pk: (k, serving.expand(d, related)) for pk, (k, d) in needs.items()}
        families = serving.device_families(project_id, set().union(*(d for _, d in needs.values())))
        stats, normals = _baselines_load(cursor, project_id, list(needs.values()))
        profiles = learned.profiles_for(project_id, [(t.name, t.release) for t in group])
        for task in group:
            baselines = {}
            for key in needs[task.pk][0]:
                baselines.update(stats.get(key, ()))
            contexts[task.pk] = analyse.context_build(
                task_id=task.task_id, started_at=task.started_at, ended_at=task.analysed_until or task.ended_at,
                steps=task.steps,
                baselines=baselines, device_normals=normals, samples={},
                profile=profiles.get((task.name, task.release)), related=related, families=families,
                reached=reached[task.pk], release=task.release)
        wanted = {t.pk: devices for t in group if (devices := telemetry_devices(contexts[t.pk]))}
        windows = {pk: w for pk in wanted if (w := analyse.sample_window(tasks[pk].steps, reached[pk])) is not None}
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
_STAGE_SQL = f"""CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (task_id int8, project_id int8, through timestamptz,
    path text[], budget jsonb, whatif jsonb, wasted float8, top text, kinds text[], limited jsonb)
    ON COMMIT DELETE ROWS"""
_STORE_SQL = f"""
UPDATE analysis_taskanalysis a SET analyzed_at = %s, analyzed_through = v.through, critical_path = v.path,
    budget = v.budget, whatif = v.whatif, wasted_ms = v.wasted, top_finding = v.top, finding_kinds = v.kinds,
    limited = v.limited, claimed_until = NULL, claim_token = ''
FROM {_STAGE} v WHERE a.task_id = v.task_id AND a.project_id = v.project_id AND a.claim_token = %s
  AND a.project_id = ANY(%s)
RETURNING a.task_id
"""

_FINDING_COLUMNS = ("project_id", "task_id", "kind", "step_ids", "wasted_ms", "severity", "summary", "evidence",
                    "confidence", "confidence_reason", "task_started_at", "release", "created_at")


def _store(tasks: dict[int, _Task], results: dict[int, dict], *, token: str) -> list[int]:
    """Write the results of the tasks still claimed with `token`, in one transaction; returns
    their ids (the others' claims were lost and their results are dropped)."""
    if not results:
        return []
    return deadlock_retried(lambda: _store_once(tasks, results, token=token), what="analysis.store")


def _store_once(tasks: dict[int, _Task], results: dict[int, dict], *, token: str) -> list[int]:
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_STAGE_SQL)
        cursor.execute(f"TRUNCATE {_STAGE}")  # several batches may share a caller's transaction
        with cursor.cursor.copy(f"COPY {_STAGE} FROM STDIN") as copy:
            for pk, result in results.items():
                totals: dict[str, float] = defaultdict(float)
                for f in analyse.counted(result["findings"]):
                    totals[f.kind] += f.wasted_ms
                copy.write_row((pk, tasks[pk].project_id, tasks[pk].last_event_at, result["critical_path"],
                                Jsonb(result["budget"]), Jsonb(result["whatif"]), round(result["wasted_ms"], 3),
                                max(totals, key=totals.get) if totals else "", sorted(totals),
                                None if tasks[pk].limited is None else Jsonb(tasks[pk].limited)))
        # The UPDATE locks the rows until commit: the claim check and the writes are atomic. They
        # are locked first in (project, task id) order, the order a claim takes them in, so a store
        # and a concurrent claim that wants some of the same rows cannot deadlock. One statement a
        # project: on Citus a SELECT … FOR UPDATE must stay on one shard.
        by_project: dict[int, list[int]] = defaultdict(list)
        for pk in results:
            by_project[tasks[pk].project_id].append(pk)
        for project_id, pks in sorted(by_project.items()):
            cursor.execute("SELECT 1 FROM analysis_taskanalysis WHERE project_id = %s AND task_id = ANY(%s)"
                           " ORDER BY task_id FOR UPDATE", [project_id, sorted(pks)])
        cursor.execute(_STORE_SQL, [now, token, sorted(by_project)])
        mine = [r[0] for r in cursor.fetchall()]
        if not mine:
            return []
        cursor.execute("DELETE FROM analysis_finding WHERE project_id = ANY(%s) AND task_id = ANY(%s)",
                       [sorted(by_project), mine])
        with cursor.cursor.copy(f"COPY analysis_finding ({', '.join(_FINDING_COLUMNS)}) FROM STDIN") as copy:
            for pk in mine:
                task = tasks[pk]
                for f in results[pk]["findings"]:
                    copy.write_row((task.project_id, pk, f.kind, list(f.step_ids), round(f.wasted_ms, 3),
                                    f.severity, f.summary, Jsonb(f.evidence), f.confidence, f.confidence_reason,
                                    task.started_at, task.release, now))
    return mine


# --- a batch -------------------------------------------------------------------------------------


def _load(task_pks: Mapping[int, int] | list[int], token: str) -> tuple[dict[int, _Task], dict[int, TaskContext]]:
    try:
        with connection.cursor() as cursor:
            tasks = _tasks_load(cursor, task_pks)
            return tasks, _contexts(cursor, tasks)
    except Exception:
        release(task_pks, token)
        raise


def contexts_load(task_pks: list[int]) -> dict[int, TaskContext]:
    """The contexts these tasks are analysed with, as a batch of them is loaded (nothing claimed or
    stored): what the detectors would see."""
    with connection.cursor() as cursor:
        return _contexts(cursor, _tasks_load(cursor, task_pks))


def _analyse(contexts: dict[int, TaskContext]) -> tuple[dict[int, dict], list[int]]:
    results, failed = {}, []
    for pk, ctx in contexts.items():
        try:
            results[pk] = analyse.analyse(ctx)
        except Exception:
            log.exception("analysis.task_failed task=%s", pk)
            failed.append(pk)
    return results, failed


def analysis_lag_key(project_id: int) -> str:
    """The cache key of a project's analysis lag as the pages show it (analysis/dashboard/status.py,
    "findings are N minutes behind"): dropped whenever a batch stores results of the project."""
    return f"analysis-lag:{project_id}"


def _forget_lag(project_ids: set[int]) -> None:
    try:
        cache.delete_many([analysis_lag_key(p) for p in project_ids])
    except Exception as exc:  # the cache is a shortcut: its outage must not fail a stored batch
        log.warning("analysis.lag_cache_unavailable error=%s", exc)


def _finish(task_pks: Mapping[int, int] | list[int], token: str, tasks: dict, results: dict, failed: list[int],
            timings: tuple[float, float]) -> dict[str, int]:
    """Store a batch's results; the outcome counts."""
    started = time.monotonic()
    try:
        mine = _store(tasks, results, token=token)
    except Exception:
        release(task_pks, token)
        raise
    if mine:
        _forget_lag({tasks[pk].project_id for pk in mine})
    if failed:
        _hold_failed(tasks, failed, token)
    lost = set(results) - set(mine)
    for pk in sorted(lost):
        log.warning("analysis.claim_lost task=%s", pk)
    outcome = {"analysed": len(mine), "claim_lost": len(lost), "failed": len(failed),
               "steps": sum(len(tasks[pk].steps) for pk in mine)}
    log.info("analysis.batch_done tasks=%d steps=%d lost=%d failed=%d load_s=%.3f analyse_s=%.3f store_s=%.3f",
             len(mine), outcome["steps"], len(lost), len(failed), *timings, time.monotonic() - started)
    return outcome


# A task whose analysis raised is tried again after this, not after the short lease: a task that
# fails every time must not cost a worker an analysis every half minute.
FAILED_RETRY_SECONDS = 300


def _hold_failed(tasks: dict[int, _Task], failed: list[int], token: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE analysis_taskanalysis SET claimed_until = %s WHERE task_id = ANY(%s)"
                       " AND project_id = ANY(%s) AND claim_token = %s",
                       [timezone.now() + timedelta(seconds=FAILED_RETRY_SECONDS), sorted(failed),
                        sorted({tasks[pk].project_id for pk in failed}), token])


def analyse_claimed(task_pks: Mapping[int, int] | list[int], *, token: str) -> dict[str, int]:
    """Analyse tasks this worker claimed with `token` and store their results. Returns counts
    of outcomes: analysed, claim_lost, failed (a task whose analysis raised keeps its claim for
    FAILED_RETRY_SECONDS, then the sweep hands it out again: no retry loop within a drain), plus
    `steps`."""
    if not task_pks:
        return {"analysed": 0, "claim_lost": 0, "failed": 0, "steps": 0}
    started = time.monotonic()
    with Heartbeat() as beat:
        beat.hold(token, task_pks)
        tasks, contexts = _load(task_pks, token)
        loaded = time.monotonic()
        results, failed = _analyse(contexts)
        return _finish(task_pks, token, tasks, results, failed, (loaded - started, time.monotonic() - loaded))


def analyse_pipelined(claims: Iterator[tuple[str, Mapping[int, int] | list[int]]]) -> dict[str, int]:
    """analyse_claimed over a stream of claims, with the database work of the batches before and
    after overlapping the analysis of the current one: one thread claims and loads the next batch,
    another stores the previous one (each on its own connection), while this thread runs the
    detectors. The database waits (about a third of a batch) hide behind the pure analysis; the
    guarantees are analyse_claimed's, batch by batch. `claims` is consumed in the loader thread.

    The loader claims one batch ahead of the analysis at most, and none while a batch of more than
    BATCH_STEPS steps (a huge task, alone in its batch) is analysed: tasks claimed ahead wait for the
    batch before them, and their leases are renewed meanwhile, so a worker busy for a minute with
    one huge task must not sit on other projects' small ones (issue #39)."""
    import queue

    if connection.in_atomic_block:  # other connections would not see this transaction's rows
        total: dict[str, int] = {}
        for token, pks in claims:
            _add(total, analyse_claimed(pks, token=token))
        return total
    loaded: queue.Queue = queue.Queue(maxsize=1)
    stored: queue.Queue = queue.Queue(maxsize=1)
    room = threading.Semaphore(0)  # released when the loader may claim the next batch
    total: dict[str, int] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def loader() -> None:
        try:
            ahead = False
            stream = iter(claims)
            while True:
                if ahead:
                    room.acquire()
                if errors or done.is_set():
                    break
                token, pks = next(stream, (None, None))
                if token is None:
                    break
                beat.hold(token, pks)
                ahead = bool(pks)
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
                beat.drop(item[1])
        except BaseException as exc:
            errors.append(exc)
            while (item := stored.get()) is not None:  # let the producer finish
                beat.drop(item[1])
        finally:
            connection.close()

    with Heartbeat() as beat:
        threads = [threading.Thread(target=loader, daemon=True), threading.Thread(target=storer, daemon=True)]
        for t in threads:
            t.start()
        try:
            while (item := loaded.get()) is not None:
                token, pks, tasks, contexts, load_s = item
                if errors:
                    release(pks, token)
                    beat.drop(token)
                    room.release()
                    continue
                huge = sum(len(t.steps) for t in tasks.values()) > BATCH_STEPS
                if not huge:
                    room.release()
                started = time.monotonic()
                results, failed = _analyse(contexts)
                stored.put((pks, token, tasks, results, failed, (load_s, time.monotonic() - started)))
                if huge:
                    room.release()
        finally:
            done.set()
            room.release()
            stored.put(None)
            for t in threads:
                t.join()
    if errors:
        raise errors[0]
    return total


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


def run_ids(task_pks: list[int], *, projects: list[int] | None = None, force: bool = False,
            top_up: bool = True, drain_seconds: float | None = None) -> dict[str, int]:
    """The batch path behind the ingest trigger, the sweep and `analyze`: claim these tasks
    (the due ones unless `force`); with `top_up`, fill the batch up with other due tasks and keep
    claiming full batches of due tasks for up to `drain_seconds`, whether or not these tasks
    were still there to claim (the ingest trigger sends one message per window, so the tasks of
    the window another worker did not reach have no message of their own). When the time is up
    while batches were still being claimed, the outcome says `more_due`: the caller sends the
    drain on, so due tasks never wait for the sweep behind a busy worker. `projects`: the tasks'
    projects, when known (claim_ids)."""
    deadline = time.monotonic() + (DRAIN_SECONDS if drain_seconds is None else drain_seconds)
    wanted = len(set(task_pks))
    state = {"skipped": 0, "more_due": 0}

    def claims():
        token, claimed = claim_ids(task_pks, projects=projects, force=force)
        state["skipped"] = wanted - len(claimed)
        if top_up and len(claimed) < BATCH_TASKS:
            claimed |= _claim_more(token=token, limit=BATCH_TASKS - len(claimed))
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


def _claim_more(*, token: str, limit: int) -> Claimed:
    """Due tasks nobody holds: the recent ones first (cheap), then the sweep's whole horizon."""
    _, more = claim_due(limit=limit, token=token, horizon_seconds=RECENT_SECONDS)
    if len(more) < limit:
        more |= claim_due(limit=limit - len(more), token=token)[1]
    return more


def run_due(*, limit: int = BATCH_TASKS, project_id: int | None = None) -> dict[str, int]:
    """Claim and analyse one batch of due tasks (of one project, if given)."""
    token, claimed = claim_due(limit=limit, project_id=project_id)
    return analyse_claimed(claimed, token=token)
