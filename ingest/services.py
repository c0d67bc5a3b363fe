"""The write side: projects, keys, and the one bulk, idempotent write path every ingest route
(native JSON, OTLP traces, OTLP metrics, the simulator) goes through.

Rows are upserted with `INSERT … SELECT FROM unnest(arrays) ON CONFLICT DO UPDATE`: one
statement per table per batch whatever its size, so sending the same ids again updates and
never duplicates, and steps may arrive before their task (a placeholder task is created and
filled in when the task event comes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from agentops.db import deadlock_retried
from ingest import conventions, instrumentation, partitions
from ingest.models import AuditEntry, IngestKey, Project, ProjectMembership, ResourceSample
from ingest.records import Batch, HistogramRecord, SampleRecord, StepRecord, TaskRecord

log = logging.getLogger("agentops.ingest")

# Sent after commit with `project_id` and `task_ids` (primary keys) of tasks whose end is
# known and which got new data. The analysis app listens; ingest never imports it.
tasks_ended = Signal()

KEY_PREFIX = "ao"


# --- projects, keys, members, and their audit trail ----------------------------------------
# The settings pages, the admin and the command line all change keys and members through these
# functions, so every change is checked the same way and audited once. `actor` is the user who
# made the change; None is the command line.

COMMAND_LINE = "command line"
KEY_NAME_MAX = IngestKey._meta.get_field("name").max_length


def audit_record(*, actor, project: Project | None, action: str, target: str = "",
                 details: dict | None = None) -> AuditEntry:
    """One audit entry. Never pass a secret in `details`: it is shown to the project's admins."""
    entry = AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=actor.get_username() if getattr(actor, "pk", None) else COMMAND_LINE,
        project=project, action=action, target=target[:300], details=details or {})
    log.info("audit.%s project=%s target=%s actor=%s", action, project.pk if project else "-",
             target, entry.actor_name)
    return entry


def _hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_create(*, project: Project, scopes: Sequence[str], name: str = "", actor=None) -> tuple[IngestKey, str]:
    """Create a key; returns it and the plaintext, which is shown once and never stored."""
    scopes = list(dict.fromkeys(scopes))
    unknown = set(scopes) - set(IngestKey.SCOPES)
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(IngestKey.SCOPES)}")
    name = name.strip()
    if len(name) > KEY_NAME_MAX:
        raise ValueError(f"a key's name has at most {KEY_NAME_MAX} characters")
    prefix = secrets.token_hex(6)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(24)}"
    with transaction.atomic():
        key = IngestKey.objects.create(
            project=project, name=name, prefix=prefix, key_hash=_hash_key(plaintext), scopes=scopes)
        audit_record(actor=actor, project=project, action="key.create", target=prefix,
                     details={"scopes": scopes, "name": name})
    return key, plaintext


def key_authenticate(*, plaintext: str) -> IngestKey | None:
    """The active key this plaintext belongs to, compared in constant time; None otherwise."""
    parts = plaintext.split("_")
    if len(parts) < 3 or parts[0] != KEY_PREFIX:
        return None
    key = IngestKey.objects.select_related("project").filter(prefix=parts[1]).first()
    if key is None or not secrets.compare_digest(key.key_hash, _hash_key(plaintext)):
        return None
    if key.revoked_at is not None:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        IngestKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def key_revoke(*, key: IngestKey, actor=None) -> bool:
    """Revoke the key from now on; False (and no audit entry) if it already was."""
    with transaction.atomic():
        done = IngestKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if done:
            audit_record(actor=actor, project=key.project, action="key.revoke", target=key.prefix,
                         details={"scopes": key.scopes, "name": key.name})
    return bool(done)


def project_create(*, name: str, actor=None) -> tuple[Project, str]:
    """A new project with one ingest key; returns the project and the key's plaintext."""
    with transaction.atomic():
        project = Project.objects.create(name=name)
        audit_record(actor=actor, project=project, action="project.create", target=name)
        _, plaintext = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST], name="default", actor=actor)
    return project, plaintext


