"""Fixtures of the fault tests: a throwaway stack (embedded PostgreSQL and Redis of its own in a
/tmp folder, migrated, with a project key, behind gunicorn). Everything started is stopped."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from agentops import embedded
from tests.reliability.harness import Server, project_key, stack_environment, throwaway_database


@pytest.fixture
def data_dir():
    # Not under pytest's tmp root: another pytest run may make that 0700 at any moment, and the
    # embedded PostgreSQL runs as its own user when we are root. Short, for socket paths.
    path = Path(tempfile.mkdtemp(prefix="ao-fault-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    embedded.stop_redis(path)
    embedded.stop_postgres(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stack(data_dir):
    database_url = throwaway_database(data_dir)
    env = stack_environment(data_dir, database_url=database_url, broker_url=embedded.redis_url(data_dir))
    key = project_key(env)
    server = Server(env).start()
    yield {"dir": data_dir, "db": database_url, "env": env, "key": key, "server": server}
    server.stop()
