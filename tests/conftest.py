"""Shared fixtures: a real Postgres (the embedded one, or DATABASE_URL), projects `project` and
`other_project` with keys, and clients that speak HTTP to the API."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.db import connection
from hypothesis import settings as hypothesis_settings

from ingest.models import IngestKey, Project
from ingest.services import key_create

# Property tests draw the same examples every run (reproducible CI); AGENTOPS_FUZZ_RANDOM=1
# explores new ones.
hypothesis_settings.register_profile("reproducible", derandomize=True, deadline=None, database=None)
hypothesis_settings.register_profile("explore", deadline=None)
hypothesis_settings.load_profile("explore" if os.environ.get("AGENTOPS_FUZZ_RANDOM") == "1" else "reproducible")

# The pass CI makes after the suite, `make faults`: fault injection (services stopped under a running
# stack), and whole commands (bench, soak, demo_setup, simulate over HTTP) checked for what they
# leave behind. Minutes of processes starting and stopping that `make test` is spared.
faults_pass = pytest.mark.skipif(os.environ.get("AGENTOPS_FAULTS") != "1",
                                 reason="runs under `make faults` (AGENTOPS_FAULTS=1)")


def _citus_workers() -> list[tuple[str, int]]:
    """The workers of the Citus cluster DATABASE_URL's database belongs to (`make test-citus`);
    empty on a single PostgreSQL. Read before pytest-django renames the database to the test one."""
    import psycopg

    from agentops import citus

    db = settings.DATABASES["default"]
    with psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
                         host=db["HOST"] or None, port=db["PORT"] or None, autocommit=True) as conn:
        return citus.workers_of(conn)


CITUS_WORKERS = _citus_workers()
ON_CITUS = bool(CITUS_WORKERS)


def single_node(why: str):
    """Marks a test that needs one PostgreSQL, saying why; `make test-citus` skips it."""
    return pytest.mark.skipif(ON_CITUS, reason=f"needs a single PostgreSQL: {why}")


# The same mark for tests in files this branch of the suite does not edit (tests/analysis/ belongs
# to the detector work): node id -> why.
_PLANNER = ("SET LOCAL enable_seqscan = off reaches no Citus worker, and the plan shown is the "
            "coordinator's Custom Scan over a worker's shard names")
SINGLE_NODE = {
    "tests/analysis/test_search.py::test_the_search_indexes_can_be_used": f"it reads the planner's choice of index: {_PLANNER}",
    "tests/analysis/test_search.py::test_the_tool_search_reads_an_index": f"it reads the planner's choice of index: {_PLANNER}",
}


def pytest_collection_modifyitems(config, items):
    if not ON_CITUS:
        return
    for item in items:
        if why := SINGLE_NODE.get(item.nodeid):
            item.add_marker(pytest.mark.skip(reason=f"needs a single PostgreSQL: {why}"))


def _join_citus_cluster(sender, using="default", **kwargs):
    """Before the test database is migrated: make it a database of the same Citus cluster (the
    extension on every node, the workers registered), so the migrations distribute its tables."""
    from django.db import connections

    from agentops import citus

    conn = connections[using]
    name = conn.settings_dict["NAME"]
    if name in _joined:
        return
    _joined.add(name)
    citus.join_database((conn.settings_dict["HOST"], int(conn.settings_dict["PORT"])), CITUS_WORKERS, name)


_joined: set[str] = set()
if ON_CITUS:
    from django.db.models.signals import pre_migrate

    pre_migrate.connect(_join_citus_cluster, dispatch_uid="agentops-citus-test-database")


def pytest_unconfigure(config):
    """The embedded PostgreSQL and Redis this run started stop with it (a running `make demo`
    on the same folder keeps its own): nothing the suite started outlives it. On Citus the test
    database goes from every node: Django's own drop finds the coordinator's copy still open by
    Citus's maintenance daemon, and knows nothing of the workers' copies."""
    from django.db import connections

    from agentops import citus, embedded

    connections.close_all()
    for name in _joined:
        db = settings.DATABASES["default"]
        citus.drop_database([(db["HOST"], int(db["PORT"]))] + CITUS_WORKERS, name)
    embedded.stop_started(settings.DATA_DIR)


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    # One test database per run, so concurrent runs on one server never collide.
    suffix = os.environ["AGENTOPS_TEST_RUN"]
    for db in settings.DATABASES.values():
        db.setdefault("TEST", {})["NAME"] = f"test_agentops_{suffix}"


@pytest.fixture(autouse=True)
def _ingest_caches():
    # Partitions and releases created inside a rolled-back test transaction vanish; so must the
    # per-process caches that remember them (and Django's cache: cached release comparisons).
    from django.core.cache import cache

    from ingest import partitions, services

    partitions.forget_cache()
    services._seen.clear()
    clear_cache(cache)
    yield
    partitions.forget_cache()
    services._seen.clear()
    clear_cache(cache)


def clear_cache(cache) -> None:
    """Forget this run's cache keys only: the Redis database is shared with other runs."""
    prefix = settings.CACHES["default"].get("KEY_PREFIX")
    client = getattr(getattr(cache, "_cache", None), "get_client", None)
    if not prefix or client is None:
        cache.clear()
        return
    try:
        redis = client(write=True)
        keys = list(redis.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            redis.delete(*keys)
    except cache._redis_errors:  # Redis stopped by a fault test: the memory fallback is ours alone
        pass
    cache._fallback.clear()


@pytest.fixture(autouse=True)
def _rollups_left_behind(request, django_db_blocker):
    """The rollup tables and the refresh's watermark are plain SQL tables (no model), so the
    flush after a transactional test (live server, subprocess workers, the parallel rebuild)
    leaves their committed rows behind: the tests after it would read another test's rollups, or
    take a refresh for an incremental one. Empty them after every such test."""
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = (marker is not None and marker.kwargs.get("transaction")) or not {
        "transactional_db", "live_server", "stack_env"}.isdisjoint(request.fixturenames)
    if not transactional:
        return
    from analysis.rollups import TABLES

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE analysis_rollup_state, " + ", ".join(TABLES))


@pytest.fixture(autouse=True)
def _export_slots():
    # A streamed export the test client was never made to read to the end is never closed (gunicorn
    # closes every response): the slot it took must not be missing for the tests after it.
    yield
    from analysis.dashboard import export_slots

    export_slots._in_use = 0


@pytest.fixture(autouse=True)
def _broker_pause():
    # A test that fakes a broker outage must not pause enqueueing for the tests after it.
    from analysis.engine import signals

    signals._paused_until = 0.0
    yield
    signals._paused_until = 0.0


@pytest.fixture
def project(db) -> Project:
    return Project.objects.create(name="acme")


@pytest.fixture
def other_project(db) -> Project:
    return Project.objects.create(name="globex")


def _key(project: Project, *scopes: str) -> str:
    return key_create(project=project, scopes=list(scopes))[1]


@pytest.fixture
def ingest_key(project) -> str:
    return _key(project, IngestKey.SCOPE_INGEST)


@pytest.fixture
def read_key(project) -> str:
    return _key(project, IngestKey.SCOPE_READ)


@pytest.fixture
def other_keys(other_project) -> dict[str, str]:
    return {"ingest": _key(other_project, IngestKey.SCOPE_INGEST),
            "read": _key(other_project, IngestKey.SCOPE_READ)}


@pytest.fixture
def make_key():
    return _key


def subprocess_database_url() -> str:
    """A URL to this run's test database, for subprocesses (runstack, workers)."""
    db = settings.DATABASES["default"]
    host = db["HOST"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    if host.startswith("/"):
        return f"postgresql://{auth}@/{connection.settings_dict['NAME']}?host={host}"
    return f"postgresql://{auth}@{host}:{db['PORT'] or 5432}/{connection.settings_dict['NAME']}"


@contextmanager
def bench_scratch(prefix: str):
    """The environment of a bench run in a subprocess: this run's database server, scratch
    databases named with `prefix` (a real bench's kept dataset is never touched), dropped after."""
    import psycopg

    env = {**os.environ, "DATABASE_URL": subprocess_database_url(), "AGENTOPS_BENCH_DB_PREFIX": prefix,
           "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "AGENTOPS_DATA_DIR": str(settings.DATA_DIR)}
    yield env
    admin = subprocess_database_url().rsplit("/", 1)
    admin = admin[0] + "/postgres" + (("?" + admin[1].split("?", 1)[1]) if "?" in admin[1] else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                            [prefix + "%"]).fetchall()]
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def stack_env(transactional_db) -> dict[str, str]:
    """Environment for a subprocess of the product that must see this test's database."""
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": subprocess_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "SECRET_KEY": "test-secret-key",
        "DEBUG": "1",
        "AGENTOPS_DATA_DIR": str(settings.DATA_DIR),
    })
    return env
