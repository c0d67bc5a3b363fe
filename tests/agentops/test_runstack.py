"""`manage.py runstack` starts web + worker + beat, serves the API, and stops cleanly on SIGINT."""

from __future__ import annotations

import os
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
from tests.conftest import faults_pass

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


class Stack:
    """`manage.py runstack` on a free port as a test starts it; `code` is its exit status."""

    def __init__(self, env: dict, log_path: Path, *args: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w+")
        self.code: int | None = None
        self.proc = subprocess.Popen([sys.executable, "manage.py", "runstack", "--port", str(self.port), *args],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def __enter__(self) -> Stack:
        try:
            _wait_http(f"{self.url}/login/", self.proc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        """Stop it as Ctrl-C does; killed (and the test failed) if it does not stop in time."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.code = self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            import os
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()


@pytest.mark.slow
@faults_pass
def test_runstack_serves_ingest_and_stops_cleanly(stack_env, tmp_path):
    project = Project.objects.create(name="stack")
    _, ingest = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST, IngestKey.SCOPE_READ])
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "1", "--worker-concurrency", "1") as stack:
        base = stack.url
        headers = {"Authorization": f"Bearer {ingest}"}
        event = {"type": "task", "task_id": "via-stack", "name": "checkout",
                 "started_at": "2026-11-01T10:00:00Z", "ended_at": "2026-11-01T10:00:02Z"}
        r = requests.post(f"{base}/api/v1/ingest", json={"events": [event]}, headers=headers, timeout=10)
        assert r.json() == {"accepted": 1, "rejected": []}
        detail = requests.get(f"{base}/api/v1/tasks/via-stack", headers=headers, timeout=10).json()
        assert (detail["name"], detail["duration_ms"]) == ("checkout", 2000.0)
        assert requests.get(f"{base}/static/js/plotly.min.js", timeout=10).status_code == 200
        # gunicorn's control socket is the stack's own, beside its data (not ~/.gunicorn/).
        assert (tmp_path / "gunicorn.ctl").is_socket()
    output = stack.output()
    code = stack.code
    assert code == 0, output
    for child in ("web", "worker", "worker-periodic", "beat"):
        assert f"started {child}" in output
    assert "runstack: stopped" in output
    assert "did not stop in time" not in output


@pytest.mark.slow
@faults_pass
def test_runstack_on_the_embedded_default_stops_its_services_and_keeps_the_data(tmp_path_factory):
    """No DATABASE_URL, no CELERY_BROKER_URL: what `make demo` runs."""
    import os

    from agentops import embedded

    data = tmp_path_factory.mktemp("stack")  # short: Unix socket paths are limited
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_ALLOW_ASYNC_UNSAFE", "DEBUG"}}
    env.update({"AGENTOPS_DATA_DIR": str(data), "DJANGO_SETTINGS_MODULE": "agentops.settings"})

    def manage(*args):
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)

    assert manage("migrate", "--noinput").returncode == 0
    key = manage("create_project", "embedded").stdout.strip().splitlines()[-1]
    manage("create_key", "embedded", "--scope", "read")
    port = _free_port()
    log = open(data / "runstack.log", "w+")
    proc = subprocess.Popen([sys.executable, "manage.py", "runstack", "--port", str(port),
                             "--web-workers", "1", "--worker-concurrency", "1"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/login/", proc)
        event = {"type": "task", "task_id": "kept", "name": "n", "started_at": "2026-11-01T10:00:00Z",
                 "ended_at": "2026-11-01T10:00:01Z"}
        r = requests.post(f"http://127.0.0.1:{port}/api/v1/ingest", json={"events": [event]},
                          headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert r.json()["accepted"] == 1
        # DEBUG is off unless asked: no debug page, and whitenoise still serves /static/.
        assert requests.get(f"http://127.0.0.1:{port}/static/js/plotly.min.js", timeout=10).status_code == 200
        missing = requests.get(f"http://localhost:{port}/no-such-page", timeout=10)
        assert missing.status_code == 404 and "URLconf" not in missing.text
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    log.seek(0)
    output = log.read()
    assert code == 0, output
    assert "stopped the embedded PostgreSQL" in output and "stopped the embedded Redis" in output
    assert not (data / "postgres" / "postmaster.pid").exists()
    assert not embedded._redis_answers(embedded.redis_socket(data))
    # Started again, the data is still there.
    shell = manage("shell", "-c", "from ingest.models import Task; print(Task.objects.get(task_id='kept').duration_ms)")
    assert shell.stdout.strip().splitlines()[-1] == "1000.0", shell.stderr
    embedded.stop_redis(data)
    embedded.stop_postgres(data)


def test_demo_setup_says_the_port_the_stack_will_serve_on(db, settings, tmp_path):
    from io import StringIO

    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    (tmp_path / "demo-seeded").write_text("ok\n")  # no simulated traffic: only the user and project
    out = StringIO()
    call_command("demo_setup", "--port", "8123", stdout=out)
    assert "Log in at http://127.0.0.1:8123 as demo / demo." in out.getvalue()


@pytest.mark.slow
@faults_pass
def test_the_demo_console_ends_with_the_login_and_key_not_routine_lines(stack_env, tmp_path):
    """Issue #27.10: the console of an idle `make demo` got an analysis.sweep line every 5 s (beat's
    "Sending due task", the worker's "received" and "succeeded"), ~2,500 lines in 25 minutes, and
    the ingest key printed before the stack started scrolled away. Now the stack prints the login
    and the key once the web answers, and routine runs of beat's jobs log at DEBUG."""
    (tmp_path / "demo-ingest-key").write_text("ao_test_key_123\n")
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "1", "--worker-concurrency", "1",
               "--demo") as stack:
        deadline = time.monotonic() + 40
        while "ao_test_key_123" not in stack.output() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(14)  # the sweep runs every 5 s; the rollups and alerts every minute (their first run now)
        output = stack.output()
    banner = output.index(f"Log in at {stack.url} as demo / demo.")
    assert output.index("ao_test_key_123") > banner > output.index("runstack: started beat"), output
    after = output[output.index("ao_test_key_123"):]
    assert "analysis.sweep" not in after and "Sending due task" not in after, after
    routine = [line for line in after.splitlines() if line.strip()]
    assert len(routine) <= 12, routine  # the first minute's one-off lines at most, not 3 per 5 s


def _redis_servers(folder: Path) -> list[int]:
    """The pids of redis-server processes on the embedded Redis's socket of the data folder
    `folder` (Redis names its process after the socket it listens on)."""
    from agentops.embedded import redis_socket

    sock = str(redis_socket(folder)).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"redis-server" in argv[0] and sock in b" ".join(argv):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@faults_pass
def test_a_killed_embedded_redis_comes_back_as_one_server_that_the_lockout_still_counts_on(stack_env, tmp_path):
    """Issue 39, item 6: after the embedded Redis was killed, a restarted child started a Redis of
    its own on the same socket; processes split between the two, the login lockout counted 12 wrong
    passwords as 2, and the orphan outlived the stack. The stack owns its Redis: it starts it again
    itself, the children only ever use it, signing in is refused while it is away, and the
    failures counted before the kill still count after."""
    from django.contrib.auth import get_user_model

    from tests.agentops.test_login import login_attempt

    get_user_model().objects.create_user("bob", password="correct horse")
    del stack_env["CELERY_BROKER_URL"]  # the stack's own embedded Redis, in its own folder
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    stack_env["AGENTOPS_LOGIN_FAILURES"] = "10"
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "2", "--worker-concurrency", "1",
               "--no-beat") as stack:
        url = f"{stack.url}/login/"

        def attempt(password: str) -> int:
            return login_attempt(url, "bob", password)

        assert [attempt("guess") for _ in range(6)] == [200] * 6
        time.sleep(1.5)  # the append-only file is written to disk every second
        [first] = _redis_servers(tmp_path)
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (servers := _redis_servers(tmp_path)) or servers == [first]:
            assert time.monotonic() < deadline, stack.output()
            time.sleep(0.2)
        # Until every process reaches the new server a sign-in is refused (503), never counted
        # apart; the six failures from before the kill still count, so the fourth more locks.
        answers: list[int] = []
        while 429 not in answers:
            assert time.monotonic() < deadline + 60, (answers, stack.output())
            answers.append(attempt("guess"))
            assert answers[-1] in (200, 503, 429), answers
        assert answers.count(200) == 4, answers
        assert attempt("correct horse") == 429
        time.sleep(3)  # a worker that lost its broker connection reconnects, or is restarted
        assert len(_redis_servers(tmp_path)) == 1, stack.output()
    assert stack.code == 0, stack.output()
    assert _redis_servers(tmp_path) == []