def _role_checked(role: str) -> str:
    if role not in ProjectMembership.ROLES:
        raise ValueError(f"a role is one of {', '.join(ProjectMembership.ROLES)}, not {role!r}")
    return role


def _keeps_an_admin(*, project: Project, without) -> None:
    """A project keeps at least one admin: else only a superuser could manage it again."""
    admins = ProjectMembership.objects.filter(project=project, role=ProjectMembership.ROLE_ADMIN)
    if not admins.exclude(user=without).exists():
        raise ValueError(f"{without.get_username()!r} is the project's last admin: make another member an admin first")


def member_add(*, project: Project, user, role: str, actor=None) -> ProjectMembership:
    _role_checked(role)
    with transaction.atomic():
        membership, created = ProjectMembership.objects.get_or_create(
            project=project, user=user, defaults={"role": role})
        if not created:
            raise ValueError(f"{user.get_username()!r} is already a member ({membership.role})")
        audit_record(actor=actor, project=project, action="member.add", target=user.get_username(),
                     details={"role": role})
    return membership


def member_role_set(*, project: Project, user, role: str, actor=None) -> ProjectMembership:
    _role_checked(role)
    with transaction.atomic():
        membership = ProjectMembership.objects.select_for_update().filter(project=project, user=user).first()
        if membership is None:
            raise ValueError(f"{user.get_username()!r} is not a member")
        if membership.role == role:
            return membership
        if role != ProjectMembership.ROLE_ADMIN:
            _keeps_an_admin(project=project, without=user)
        before, membership.role = membership.role, role
        membership.save(update_fields=["role"])
        audit_record(actor=actor, project=project, action="member.role", target=user.get_username(),
                     details={"from": before, "to": role})
    return membership


def member_remove(*, project: Project, user, actor=None) -> None:
    with transaction.atomic():
        membership = ProjectMembership.objects.select_for_update().filter(project=project, user=user).first()
        if membership is None:
            raise ValueError(f"{user.get_username()!r} is not a member")
        if membership.role == ProjectMembership.ROLE_ADMIN:
            _keeps_an_admin(project=project, without=user)
        membership.delete()
        audit_record(actor=actor, project=project, action="member.remove", target=user.get_username(),
                     details={"role": membership.role})


# --- the write path ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreResult:
    tasks: int
    steps: int
    samples: int
    histograms: int


def _dedupe(records: Iterable, key) -> list:
    """Last one wins: Postgres refuses to upsert the same row twice in one statement."""
    return list({key(r): r for r in records}.values())


