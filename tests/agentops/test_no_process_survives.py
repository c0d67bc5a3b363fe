"""A test run on the embedded default starts a PostgreSQL and a Redis of its own; both stop when
the run ends, pass or fail. (After `make test` a Redis used to survive its deleted clone for
half an hour, deaf to SIGTERM because it could not write its final save.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def processes_using(folder: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if str(folder) in cmdline or cwd.startswith(str(folder)):
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("node, code", [
    ("tests/analysis/test_measures.py", 0),                      # a run that passes
    ("tests/analysis/test_measures.py::no_such_test", 4),        # one that ends in an error
])
def test_the_embedded_services_a_run_starts_stop_with_it(tmp_path, node, code):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_DATA_DIR=str(data), AGENTOPS_TEST_RUN=f"child{os.getpid()}")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    assert (data / "postgres").is_dir() and (data / "redis.log").exists()  # it ran on its own services
    deadline = time.monotonic() + 10
    while processes_using(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_using(data) == []
    shutil.rmtree(data, ignore_errors=True)


@pytest.mark.slow
def test_simulate_over_http_leaves_no_embedded_service_running(live_server, transactional_db, tmp_path):
    from ingest.models import IngestKey, Project, Task
    from ingest.services import key_create

    project = Project.objects.create(name="sim-http")
    _, key = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST])
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="agentops.settings")
    done = subprocess.run([sys.executable, "manage.py", "simulate", "--url", live_server.url, "--key", key,
                           "--tasks", "5", "--seed", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert Task.objects.filter(project=project).count() == 5
    deadline = time.monotonic() + 10
    while processes_using(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_using(data) == []
