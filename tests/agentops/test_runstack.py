"""`manage.py runstack` starts web + worker + beat, serves the API, and stops cleanly on SIGINT."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from ingest.models import IngestKey, Project
from ingest.services import key_create

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"runstack exited early with {proc.returncode}")
        try:
            requests.get(url, timeout=5)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout}s")


@pytest.mark.slow
def test_runstack_serves_ingest_and_stops_cleanly(stack_env, tmp_path):
    project = Project.objects.create(name="stack")
    _, ingest = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST, IngestKey.SCOPE_READ])
    port = _free_port()
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    log = open(tmp_path / "runstack.log", "w+")
    proc = subprocess.Popen([sys.executable, "manage.py", "runstack", "--port", str(port),
                             "--web-workers", "1", "--worker-concurrency", "1"],
                            cwd=ROOT, env=stack_env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/login/", proc)
        headers = {"Authorization": f"Bearer {ingest}"}
        event = {"type": "task", "task_id": "via-stack", "name": "checkout",
                 "started_at": "2026-11-01T10:00:00Z", "ended_at": "2026-11-01T10:00:02Z"}
        r = requests.post(f"{base}/api/v1/ingest", json={"events": [event]}, headers=headers, timeout=10)
        assert r.json() == {"accepted": 1, "rejected": []}
        detail = requests.get(f"{base}/api/v1/tasks/via-stack", headers=headers, timeout=10).json()
        assert (detail["name"], detail["duration_ms"]) == ("checkout", 2000.0)
        assert requests.get(f"{base}/static/js/plotly.min.js", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            import os
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    log.seek(0)
    output = log.read()
    assert code == 0, output
    for child in ("web", "worker", "worker-periodic", "beat"):
        assert f"started {child}" in output
    assert "runstack: stopped" in output
    assert "did not stop in time" not in output
