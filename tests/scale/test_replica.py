"""The read-replica route (agentops/db.py): with a `replica` database configured, dashboard and
read-API GETs read traces from it, while ingest, auth, analysis jobs and reads inside a
transaction stay on the primary. Here the replica alias is a second connection to the test
database (what a streaming replica is, minus the lag), so which connection ran which query
is what the tests look at."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections, transaction
from django.db.utils import load_backend
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agentops.db import read_alias, replica_reads
from analysis.engine import pipeline
from ingest.models import IngestKey, Task
from tests.conftest import single_node

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def replica(transactional_db, settings):
    """What DATABASE_REPLICA_URL configures, with the replica a second connection to the test
    database (made by hand: the test runner only allows the aliases it set up)."""
    alias = {**connections["default"].settings_dict}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding setting DATABASES can lead to unexpected behavior"
        settings.DATABASES = {**settings.DATABASES, "replica": alias}
    settings.DATABASE_ROUTERS = ["agentops.db.ReplicaRouter"]
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "agentops.db.ReplicaReadsMiddleware"]
    wrapper = load_backend(alias["ENGINE"]).DatabaseWrapper(alias, "replica")
    connections["replica"] = wrapper
    yield wrapper
    wrapper.close()
    del connections["replica"]


def _ingest(client: Client, key: str) -> None:
    events = [{"type": "task", "task_id": "t-1", "name": "checkout", "release": "v1",
               "started_at": T0.isoformat(), "ended_at": (T0 + timedelta(seconds=2)).isoformat()}]
    events += [{"type": "step", "task_id": "t-1", "step_id": f"s{i}", "kind": "tool", "name": "search",
                "tool_name": "search", "started_at": (T0 + timedelta(seconds=i * 0.5)).isoformat(),
                "ended_at": (T0 + timedelta(seconds=i * 0.5 + 0.4)).isoformat()} for i in range(4)]
    response = client.post("/api/v1/ingest", data=json.dumps({"events": events}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content


def _tables(queries) -> str:
    return " ".join(q["sql"] for q in queries)


def test_ingest_writes_only_the_primary_and_the_read_api_reads_traces_from_the_replica(replica, project, make_key):
    client = Client()
    with CaptureQueriesContext(connections["default"]) as primary, CaptureQueriesContext(replica) as copy:
        _ingest(client, make_key(project, IngestKey.SCOPE_INGEST))
    assert primary.captured_queries and not copy.captured_queries

    read_key = make_key(project, IngestKey.SCOPE_READ)
    with CaptureQueriesContext(connections["default"]) as primary, CaptureQueriesContext(replica) as copy:
        response = client.get("/api/v1/tasks/t-1", HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert response.status_code == 200, response.content
    assert [s["step_id"] for s in response.json()["steps"]] == ["s0", "s1", "s2", "s3"]
    # The trace came from the replica; the key that was created a moment ago was checked on the
    # primary (a lagging replica must never turn a fresh key away).
    assert '"ingest_step"' in _tables(copy.captured_queries)
    assert '"ingest_task"' in _tables(copy.captured_queries)
    assert '"ingest_ingestkey"' in _tables(primary.captured_queries)
    assert '"ingest_ingestkey"' not in _tables(copy.captured_queries)
    assert '"ingest_step"' not in _tables(primary.captured_queries)


def test_dashboard_pages_read_from_the_replica_and_sessions_from_the_primary(replica, project, make_key,
                                                                              django_user_model):
    client = Client()
    _ingest(client, make_key(project, IngestKey.SCOPE_INGEST))
    user = django_user_model.objects.create_user("ann", password="pw-pw-pw-1")
    project.members.add(user)
    client.force_login(user)
    with CaptureQueriesContext(connections["default"]) as primary, CaptureQueriesContext(replica) as copy:
        response = client.get("/tasks", {"project": project.name})
    assert response.status_code == 200
    assert b"t-1" in response.content
    assert '"ingest_task"' in _tables(copy.captured_queries)
    assert '"django_session"' in _tables(primary.captured_queries)
    assert '"django_session"' not in _tables(copy.captured_queries)


def test_analysis_jobs_and_reads_inside_a_transaction_stay_on_the_primary(replica, project, make_key):
    _ingest(Client(), make_key(project, IngestKey.SCOPE_INGEST))
    task = Task.objects.get(project=project, task_id="t-1")
    with CaptureQueriesContext(replica) as copy:
        pipeline.run(task.pk, force=True)  # what a Celery worker runs: never inside replica_reads()
        with replica_reads(), transaction.atomic():
            assert read_alias() == "default"
            assert Task.objects.filter(project=project).count() == 1
    assert not copy.captured_queries
    with replica_reads():
        assert read_alias() == "replica"
        assert Task.objects.db_manager().filter(project=project).db == "replica"


def _settings_in_subprocess(**env) -> dict:
    code = ("import json; from django.conf import settings; "
            "print(json.dumps({'dbs': {k: [v['HOST'], v['NAME']] for k, v in settings.DATABASES.items()}, "
            "'routers': getattr(settings, 'DATABASE_ROUTERS', []), 'middleware': settings.MIDDLEWARE[-1]}))")
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_REPLICA_URL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**base, "DJANGO_SETTINGS_MODULE": "agentops.settings", "SECRET_KEY": "x",
                              "DATABASE_URL": "postgres://agentops@db-primary:5432/agentops", **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_database_replica_url_adds_the_replica_database_router_and_middleware():
    with_replica = _settings_in_subprocess(DATABASE_REPLICA_URL="postgres://agentops@db-replica:5432/agentops")
    assert with_replica["dbs"] == {"default": ["db-primary", "agentops"], "replica": ["db-replica", "agentops"]}
    assert with_replica["routers"] == ["agentops.db.ReplicaRouter"]
    assert with_replica["middleware"] == "agentops.db.ReplicaReadsMiddleware"
    without = _settings_in_subprocess()
    assert list(without["dbs"]) == ["default"] and without["routers"] == []


# The tables a dashboard read may touch and a replica holds: traces, analysis results, rollups.
REPLICATED = ("ingest_task", "ingest_step", "ingest_resourcesample", "analysis_finding", "analysis_taskanalysis",
              "analysis_baseline", "analysis_task_rollup", "analysis_step_rollup", "analysis_group_rollup")


def test_every_dashboard_page_and_read_api_reads_traces_and_rollups_from_the_replica_only(
        replica, project, make_key, django_user_model):
    """Raw SQL included (rollups, sessions, the task diff, the release comparison, status): one
    page never mixes the replica's snapshot with the primary's."""
    from django.core.management import call_command

    from analysis import rollups

    call_command("simulate", project=project.name, tasks=60, seed=5, since="2d", stdout=io.StringIO(),
                 stderr=io.StringIO())
    call_command("analyze", all=True, project=project.name, stdout=io.StringIO())
    rollups.rollups_refresh()
    task = Task.objects.filter(project=project, ended_at__isnull=False).order_by("-duration_ms").first()
    step = task.steps.order_by("started_at").first()
    other = Task.objects.filter(project=project, name=task.name, ended_at__isnull=False).exclude(pk=task.pk).first()
    releases = sorted(Task.objects.filter(project=project).values_list("release", flat=True).distinct())
    user = django_user_model.objects.create_user("ann", password="pw-pw-pw-1")
    project.members.add(user)
    client = Client()
    client.force_login(user)
    api = {"HTTP_AUTHORIZATION": f"Bearer {make_key(project, IngestKey.SCOPE_READ)}"}
    p = {"project": project.name}
    pages = [("/", p), ("/charts/overview.json", p), ("/charts/overview-cost.json", p), ("/tasks", p),
             ("/tasks.csv", p), ("/findings.csv", p), (f"/tasks/{task.task_id}", p),
             (f"/tasks/{task.task_id}/waterfall.json", p), (f"/tasks/{task.task_id}/steps/{step.step_id}.json", p),
             (f"/tasks/{task.task_id}/compare", {**p, "against": other.task_id}),
             (f"/tasks/{task.task_id}/compare.json", {**p, "against": other.task_id}),
             ("/charts/turn-time.json", p), ("/sessions", p), ("/latency", p), ("/charts/latency.json", p),
             ("/devices", p), ("/charts/devices.json", p), ("/releases", p),
             ("/releases/compare", {**p, "a": releases[0], "b": releases[-1]})]
    reads = [("/api/v1/tasks", {}), (f"/api/v1/tasks/{task.task_id}", {}), (f"/api/v1/tasks/{task.task_id}/diff", {"against": other.task_id}),
             ("/api/v1/sessions", {}), ("/api/v1/findings", {}), ("/api/v1/latency", {}), ("/api/v1/status", {}),
             ("/api/v1/latency", {"group_by": "model"}), ("/api/v1/releases", {}),
             ("/api/v1/releases/compare", {"a": releases[0], "b": releases[-1]})]
    for path, params, headers in [(u, q, {}) for u, q in pages] + [(u, q, api) for u, q in reads]:
        with CaptureQueriesContext(connections["default"]) as primary, CaptureQueriesContext(replica) as copy:
            response = client.get(path, params, **headers)
            if getattr(response, "streaming", False):
                b"".join(response.streaming_content)
        assert response.status_code == 200, (path, response.content[:300])
        on_primary = [t for t in REPLICATED if t in _tables(primary.captured_queries)]
        assert not on_primary, f"{path} read {on_primary} from the primary"
        assert any(t in _tables(copy.captured_queries) for t in REPLICATED), f"{path} read nothing from the replica"


@single_node("the replica is the coordinator's database copied as a template, which on Citus holds the "
             "shard metadata but no shard: a Citus cluster's replica is a replica of every node")
def test_a_replica_that_is_a_second_database_serves_the_pages_and_never_receives_a_write(
        transactional_db, settings, project, make_key, django_user_model):
    """The replica is a real second database here: a copy of the primary taken after t-1 was
    stored, like a streaming replica that has not yet replayed t-2. Pages and the read API show
    what the copy holds; ingest writes only the primary."""
    import psycopg

    client = Client()
    ingest_key = make_key(project, IngestKey.SCOPE_INGEST)
    read_key = make_key(project, IngestKey.SCOPE_READ)
    _ingest(client, ingest_key)
    user = django_user_model.objects.create_user("ann", password="pw-pw-pw-1")
    project.members.add(user)

    primary = {**connections["default"].settings_dict}
    copy_name = f"{primary['NAME']}_replica"
    admin = psycopg.connect(dbname="postgres", host=primary["HOST"], port=primary["PORT"] or None,
                            user=primary["USER"], password=primary["PASSWORD"] or None, autocommit=True)
    connections.close_all()  # a template must have no other sessions
    admin.execute(f'DROP DATABASE IF EXISTS "{copy_name}"')
    admin.execute(f'CREATE DATABASE "{copy_name}" TEMPLATE "{primary["NAME"]}"')
    alias = {**primary, "NAME": copy_name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        settings.DATABASES = {**settings.DATABASES, "replica": alias}
    settings.DATABASE_ROUTERS = ["agentops.db.ReplicaRouter"]
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "agentops.db.ReplicaReadsMiddleware"]
    connections["replica"] = load_backend(alias["ENGINE"]).DatabaseWrapper(alias, "replica")
    try:
        later = [{"type": "task", "task_id": "t-2", "name": "refund", "release": "v1", "started_at": T0.isoformat(),
                  "ended_at": (T0 + timedelta(seconds=1)).isoformat()}]
        response = client.post("/api/v1/ingest", data=json.dumps({"events": later}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {ingest_key}")
        assert response.status_code == 200, response.content
        assert sorted(Task.objects.using("default").values_list("task_id", flat=True)) == ["t-1", "t-2"]
        assert list(Task.objects.using("replica").values_list("task_id", flat=True)) == ["t-1"]

        client = Client()  # a client loads its middleware once: this one has the replica's
        client.force_login(user)
        page = client.get("/tasks", {"project": project.name})
        assert page.status_code == 200
        assert b"t-1" in page.content
        assert b"t-2" not in page.content
        listed = client.get("/api/v1/tasks", HTTP_AUTHORIZATION=f"Bearer {read_key}")
        assert [t["task_id"] for t in listed.json()["results"]] == ["t-1"]
        assert client.get("/api/v1/tasks/t-2", HTTP_AUTHORIZATION=f"Bearer {read_key}").status_code == 404
    finally:
        connections["replica"].close()
        del connections["replica"]
        admin.execute(f'DROP DATABASE IF EXISTS "{copy_name}" WITH (FORCE)')
        admin.close()