def _json(value: object) -> str | None:
    if value is None:
        return None
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _upsert(cursor, *, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
            target: str = "", select: Sequence[str] | None = None, conflict: str, update: str,
            returning: str = "") -> list[tuple]:
    """COPY the rows into a session-local staging table, then
    INSERT INTO table (target) SELECT select FROM staging ON CONFLICT … in one statement.

    `columns` name and type the staging columns; `select` (default: the columns as they are)
    maps them onto `target` (default: the column names). COPY is about three times cheaper for
    the server than binding one array per column and unnesting them."""
    if not rows:
        return []
    names = [name for name, _ in columns]
    # One staging table per column set: the same table is upserted with different columns.
    stage = f"stage_{table}_{zlib.crc32(repr(columns).encode()):08x}"
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {stage} ({', '.join(f'{n} {t}' for n, t in columns)}) "
        "ON COMMIT DELETE ROWS")
    # Several batches may share one transaction (a caller's atomic block): start empty.
    cursor.execute(f"TRUNCATE {stage}")
    with cursor.cursor.copy(f"COPY {stage} ({', '.join(names)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    select_list = ", ".join(select or [f"u.{n}" for n in names])
    cursor.execute(
        f"INSERT INTO {table} ({target or ', '.join(names)}) SELECT {select_list} FROM {stage} AS u "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {update}"
        + (f" RETURNING {returning}" if returning else ""))
    return cursor.fetchall() if returning else []


_STEP_COLUMNS = (
    "project_id, task_id, step_id, parent_step_id, kind, name, started_at, ended_at, duration_ms, "
    "status, error, depends_on, attributes, events, model, provider, device, input_tokens, "
    "output_tokens, cached_tokens, ttft_ms, streamed, tool_name, tool_args, tool_result, tool_call_id, "
    "tool_call_ids"
)
_TASK_COLUMNS = (
    "project_id, task_id, name, name_given, release, environment, session_id, started_at, ended_at, status, "
    "attributes, reported, step_count, input_tokens, output_tokens, error_count, last_event_at"
)


def batch_store(*, project: Project, batch: Batch) -> StoreResult:
    """Store a batch of records in one transaction; idempotent for the same ids. A deadlock (with
    a concurrent batch, or with the creation of a week's partition, which locks the tasks table
    for its foreign key) rolls the whole batch back, so it is simply stored again; unless the
    caller holds a transaction of its own, which the deadlock has ended: the error goes up."""
    return deadlock_retried(lambda: _batch_store(project=project, batch=batch), what="ingest",
                            context=f"project={project.pk}")


def _batch_store(*, project: Project, batch: Batch) -> StoreResult:
    tasks = _dedupe(batch.tasks, lambda t: t.task_id)
    steps = _dedupe(batch.steps, lambda s: (s.task_id, s.step_id))
    samples = _dedupe(batch.samples, lambda s: (s.device, s.ts))
    histograms = _dedupe(batch.histograms, lambda h: (h.metric, h.model, h.device, h.ts))
    now = timezone.now()
    ended: list[int] = []
    if steps:
        partitions.ensure(table="ingest_step", times=(s.started_at for s in steps))
    if samples:
        partitions.ensure(table="ingest_resourcesample", times=(s.ts for s in samples))
    with transaction.atomic(), connection.cursor() as cursor:
        _tasks_lock(cursor, project=project, task_ids={t.task_id for t in tasks} | {s.task_id for s in steps})
        _releases_upsert(cursor, project=project, tasks=tasks, steps=steps, now=now)
        task_pks, new_tasks = _tasks_upsert(cursor, project=project, tasks=tasks, steps=steps, now=now)
        _steps_upsert(cursor, project=project, steps=steps, task_pks=task_pks, new_tasks=new_tasks)
        if task_pks:
            ended = _tasks_refresh(cursor, project=project, task_pks=list(set(task_pks.values())))
        _devices_upsert(cursor, project=project, samples=samples, steps=steps, now=now)
        _samples_upsert(cursor, project=project, samples=samples)
        _histograms_upsert(cursor, project=project, histograms=histograms)
        # Last: concurrent batches of one service share its counter rows, locked until commit.
        _instrumentation_upsert(cursor, project=project, steps=steps)
        if ended:
            transaction.on_commit(
                lambda: tasks_ended.send(sender=Project, project_id=project.pk, task_ids=ended)
            )
    result = StoreResult(len(tasks), len(steps), len(samples), len(histograms))
    log.debug("ingest.stored project=%s tasks=%d steps=%d samples=%d histograms=%d",
             project.pk, *(getattr(result, f) for f in ("tasks", "steps", "samples", "histograms")))
    return result


# Releases and devices recur in every batch; their rows only need `last_seen` kept to the
# minute. A name this process stored (and committed) less than a minute ago is skipped.
SEEN_TTL_SECONDS = 60.0
_seen: dict[tuple[str, int, str], float] = {}


def _unseen(kind: str, project_id: int, names: Iterable[str]) -> set[str]:
    now = time.monotonic()
    fresh = {n for n in names if now - _seen.get((kind, project_id, n), -SEEN_TTL_SECONDS) >= SEEN_TTL_SECONDS}
    if fresh:
        def remember():
            stamp = time.monotonic()
            if len(_seen) > 100_000:
                _seen.clear()
            _seen.update({(kind, project_id, n): stamp for n in fresh})
        transaction.on_commit(remember)
    return fresh


def _tasks_lock(cursor, *, project, task_ids: set[str]) -> None:
    """Take this batch's tasks, one transaction-scoped advisory lock each, in one fixed order.
    Two batches touching the same tasks otherwise lock their rows in different orders (reported
    tasks in one statement, the placeholders of steps' tasks in the next, then their steps) and
    one of them can die in a deadlock. In a fixed order (of the hashes) the later batch waits
    instead. Keys are (project, hash of the task id); a collision
    only makes two unrelated tasks wait for each other."""
    if task_ids:
        cursor.execute("SELECT count(pg_advisory_xact_lock(%s, h)) FROM"
                       " (SELECT DISTINCT hashtext(t) AS h FROM unnest(%s::text[]) AS t ORDER BY 1) k",
                       [project.pk, list(task_ids)])


def _releases_upsert(cursor, *, project, tasks: list[TaskRecord], steps: list[StepRecord], now) -> None:
    names = _unseen("release", project.pk,
                    {t.release for t in tasks if t.release} | {s.release for s in steps if s.release})
    if not names:
        return
    rows = [(project.pk, name, now, now) for name in sorted(names)]
    _upsert(
        cursor, table="ingest_release",
        columns=[("project_id", "bigint"), ("name", "text"), ("first_seen", "timestamptz"),
                 ("last_seen", "timestamptz")],
        rows=rows, conflict="project_id, name",
        update="last_seen = EXCLUDED.last_seen",
    )


def _tasks_upsert(cursor, *, project, tasks: list[TaskRecord], steps: list[StepRecord],
                  now) -> tuple[dict[str, int], set[int]]:
    """Upsert reported tasks and placeholders for steps' tasks; returns the primary key of each
    task id, and the keys of the tasks this batch created (they have no earlier steps)."""
    pks: dict[str, int] = {}
    created: set[int] = set()
    reported_rows = [
        (t.task_id, t.name, t.name_given, t.release, t.environment, t.session_id, t.started_at, t.ended_at,
         t.status, _json(t.attributes))
        for t in tasks
    ]
    for task_id, pk, inserted in _upsert(
        cursor, table="ingest_task", target=_TASK_COLUMNS,
        columns=[("task_id", "text"), ("name", "text"), ("name_given", "bool"), ("release", "text"),
                 ("environment", "text"), ("session_id", "text"), ("started_at", "timestamptz"),
                 ("ended_at", "timestamptz"), ("status", "text"), ("attributes", "jsonb")],
        rows=reported_rows,
        select=[f"{project.pk}", "u.task_id", "u.name", "u.name_given", "u.release", "u.environment", "u.session_id",
                "u.started_at", "u.ended_at", "u.status", "coalesce(u.attributes, '{}')", "true",
                "0", "0", "0", "0", f"'{now.isoformat()}'::timestamptz"],
        conflict="project_id, task_id",
        update=(
            # A given name is never replaced by a derived one.
            "name = CASE WHEN ingest_task.name_given AND NOT EXCLUDED.name_given THEN ingest_task.name "
            "ELSE coalesce(nullif(EXCLUDED.name, ''), ingest_task.name) END, "
            "name_given = ingest_task.name_given OR EXCLUDED.name_given, "
            "release = coalesce(nullif(EXCLUDED.release, ''), ingest_task.release), "
            "environment = coalesce(nullif(EXCLUDED.environment, ''), ingest_task.environment), "
            "session_id = coalesce(nullif(EXCLUDED.session_id, ''), ingest_task.session_id), "
            "started_at = coalesce(EXCLUDED.started_at, ingest_task.started_at), "
            "ended_at = coalesce(EXCLUDED.ended_at, ingest_task.ended_at), "
            "status = coalesce(nullif(EXCLUDED.status, ''), ingest_task.status), "
            "attributes = ingest_task.attributes || EXCLUDED.attributes, "
            "reported = true, last_event_at = EXCLUDED.last_event_at"
        ),
        returning="task_id, id, xmax = 0",
    ):
        pks[task_id] = pk
        if inserted:
            created.add(pk)

    placeholders: dict[str, StepRecord] = {}
    for s in steps:
        if s.task_id not in pks and s.task_id not in placeholders:
            placeholders[s.task_id] = s
    rows = [(tid, s.release, s.environment, s.session_id) for tid, s in placeholders.items()]
    for task_id, pk, inserted in _upsert(
        cursor, table="ingest_task", target=_TASK_COLUMNS,
        columns=[("task_id", "text"), ("release", "text"), ("environment", "text"), ("session_id", "text")],
        rows=rows,
        select=[f"{project.pk}", "u.task_id", "''", "false", "u.release", "u.environment", "u.session_id",
                "NULL", "NULL", "''", "'{}'::jsonb", "false", "0", "0", "0", "0",
                f"'{now.isoformat()}'::timestamptz"],
        conflict="project_id, task_id",
        update=(
            "release = CASE WHEN ingest_task.reported OR ingest_task.release <> '' "
            "THEN ingest_task.release ELSE EXCLUDED.release END, "
            "environment = CASE WHEN ingest_task.reported OR ingest_task.environment <> '' "
            "THEN ingest_task.environment ELSE EXCLUDED.environment END, "
            "session_id = CASE WHEN ingest_task.reported OR ingest_task.session_id <> '' "
            "THEN ingest_task.session_id ELSE EXCLUDED.session_id END, "
            "last_event_at = EXCLUDED.last_event_at"
        ),
        returning="task_id, id, xmax = 0",
    ):
        pks[task_id] = pk
        if inserted:
            created.add(pk)
    return pks, created


def _steps_upsert(cursor, *, project, steps: list[StepRecord], task_pks: dict[str, int],
                  new_tasks: set[int]) -> None:
    rows = [
        (task_pks[s.task_id], s.step_id, s.parent_step_id, s.kind, s.name, s.started_at, s.ended_at,
         (s.ended_at - s.started_at).total_seconds() * 1000.0, s.status, s.error,
         _json(s.depends_on), _json(s.attributes), _json(s.events), s.model, s.provider, s.device,
         s.input_tokens, s.output_tokens, s.cached_tokens, s.ttft_ms, s.streamed, s.tool_name,
         _json(s.tool_args), s.tool_result, s.tool_call_id, _json(s.tool_call_ids))
        for s in steps
    ]
    columns = [
        ("task_pk", "bigint"), ("step_id", "text"), ("parent_step_id", "text"), ("kind", "text"),
        ("name", "text"), ("started_at", "timestamptz"), ("ended_at", "timestamptz"),
        ("duration_ms", "float8"), ("status", "text"), ("error", "text"), ("depends_on", "jsonb"),
        ("attributes", "jsonb"), ("events", "jsonb"), ("model", "text"), ("provider", "text"),
        ("device", "text"), ("input_tokens", "int"), ("output_tokens", "int"),
        ("cached_tokens", "int"), ("ttft_ms", "float8"), ("streamed", "bool"), ("tool_name", "text"),
        ("tool_args", "jsonb"), ("tool_result", "text"), ("tool_call_id", "text"),
        ("tool_call_ids", "jsonb"),
    ]
    select = [f"{project.pk}"] + [
        f"ARRAY(SELECT jsonb_array_elements_text(u.{name}))" if name in ("depends_on", "tool_call_ids")
        else "coalesce(u.events, '[]')" if name == "events"
        else "coalesce(u.attributes, '{}')" if name == "attributes"
        else f"u.{name}"
        for name, _ in columns
    ]
    if not rows:
        return
    # The start time is part of the key (the table is partitioned by it): a step sent again with
    # a corrected start replaces its old row instead of standing beside it. Tasks this batch
    # created have no earlier rows, which spares the lookup for most of a stream.
    resent = [r for r in rows if r[0] not in new_tasks]
    if resent:
        cursor.execute(
            "DELETE FROM ingest_step s USING unnest(%s::bigint[], %s::text[], %s::timestamptz[]) "
            "AS u(t, sid, st) WHERE s.project_id = %s AND s.task_id = u.t AND s.step_id = u.sid "
            "AND s.started_at <> u.st",
            [[r[0] for r in resent], [r[1] for r in resent], [r[5] for r in resent], project.pk])
    updated = [c.strip() for c in _STEP_COLUMNS.split(",")][3:]
    _upsert(
        cursor, table="ingest_step", target=_STEP_COLUMNS, columns=columns, rows=rows, select=select,
        conflict="task_id, step_id, started_at, project_id",
        update=", ".join(f"{c} = EXCLUDED.{c}" for c in updated),
    )


def _tasks_refresh(cursor, *, project, task_pks: list[int]) -> list[int]:
    """Recompute what a task derives from its steps; returns the ids of tasks known to have ended.

    A task that was never reported takes its bounds from its steps. A task whose name was not
    given is named after the agent that ran (its first agent step's agent name), else its
    service, else its root step (the OTLP root span may come last, or never); docs/otlp.md."""
    cursor.execute(
        """
        WITH s AS (
            SELECT task_id,
                   count(*) AS n,
                   -- Model calls' own usage; an agent or workflow span's usage is the total of
                   -- the calls under it, counted only where no model call carries any.
                   coalesce(sum(input_tokens) FILTER (WHERE kind = 'llm'), max(input_tokens), 0) AS inp,
                   coalesce(sum(output_tokens) FILTER (WHERE kind = 'llm'), max(output_tokens), 0) AS outp,
                   count(*) FILTER (WHERE status <> 'ok') AS errs,
                   min(started_at) AS first,
                   max(ended_at) AS last,
                   (array_agg(name ORDER BY (parent_step_id = '') DESC, started_at))[1] AS first_name,
                   (array_agg(agent_name ORDER BY started_at)
                        FILTER (WHERE agent_name IS NOT NULL AND lower(agent_name) <> ALL(%(generic)s)))[1] AS agent_name
            FROM (SELECT task_id, kind, name, parent_step_id, started_at, ended_at, status, input_tokens,
                         output_tokens, CASE WHEN kind = 'agent' THEN coalesce(
                                nullif(attributes->>'gen_ai.agent.name', ''), nullif(attributes->>'agent.name', ''),
                                nullif(attributes->>'agentops.agent.name', ''), nullif(name, '')) END AS agent_name
                  FROM ingest_step WHERE project_id = %(project)s AND task_id = ANY(%(pks)s)) steps
            GROUP BY task_id
        ), b AS (
            SELECT t.id,
                   CASE WHEN t.reported AND t.started_at IS NOT NULL THEN t.started_at
                        ELSE coalesce(s.first, t.started_at) END AS started,
                   CASE WHEN t.reported AND t.ended_at IS NOT NULL THEN t.ended_at
                        ELSE coalesce(s.last, t.ended_at) END AS ended,
                   s.n, s.inp, s.outp, s.errs, s.first_name, s.agent_name
            FROM ingest_task t LEFT JOIN s ON s.task_id = t.id
            WHERE t.project_id = %(project)s AND t.id = ANY(%(pks)s)
        )
        UPDATE ingest_task t SET
            started_at = b.started,
            ended_at = b.ended,
            duration_ms = extract(epoch FROM (b.ended - b.started)) * 1000.0,
            step_count = coalesce(b.n, 0),
            input_tokens = coalesce(b.inp, 0),
            output_tokens = coalesce(b.outp, 0),
            error_count = coalesce(b.errs, 0),
            name = CASE WHEN t.name_given THEN t.name
                        ELSE left(coalesce(b.agent_name, nullif(t.attributes->>'service.name', ''),
                                           b.first_name, nullif(t.name, ''), ''), 200) END,
            status = CASE WHEN t.status <> '' THEN t.status
                          WHEN t.reported THEN 'ok'
                          WHEN coalesce(b.errs, 0) > 0 THEN 'error' ELSE 'ok' END
        FROM b WHERE t.project_id = %(project)s AND t.id = b.id
        RETURNING t.id, t.reported AND t.ended_at IS NOT NULL
        """,
        {"generic": sorted(conventions.GENERIC_ROOT_NAMES), "project": project.pk, "pks": task_pks},
    )
    return [pk for pk, ended in cursor.fetchall() if ended]


def _devices_upsert(cursor, *, project, samples: list[SampleRecord], steps: list[StepRecord], now) -> None:
    devices: dict[str, tuple[str, str, str, str]] = {}
    labels: dict[str, dict] = {}
    for s in steps:
        if s.device:
            devices.setdefault(s.device, ("", "", "", ""))
        for name, given in s.device_labels.items():
            devices.setdefault(name, ("", "", "", ""))
            labels.setdefault(name, {}).update(given)
    for s in samples:
        vendor, hardware, host, role = devices.get(s.device, ("", "", "", ""))
        devices[s.device] = (s.vendor or vendor, s.hardware or hardware, s.host or host, s.role or role)
        if s.labels:
            labels.setdefault(s.device, {}).update(s.labels)
    # Remembered with what is known of them: a device first seen on a step (no vendor) must not
    # hide the vendor, hardware and host its resource samples bring a moment later.
    keys = {name: "\x00".join((name, *facts, _json(labels.get(name, {})))) for name, facts in devices.items()}
    unseen = _unseen("device", project.pk, keys.values())
    rows = [(project.pk, name, v, h, host, role, _json(labels.get(name, {})), now, now)
            for name, (v, h, host, role) in sorted(devices.items()) if keys[name] in unseen]
    _upsert(
        cursor, table="ingest_device",
        columns=[("project_id", "bigint"), ("name", "text"), ("vendor", "text"), ("hardware", "text"),
                 ("host", "text"), ("role", "text"), ("labels", "jsonb"), ("first_seen", "timestamptz"),
                 ("last_seen", "timestamptz")],
        rows=rows, conflict="project_id, name",
        update=(
            "vendor = coalesce(nullif(EXCLUDED.vendor, ''), ingest_device.vendor), "
            "hardware = coalesce(nullif(EXCLUDED.hardware, ''), ingest_device.hardware), "
            "host = CASE WHEN ingest_device.host_by_hand THEN ingest_device.host "
            "ELSE coalesce(nullif(EXCLUDED.host, ''), ingest_device.host) END, "
            "role = coalesce(nullif(EXCLUDED.role, ''), ingest_device.role), "
            "labels = ingest_device.labels || EXCLUDED.labels, "
            "last_seen = EXCLUDED.last_seen"
        ),
    )


def _samples_upsert(cursor, *, project, samples: list[SampleRecord]) -> None:
    known = ResourceSample.METRICS
    rows = []
    for s in samples:
        extra = {k: v for k, v in s.metrics.items() if k not in known}
        rows.append((project.pk, s.device, s.ts, *(s.metrics.get(k) for k in known), _json(extra)))
    _upsert(
        cursor, table="ingest_resourcesample",
        columns=[("project_id", "bigint"), ("device", "text"), ("ts", "timestamptz"),
                 *((k, "float8") for k in known), ("extra", "jsonb")],
        rows=rows, conflict="project_id, device, ts",
        update=", ".join(f"{c} = coalesce(EXCLUDED.{c}, ingest_resourcesample.{c})" for c in known)
        + ", extra = ingest_resourcesample.extra || EXCLUDED.extra",
    )


def _histograms_upsert(cursor, *, project, histograms: list[HistogramRecord]) -> None:
    rows = [
        (project.pk, h.metric, h.model, h.device, h.start, h.ts, h.count, h.sum,
         _json(h.bounds), _json(h.counts), _json(h.attributes))
        for h in histograms
    ]
    _upsert(
        cursor, table="ingest_latencyhistogram",
        columns=[("project_id", "bigint"), ("metric", "text"), ("model", "text"), ("device", "text"),
                 ("start", "timestamptz"), ("ts", "timestamptz"), ("count", "bigint"), ("sum", "float8"),
                 ("bounds", "jsonb"), ("counts", "jsonb"), ("attributes", "jsonb")],
        rows=rows,
        select=["u.project_id", "u.metric", "u.model", "u.device", "u.start", "u.ts", "u.count", "u.sum",
                "ARRAY(SELECT jsonb_array_elements_text(u.bounds)::float8)",
                "ARRAY(SELECT jsonb_array_elements_text(u.counts)::bigint)", "u.attributes"],
        conflict="project_id, metric, model, device, ts",
        update="count = EXCLUDED.count, sum = EXCLUDED.sum, bounds = EXCLUDED.bounds, "
        "counts = EXCLUDED.counts, start = EXCLUDED.start",
    )


_COUNT_KEY = ("hour", "service", "scope_name", "scope_version", "sdk_name", "sdk_language", "sdk_version",
              "release", "environment", "kind")


_COUNTS = ("spans", *instrumentation.FIELDS)
_COUNT_SQL = (
    f"INSERT INTO ingest_instrumentationcount (project_id, {', '.join(_COUNT_KEY)}, {', '.join(_COUNTS)}) "
    "VALUES {values} "
    f"ON CONFLICT (project_id, {', '.join(_COUNT_KEY)}) DO UPDATE SET "
    + ", ".join(f"{c} = ingest_instrumentationcount.{c} + EXCLUDED.{c}" for c in _COUNTS))


def _instrumentation_upsert(cursor, *, project, steps: list[StepRecord]) -> None:
    """Add this batch's spans to the per-hour, per-scope field counters (ingest/instrumentation.py).
    A batch makes a handful of rows: one INSERT with their values, not the staging table's four
    statements (with those, counting cost 11 % of a 512-span batch's store; now ~5 %, 1.4 ms)."""
    rows = instrumentation.tally(steps)
    if not rows:
        return
    placeholders = "(" + ", ".join(["%s"] * (1 + len(_COUNT_KEY) + len(_COUNTS))) + ")"
    cursor.execute(_COUNT_SQL.format(values=", ".join([placeholders] * len(rows))),
                   [value for row in rows for value in (project.pk, *row)])


# --- deletion ----------------------------------------------------------------------------


def data_delete(*, project: Project | None = None, before=None, chunk: int = 5_000,
                progress=None) -> dict[str, int]:
    """Delete a project's data (everything, or only what started before `before`), or — with no
    project — every project's data older than `before`. Tasks go in chunks so memory and lock
    time stay bounded; their steps and everything derived from them go with them."""
    from ingest.models import InstrumentationCount, LatencyHistogram, Task

    if project is None and before is None:
        raise ValueError("name a project, a cut-off time, or both")
    tasks = Task.objects.all()
    samples = ResourceSample.objects.all()
    histograms = LatencyHistogram.objects.all()
    counts = InstrumentationCount.objects.all()
    if project is not None:
        tasks, samples, histograms, counts = (qs.filter(project=project) for qs in (tasks, samples, histograms, counts))
    if before is not None:
        tasks = tasks.filter(last_event_at__lt=before).exclude(started_at__gte=before)
        samples = samples.filter(ts__lt=before)
        histograms = histograms.filter(ts__lt=before)
        counts = counts.filter(hour__lt=before)
    deleted = {"tasks": 0, "samples": 0, "histograms": 0}
    while True:
        ids = list(tasks.values_list("pk", flat=True)[:chunk])
        if not ids:
            break
        with transaction.atomic():
            Task.objects.filter(pk__in=ids).delete()
        deleted["tasks"] += len(ids)
        if progress:
            progress(deleted["tasks"])
    deleted["samples"] = samples.delete()[0]
    deleted["histograms"] = histograms.delete()[0]
    counts.delete()
    log.info("ingest.deleted %s", deleted)
    return deleted
