"""The schema Citus distributes by project (ingest 0018, analysis 0015 to 0017; docs/scaling.md
step 6), checked on whatever PostgreSQL the suite runs on, and, on a Citus cluster (`make
test-citus`), that a dashboard read, the analysis claim and a batch's steps load of one project run on
one worker."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from analysis.comparison import diff
from analysis.dashboard import exports
from analysis.dashboard.selectors import _STEP_JSON_SQL
from analysis.engine import batch, learned, steps
from analysis.filters import TaskFilters, task_queryset
from ingest import distribution
from ingest.models import Task
from tests.analysis.factories import analyse, make_finding, make_step, make_task
from tests.conftest import ON_CITUS

DISTRIBUTED = distribution.DISTRIBUTED
on_citus = pytest.mark.skipif(not ON_CITUS, reason="no Citus cluster configured: DATABASE_URL is a "
                              "single PostgreSQL (run `make citus && make test-citus`)")


def _rows(sql: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _key_columns(contype: str) -> list[tuple[str, str, list[str]]]:
    return [(table, name, columns) for table, name, columns in _rows(
        """SELECT c.conrelid::regclass::text, c.conname,
                  array_agg(a.attname::text ORDER BY a.attnum)
           FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
           WHERE c.contype = %s AND c.conrelid = ANY(%s::regclass[]) GROUP BY 1, 2""",
        [contype, list(DISTRIBUTED)])]


@pytest.mark.django_db
def test_every_primary_key_and_unique_constraint_of_project_data_includes_the_project():
    keys = _key_columns("p") + _key_columns("u")
    assert {table for table, _, _ in _key_columns("p")} >= {
        "ingest_task", "ingest_step", "ingest_resourcesample", "analysis_finding"}
    assert [(t, n) for t, n, columns in keys if "project_id" not in columns] == []


@pytest.mark.django_db
def test_steps_findings_and_analyses_refer_to_their_task_by_task_and_project():
    foreign = _rows(
        """SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint
           WHERE contype = 'f' AND confrelid = 'ingest_task'::regclass AND conparentid = 0""")
    referring = ("analysis_finding", "analysis_taskanalysis", "ingest_step")
    assert sorted(foreign) == [
        (table, "FOREIGN KEY (task_id, project_id) REFERENCES ingest_task(id, project_id) DEFERRABLE INITIALLY DEFERRED")
        for table in referring]


@pytest.mark.django_db
def test_no_project_data_table_has_an_identity_column_and_ids_still_count_up(project):
    identity = _rows("SELECT table_name FROM information_schema.columns WHERE is_identity = 'YES' "
                     "AND table_name = ANY(%s)", [list(DISTRIBUTED + distribution.REFERENCE)])
    assert identity == []
    first = Task.objects.create(project=project, task_id="a", last_event_at=timezone.now())
    second = Task.objects.create(project=project, task_id="b", last_event_at=timezone.now())
    assert second.pk > first.pk


@on_citus
@pytest.mark.django_db
def test_tables_have_the_citus_roles_the_docs_give():
    roles = dict(_rows("SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition "
                       "WHERE logicalrelid = ANY(%s::regclass[])", [list(DISTRIBUTED + distribution.REFERENCE)]))
    assert {t for t, m in roles.items() if m == "h"} == set(DISTRIBUTED)
    assert {t for t, m in roles.items() if m == "n"} == set(distribution.REFERENCE)
    colocated = _rows("SELECT count(DISTINCT colocationid) FROM pg_dist_partition "
                      "WHERE logicalrelid = ANY(%s::regclass[])", [list(DISTRIBUTED)])
    assert colocated == [(1,)]


def _task_count(plan: str) -> int:
    counts = [line.split(":", 1)[1].strip() for line in plan.splitlines() if "Task Count:" in line]
    assert counts, plan
    return int(counts[0])


@on_citus
@pytest.mark.django_db
def test_a_dashboard_read_of_one_project_runs_on_one_worker(project, other_project):
    task = Task.objects.create(project=project, task_id="t1", last_event_at=timezone.now())
    Task.objects.create(project=other_project, task_id="t1", last_event_at=timezone.now())

    # The task list's base query, and the task page's steps: one shard, one worker.
    assert _task_count(task_queryset(project=project, filters=TaskFilters()).explain()) == 1
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + _STEP_JSON_SQL, [project.pk, task.pk])
        assert _task_count("\n".join(row[0] for row in cursor.fetchall())) == 1
    # Without the project, the same read asks every shard.
    assert _task_count(Task.objects.all().explain()) > 1


def _shards_asked(sql: str) -> list[int]:
    """The Task Count of every distributed scan in the statement's plan (none: it reads only
    local or no tables)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return [int(line.split(":", 1)[1]) for line in plan.splitlines() if "Task Count:" in line]


@on_citus
@pytest.mark.django_db
def test_the_pages_of_one_task_and_its_session_read_one_worker(project, other_project):
    # What the browser check of issue 26 found asking every shard: the task list's and the task
    # page's costs, a task's findings and steps (page, comparison, coverage, device links, a step,
    # the find box), the session's findings, the API's findings (their task), the tasks export.
    for p in (project, other_project):
        # enough runs for a typical run (diff.MIN_RUNS), which the comparison builds from their steps
        for i, task_id in enumerate(["t1", "t2", *(f"r{n}" for n in range(diff.MIN_RUNS))]):
            task = make_task(p, task_id, session_id="s1" if i < 2 else "", duration_ms=1000.0 + i, step_count=2)
            make_step(task, "llm1", kind="llm", model="llama-70b", device="gpu-0", input_tokens=10, output_tokens=5)
            make_step(task, "tool1", offset_ms=200, tool_name="search", tool_args={"q": "refund"})
            make_finding(task, "hardware_queueing", wasted_ms=50.0, step_ids=["llm1"])
            analyse(task, kinds=["hardware_queueing"], wasted_ms=50.0)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    urls = ["/tasks?project=acme", "/tasks/t1?project=acme", "/tasks/t1/compare?project=acme&against=t2",
            "/tasks/t1/compare?project=acme&against=typical", "/tasks/t1/steps/llm1.json?project=acme",
            "/tasks/t1/search.json?project=acme&q=search", "/sessions/s1?project=acme",
            "/api/v1/tasks?project=acme", "/api/v1/tasks/t1?project=acme", "/api/v1/sessions/s1?project=acme"]
    with CaptureQueriesContext(connection) as queries:
        for url in urls:
            assert client.get(url).status_code == 200, url
    statements = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))]
    export, params = exports.export_sql(exports.parse_export(project=project, entity="tasks", params={"format": "csv"}))
    with connection.cursor() as cursor:
        statements.append(cursor.mogrify(export, params))
    wide = [sql for sql in statements if any(n > 1 for n in _shards_asked(sql))]
    assert not wide, "\n\n".join(wide)


@on_citus
@pytest.mark.django_db
def test_distributing_a_table_that_holds_rows_leaves_no_copy_of_them_on_the_coordinator(project):
    # A table that already holds rows when a migration distributes it (analysis 0016's task
    # analyses did): Citus copies them to the shards and, unless told, keeps the originals in the
    # coordinator's own table, on its disk for good.
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE probe_rows (id bigint, project_id bigint REFERENCES ingest_project (id),"
                       " payload text, PRIMARY KEY (id, project_id))")
        cursor.execute("INSERT INTO probe_rows SELECT g, %s, repeat('x', 200) FROM generate_series(1, 2000) g",
                       [project.pk])
        try:
            distribution.distribute(cursor, distributed=["probe_rows"])
            cursor.execute("SELECT count(*) FROM probe_rows WHERE project_id = %s", [project.pk])
            assert cursor.fetchone()[0] == 2000  # every row on its shard
            cursor.execute("SELECT pg_relation_size('probe_rows')")
            assert cursor.fetchone()[0] == 0  # none left behind on the coordinator
        finally:
            cursor.execute("DROP TABLE probe_rows")


@on_citus
@pytest.mark.django_db
def test_the_workers_run_the_products_statements_without_jit():
    # Citus reaches the workers on connections of its own, which no coordinator session setting
    # reaches; the local cluster turns JIT off for the database on every node (a worker compiled the
    # overview's critical path for ~650 ms: 43 → 720 ms).
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT result FROM run_command_on_workers('SHOW jit')")
        assert cursor.fetchall() == [("off",)]


@pytest.mark.django_db
def test_a_saved_row_is_updated_within_its_project_and_never_moved(project, other_project):
    task = Task.objects.create(project=project, task_id="t1", last_event_at=timezone.now())
    task.name = "renamed"
    with CaptureQueriesContext(connection) as queries:
        task.save()
    [update] = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assignments, where = update.split(" WHERE ")
    assert '"project_id"' not in assignments and '"project_id" = ' in where
    assert Task.objects.get(pk=task.pk).name == "renamed"

    stored = Task.objects.get(pk=task.pk)
    stored.project = other_project
    with pytest.raises(ValueError, match="stays in its project"):
        stored.save()


@on_citus
@pytest.mark.django_db
def test_the_analysis_claim_of_one_project_runs_on_one_worker(project, other_project):
    # The claim a worker makes for one project's due tasks, as claim_due sends it: its candidates,
    # the task's analysis it joins and the rows it inserts or locks are on one shard.
    with CaptureQueriesContext(connection) as queries:
        batch.claim_due(project_id=project.pk)
    [claim] = [q["sql"] for q in queries if "INSERT INTO analysis_taskanalysis" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + claim)
        assert _task_count("\n".join(row[0] for row in cursor.fetchall())) == 1


@on_citus
@pytest.mark.django_db
def test_a_batch_of_one_projects_tasks_claims_reads_and_stores_on_one_worker(project, other_project, settings):
    # The ingest trigger's message names its project: the claim by task ids, the read of the task
    # rows, the store's locks, its update and the delete of old findings, each on one shard.
    settings.ANALYSIS_QUIET_SECONDS = 0
    for p in (project, other_project):
        task = make_task(p, "t1", duration_ms=1000.0, step_count=2)
        make_step(task, "llm1", kind="llm", model="llama-70b", input_tokens=10, output_tokens=5)
        make_step(task, "tool1", offset_ms=200, tool_name="search", tool_args={"q": "refund"})
    pk = Task.objects.get(project=project, task_id="t1").pk
    with CaptureQueriesContext(connection) as queries:
        token, claimed = batch.claim_ids([pk], projects=[project.pk], force=True)
        assert claimed == {pk: project.pk}
        assert batch.analyse_claimed(claimed, token=token)["analysed"] == 1
    statements = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(
        ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE"))]
    assert any("INSERT INTO analysis_taskanalysis" in sql for sql in statements)
    assert any(sql.lstrip().startswith("UPDATE analysis_taskanalysis") for sql in statements)
    assert any("DELETE FROM analysis_finding" in sql for sql in statements)
    with connection.cursor() as cursor:  # the task rows, read in the binary protocol (not captured)
        sql, params = batch.task_query(claimed)
        statements.append(cursor.mogrify(sql, params))
    wide = [sql for sql in statements if any(n > 1 for n in _shards_asked(sql))]
    assert not wide, "\n\n".join(wide)


@on_citus
@pytest.mark.django_db
def test_a_learned_profile_of_one_project_is_refreshed_on_one_worker(project, other_project):
    # The browser check of issue 26 on 4 projects found the refresh's last write, what it cost,
    # updating the profile by its id alone: every shard asked, from every refresh of every agent.
    for p in (project, other_project):
        for n in range(3):
            task = make_task(p, f"t{n}", name="checkout-agent", release="v1", duration_ms=1000.0, step_count=2)
            make_step(task, "llm1", kind="llm", model="llama-70b", input_tokens=10, output_tokens=5)
            make_step(task, "tool1", offset_ms=200, tool_name="search", tool_args={"q": "refund"})
    with CaptureQueriesContext(connection) as queries:
        learned.refresh(project.pk, "checkout-agent", "v1")
        learned.refresh(project.pk, learned.PROJECT_AGENT, "")
    statements = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(
        ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE"))]
    assert any(sql.lstrip().startswith('UPDATE "analysis_agentprofile"') for sql in statements)
    wide = [sql for sql in statements if any(n > 1 for n in _shards_asked(sql))]
    assert not wide, "\n\n".join(wide)


@on_citus
@pytest.mark.django_db
def test_a_batch_loads_the_steps_of_one_projects_tasks_from_one_worker(project, other_project):
    # The largest read of a batch, as load_steps sends it for one project's tasks: one shard.
    task = Task.objects.create(project=project, task_id="t1", last_event_at=timezone.now())
    Task.objects.create(project=other_project, task_id="t1", last_event_at=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + steps._SQL, [[project.pk], [task.pk], None, None])
        assert _task_count("\n".join(row[0] for row in cursor.fetchall())) == 1


@on_citus
@pytest.mark.django_db
def test_a_database_that_grew_on_one_postgres_is_distributed_by_citus_distribute():
    # A user who outgrows one PostgreSQL: the database was migrated (and filled) without Citus, so
    # no migration distributed it; Citus is installed and the workers added afterwards.
    import subprocess
    import sys

    import psycopg
    from django.conf import settings

    from agentops import citus

    db = connection.settings_dict
    coordinator = (db["HOST"], int(db["PORT"]))
    workers = citus.workers_of(connection)
    name = f"{db['NAME']}_grown"
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    env = {**os.environ, "DATABASE_URL": url, "CELERY_BROKER_URL": "memory://", "DEBUG": "1"}

    def manage(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], env=env, cwd=settings.BASE_DIR,
                              capture_output=True, text=True, timeout=600)

    def rows(sql: str) -> list[tuple]:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    def one(sql: str):
        return rows(sql)[0][0]

    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        assert manage("migrate", "-v0").returncode == 0
        assert manage("simulate", "--project", "grown", "--tasks", "30", "--seed", "3").returncode == 0
        counts = {t: one(f"SELECT count(*) FROM {t}") for t in ("ingest_task", "ingest_step", "ingest_resourcesample")}
        assert counts["ingest_step"] > 0

        refused = manage("citus_distribute")  # Citus is not in this database yet: said so, nothing done
        assert refused.returncode == 1 and "CREATE EXTENSION citus" in refused.stderr

        citus.join_database(coordinator, workers, name)
        done = manage("citus_distribute")
        assert done.returncode == 0, done.stderr
        distributed = {table for (table,) in rows(
            "SELECT logicalrelid::regclass::text FROM pg_dist_partition WHERE partmethod = 'h'")}
        assert set(distribution.DISTRIBUTED) <= distributed
        assert {t: one(f"SELECT count(*) FROM {t}") for t in counts} == counts  # every row kept
        project = one("SELECT id FROM ingest_project WHERE name = 'grown'")
        plan = "\n".join(r[0] for r in rows(f"EXPLAIN SELECT count(*) FROM ingest_step WHERE project_id = {project}"))
        assert _task_count(plan) == 1
        # The coordinator keeps no copy of the rows it handed to the workers (partitions included).
        assert one("SELECT sum(pg_relation_size(c.oid)) FROM pg_class c WHERE c.relkind = 'r' AND "
                   "(c.relname = 'ingest_task' OR c.relname LIKE 'ingest_step%' OR c.relname LIKE "
                   "'ingest_resourcesample%') AND c.relnamespace = 'public'::regnamespace") == 0
        assert "nothing to do" in manage("citus_distribute").stdout
    finally:
        citus.drop_database([*workers, coordinator], name)
