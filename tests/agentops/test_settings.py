"""The settings the environment gives: DEBUG is off unless DEBUG=1 asks, in the embedded
default (`make demo`, `runstack`) too, so an error never renders Django's debug page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# agentops.settings as a fresh process loads it, the embedded services stubbed out (settings ask
# them for their URLs; nothing here connects): DEBUG, ALLOWED_HOSTS, HTTPS, and what a request
# for a static file and an unknown page answer.
PROBE = """
import json
from agentops import embedded
embedded.postgres_url = lambda data_dir: "postgresql://nobody@127.0.0.1:1/none"
embedded.redis_url = lambda data_dir: "redis://127.0.0.1:1/0"
import django
django.setup()
from django.conf import settings
from django.test import Client
client = Client(raise_request_exception=False)
static = client.get("/static/css/app.css", HTTP_HOST="127.0.0.1")
missing = client.get("/no-such-page", HTTP_HOST="localhost")
print(json.dumps({"debug": settings.DEBUG, "embedded": settings.EMBEDDED_DATABASE,
                  "allowed_hosts": settings.ALLOWED_HOSTS, "https": settings.HTTPS,
                  "static": static.status_code, "missing": missing.status_code,
                  "debug_page": b"URLconf" in missing.content}))
"""


def _settings(**env_overrides: str) -> dict:
    dropped = {"DEBUG", "DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "ALLOWED_HOSTS",
               "AGENTOPS_HTTPS", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update({"DJANGO_SETTINGS_MODULE": "agentops.settings", **env_overrides})
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_embedded_default_has_debug_off_and_still_serves_static_files():
    seen = _settings()
    assert seen["embedded"] is True and seen["debug"] is False
    assert {"127.0.0.1", "localhost"} <= set(seen["allowed_hosts"])
    assert seen["https"] is False  # the embedded default stays plain HTTP on 127.0.0.1
    assert seen["static"] == 200  # whitenoise, not DEBUG, serves /static/
    assert seen["missing"] == 404 and seen["debug_page"] is False


@pytest.mark.parametrize(("value", "debug"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_debug_is_on_only_when_asked(value, debug):
    seen = _settings(DEBUG=value)
    assert seen["debug"] is debug
    assert seen["static"] == 200 and seen["https"] is False
    assert seen["debug_page"] is debug


def test_importing_the_package_does_not_load_the_settings():
    """bench/run.py and runstack import `agentops.embedded` to start the embedded services before
    they set the environment the settings read; an import that loaded the settings then (with a
    server DATABASE_URL and no SECRET_KEY yet) stopped `make bench` before it began."""
    probe = ("import agentops.embedded, agentops.celery\n"
             "from django.conf import settings\n"
             "print(settings.configured)")
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    env.update({"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "DJANGO_SETTINGS_MODULE": "agentops.settings"})
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.django_db
def test_the_products_connections_run_without_jit_unless_the_url_asks():
    # On a PostgreSQL built with LLVM a dashboard statement whose estimate passed jit_above_cost was
    # compiled for ~650 ms (the overview's critical path, 43 → 720 ms): the product's sessions say no.
    from django.db import connection

    from agentops.settings import database_from_url

    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
    asked = database_from_url("postgres://u@db:5432/agentops?options=-c%20jit%3Don&sslmode=require")
    assert asked["OPTIONS"] == {"options": "-c jit=on", "sslmode": "require"}
