"""Production settings pass Django's deployment checks; production refuses to start without a
SECRET_KEY."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(env_overrides: dict, *args: str) -> subprocess.CompletedProcess:
    # A deployment's environment: none of the test run's own switches (the browser tests set
    # DJANGO_ALLOW_ASYNC_UNSAFE in this process).
    dropped = {"SECRET_KEY", "DEBUG", "AGENTOPS_HTTPS", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update({"DJANGO_SETTINGS_MODULE": "agentops.settings",
                "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
                "CELERY_BROKER_URL": "redis://127.0.0.1:1/0", **env_overrides})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_with_production_settings():
    result = _manage({"SECRET_KEY": "x" * 64 + "production-grade-secret"}, "check", "--deploy",
                     "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_secret_key_fails_loudly():
    result = _manage({}, "check")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr
