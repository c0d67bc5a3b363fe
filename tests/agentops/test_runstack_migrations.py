"""runstack on a database older than its code says so and starts nothing: otherwise every page
answered 500 (a column the code reads did not exist yet) until someone thought of `migrate`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]


def test_runstack_refuses_an_unmigrated_database_and_says_what_to_run(stack_env):
    from django.db import connection

    url, name = stack_env["DATABASE_URL"], connection.settings_dict["NAME"]
    empty = f"{name}_unmigrated"
    admin = url.replace(f"/{name}", "/postgres", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        done = subprocess.run([sys.executable, "manage.py", "runstack", "--port", "1"], cwd=ROOT, timeout=120,
                              env={**stack_env, "DATABASE_URL": url.replace(f"/{name}", f"/{empty}", 1)},
                              capture_output=True, text=True)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{empty}" WITH (FORCE)')
    assert done.returncode == 1
    assert "database migrations not applied" in done.stderr and "python manage.py migrate" in done.stderr
    assert "agentops starting" not in done.stdout
