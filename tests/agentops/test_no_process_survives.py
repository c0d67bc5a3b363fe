"""A test run on the embedded default starts a PostgreSQL and a Redis of its own; both stop when
the run ends, pass or fail. (After `make test` a Redis used to survive its deleted clone for
half an hour, deaf to SIGTERM because it could not write its final save.) So do `make bench` and
`make soak` (bench/run.py, bench/soak.py): their web servers, workers, senders and the embedded
services they started, when they end normally and when Ctrl-C or SIGTERM interrupts them. (After
a `make soak` that ended with exit 0, the embedded PostgreSQL and Redis of ./.data ran on.)"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import faults_pass

ROOT = Path(__file__).resolve().parents[2]


def processes_using(folder: Path) -> list[str]:
    """Processes whose command line, working directory or AGENTOPS_DATA_DIR is in `folder`:
    everything a run on that data folder started inherits the variable."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        data_dir = next((v[len(b"AGENTOPS_DATA_DIR="):].decode(errors="replace") for v in environ
                         if v.startswith(b"AGENTOPS_DATA_DIR=")), "")
        if str(folder) in cmdline or cwd.startswith(str(folder)) or data_dir.startswith(str(folder)):
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def none_left(folder: Path, seconds: float = 10) -> list[str]:
    deadline = time.monotonic() + seconds
    while processes_using(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_using(folder)


def embedded_env(data: Path, **extra: str) -> dict[str, str]:
    """The environment of `make bench` on a fresh checkout: no server URLs, its own data folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(AGENTOPS_DATA_DIR=str(data), **extra)
    return env


@pytest.mark.slow
@faults_pass
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
    assert none_left(data) == []
    shutil.rmtree(data, ignore_errors=True)


@faults_pass
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
                          # The simulator sends its devices' telemetry whatever --tasks says: ~1M
                          # events, at ~2,800 a second over HTTP on this machine (7 December).
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert Task.objects.filter(project=project).count() == 5
    assert none_left(data) == []


# --- make bench and make soak ------------------------------------------------------------------
# The smallest real runs: the analysis section on 50 simulated tasks; the ingest section on one
# batch of 512 spans; a soak of seconds. Each on a data folder of its own, as on a fresh checkout.


@pytest.fixture
def data(tmp_path):
    """The run's data folder; whatever a failing run left in it is stopped after the test."""
    folder = tmp_path / "data"
    yield folder
    from agentops import embedded

    for line in processes_using(folder):
        if "postgres" not in line and "redis" not in line:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
    embedded.stop_redis(folder)
    embedded.stop_postgres(folder)


def tiny_soak(out: Path, *, duration: int = 4) -> list[str]:
    return [sys.executable, "bench/soak.py", "--rate", "160", "--duration", str(duration), "--batch", "64",
            "--senders", "1", "--web-workers", "1", "--worker-concurrency", "1", "--burst", "64",
            "--ingest-spans", "0", "--search-steps", "1", "--search-seconds", "3", "--drain-timeout", "60",
            "--out", str(out)]


def start(args: list[str], data: Path, log: Path, **env: str) -> subprocess.Popen:
    """`args` as a terminal runs it: a process group of its own, the output in `log`, and Ctrl-C
    heard (a suite started in the background, `make faults &`, hands its children SIGINT ignored,
    and Python then never raises KeyboardInterrupt: the Ctrl-C tests would test nothing)."""
    with open(log, "w") as fh:
        return subprocess.Popen(args, cwd=ROOT, env=embedded_env(data, **env), stdout=fh, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_process(folder: Path, proc: subprocess.Popen, *words: str, timeout: float = 120) -> None:
    """Until a process using `folder` has every word in its command line (the run still going)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended ({proc.returncode}) before {words} started"
        if any(all(w in line for w in words) for line in processes_using(folder)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no process {words} within {timeout} s: {processes_using(folder)}")


def interrupt(proc: subprocess.Popen, how: str, *, timeout: float = 150) -> int:
    if how == "ctrl-c":  # a terminal's Ctrl-C: SIGINT to the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    else:  # `timeout`, CI, systemd: SIGTERM to the process it started, and to it alone
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


@faults_pass
@pytest.mark.slow
def test_a_bench_run_stops_the_embedded_services_it_started(data, tmp_path):
    out = tmp_path / "latest.json"
    done = subprocess.run([sys.executable, "bench/run.py", "--only", "analysis", "--analysis-steps", "11",
                           "--out", str(out)], cwd=ROOT, env=embedded_env(data), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads(out.read_text())["analysis"]["tasks"] == 50
    assert (data / "postgres").is_dir() and (data / "redis.log").exists()  # it ran on its own services
    assert none_left(data) == []


@faults_pass
@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_bench_run_stops_its_web_server_and_services(data, tmp_path, how):
    log, out = tmp_path / "bench.log", tmp_path / "latest.json"
    proc = start([sys.executable, "bench/run.py", "--only", "ingest", "--skip-peer", "--spans", "512",
                  "--senders", "1", "--web-workers", "1", "--out", str(out)], data, log)
    wait_for_process(data, proc, "gunicorn")  # mid-section: the OTLP section's web server is up
    code = interrupt(proc, how)
    assert code == 130 and "bench: interrupted" in log.read_text(), log.read_text()[-3000:]
    assert not out.exists()
    assert none_left(data) == []


@faults_pass
@pytest.mark.slow
def test_a_soak_stops_its_stack_senders_and_services(data, tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run(tiny_soak(out), cwd=ROOT, env=embedded_env(data, AGENTOPS_ANALYSIS_QUIET_SECONDS="1"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_id = json.loads(out.read_text())["by_id"]
    assert by_id["acknowledged"] > 0 and by_id["lost"] == 0
    assert none_left(data) == []


@faults_pass
@pytest.mark.slow
def test_an_interrupted_soak_stops_its_stack_senders_and_services(data, tmp_path):
    log, out = tmp_path / "soak.log", tmp_path / "soak.json"
    proc = start(tiny_soak(out, duration=60), data, log, AGENTOPS_ANALYSIS_QUIET_SECONDS="1")
    wait_for_process(data, proc, "spawn_main")  # a sender: the stack is up, the load starts
    code = interrupt(proc, "ctrl-c")
    assert code == 130 and "soak: interrupted" in log.read_text(), log.read_text()[-3000:]
    assert not out.exists()
    assert none_left(data) == []


# --- make demo's setup ------------------------------------------------------------------------


@faults_pass
@pytest.mark.slow
def test_demo_setup_stops_the_services_it_started(data):
    data.mkdir()
    (data / "demo-seeded").write_text("ok\n")  # seeded before: the user, the project, the key
    done = subprocess.run([sys.executable, "manage.py", "demo_setup"], cwd=ROOT,
                          env=embedded_env(data, DJANGO_SETTINGS_MODULE="agentops.settings"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Log in at http://127.0.0.1:8000 as demo / demo." in done.stdout
    assert (data / "demo-ingest-key").exists()
    assert none_left(data) == []


@faults_pass
@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_demo_setup_interrupted_while_seeding_stops_the_services_it_started(data, tmp_path, how):
    log = tmp_path / "demo_setup.log"
    proc = start([sys.executable, "manage.py", "demo_setup"], data, log, PYTHONUNBUFFERED="1",
                 DJANGO_SETTINGS_MODULE="agentops.settings")
    deadline = time.monotonic() + 120
    while "Seeding the demo project" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    code = interrupt(proc, how, timeout=60)
    assert code != 0 and not (data / "demo-seeded").exists(), log.read_text()[-3000:]
    assert none_left(data) == []
