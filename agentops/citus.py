"""A local Citus cluster for development and `make test-citus`: a coordinator and two workers,
ordinary PostgreSQL 15 servers with `shared_preload_libraries = 'citus'`, on loopback ports, with
their data under AGENTOPS_DATA_DIR/citus/ (docs/scaling.md, step 6).

    python -m agentops.citus start    # install Citus if missing, start, register, migrate
    python -m agentops.citus url      # the coordinator's DATABASE_URL
    python -m agentops.citus stop

Nothing here is needed by `make demo` or `make test`; a deployment points DATABASE_URL at its own
Citus coordinator instead. `join_database` makes another database of the same coordinator (the
suite's test database) a member of the same cluster. The start and stop of a server reuse the
embedded Postgres's helpers (agentops.embedded): one way to stop a postmaster.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

from agentops import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
INSTALLER = BASE_DIR.parent / "shared" / "citus" / "install.sh"
PG_CONFIG = Path(os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config"))
NODES = ("coordinator", "worker-1", "worker-2")
DATABASE_NAME = embedded.DATABASE_NAME
# 4 shards per distributed table (2 per worker) instead of Citus's 32: every weekly partition is
# a table per shard, and the suite creates partitions by the hundred. Routing is the same.
SHARD_COUNT = 4
# Postgres refuses to run as root; as root the servers run as pgserver's own user.
SYSTEM_USER = "pgserver"
HOST = "127.0.0.1"


class CitusUnavailable(RuntimeError):
    """Citus cannot be installed or started here; the message says why and what to do instead."""


def cluster_dir(data_dir: Path) -> Path:
    return data_dir / "citus"


def _bindir() -> Path:
    return Path(subprocess.run([str(PG_CONFIG), "--bindir"], check=True, capture_output=True,
                               text=True).stdout.strip())


def installed() -> bool:
    if not PG_CONFIG.exists():
        return False
    libdir = subprocess.run([str(PG_CONFIG), "--pkglibdir"], check=True, capture_output=True,
                            text=True).stdout.strip()
    return (Path(libdir) / "citus.so").exists()


_ELSEWHERE = ("To use an existing Citus cluster instead, point DATABASE_URL at its coordinator "
              "(a database with `CREATE EXTENSION citus` and its workers added with citus_add_node) "
              "and run `python manage.py migrate`: the migrations distribute the tables there.")


def ensure_installed() -> None:
    """Build Citus into the machine's PostgreSQL 15 with ../shared/citus/install.sh when missing."""
    if installed():
        return
    if not PG_CONFIG.exists():
        raise CitusUnavailable(f"no PostgreSQL 15 here ({PG_CONFIG} is missing; set PG_CONFIG). "
                               + _ELSEWHERE)
    if not INSTALLER.exists():
        raise CitusUnavailable(f"Citus is not installed in {PG_CONFIG.parent.parent} and there is "
                               f"no {INSTALLER} to build it from. " + _ELSEWHERE)
    if os.geteuid() != 0:
        raise CitusUnavailable(f"Citus is not installed; {INSTALLER} needs root (apt-get, make "
                               f"install): run `sudo {INSTALLER}` once, then `make citus`. " + _ELSEWHERE)
    print(f"citus: building from {INSTALLER} (1.5-4 minutes)", flush=True)
    subprocess.run(["bash", str(INSTALLER)], check=True)


def _run_as(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    user = SYSTEM_USER if os.geteuid() == 0 else None
    return subprocess.run(cmd, check=True, user=user, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port(pgdata: Path) -> int | None:
    """The node's port: the last `port` line, as Postgres reads the file."""
    conf = pgdata / "postgresql.auto.conf"
    found = None
    for line in conf.read_text().splitlines() if conf.exists() else []:
        if line.startswith("port = "):
            found = int(line.split("=", 1)[1].strip().strip("'"))
    return found


def _port_free(port: int) -> bool:
    """Whether a server could listen on `port`. With SO_REUSEADDR, as Postgres binds: right after
    a node stops, its port's closed connections (TIME_WAIT) must not count as in use, or a restart
    would move the worker to another port while the cluster's metadata (pg_dist_node) keeps the
    old one."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _running(pgdata: Path) -> bool:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def _initdb(pgdata: Path, *, coordinator: bool) -> None:
    pgdata.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")  # as in embedded.py
        from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

        ensure_user_exists(SYSTEM_USER)
        ensure_prefix_permissions(pgdata)
        entry = pwd.getpwnam(SYSTEM_USER)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    pgdata.chmod(0o700)
    _run_as([str(_bindir() / "initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=trust",
             "--encoding=utf8", "--no-sync"], stdout=subprocess.DEVNULL)
    settings = {
        "shared_preload_libraries": "'citus'",
        "listen_addresses": f"'{HOST}'",
        "unix_socket_directories": "''",
        # A development cluster on one machine: losing the last commits of a crash is acceptable,
        # a slow suite is not (no corruption: only commit acknowledgements are early).
        "synchronous_commit": "off",
        "max_connections": "200",
        "max_prepared_transactions": "200",
        "wal_level": "logical",
        # Loopback between nodes: no TLS (libpq in the server would look for client certificates
        # in the home of the user who started it).
        "citus.node_conninfo": "'sslmode=disable'",
    }
    if coordinator:
        settings["citus.shard_count"] = str(SHARD_COUNT)
    with open(pgdata / "postgresql.conf", "a") as conf:
        conf.write("\n# agentops citus cluster\n")
        conf.writelines(f"{k} = {v}\n" for k, v in settings.items())


def _start_node(pgdata: Path) -> int:
    port = _port(pgdata)
    if _running(pgdata):
        assert port is not None
        return port
    if port is None or not _port_free(port):
        port = _free_port()
        with open(pgdata / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {port}\n")
    _run_as([str(_bindir() / "pg_ctl"), "-D", str(pgdata), "-l", str(pgdata / "server.log"),
             "-w", "-t", "60", "start"], stdout=subprocess.DEVNULL)
    return port


def ports(data_dir: Path) -> dict[str, int]:
    """The port of each running node (a node that is not running is missing)."""
    root = cluster_dir(data_dir)
    return {node: _port(root / node) for node in NODES
            if _running(root / node) and _port(root / node) is not None}


def url(data_dir: Path, database: str = DATABASE_NAME) -> str:
    found = ports(data_dir)
    if "coordinator" not in found:
        raise CitusUnavailable(f"no Citus coordinator running under {cluster_dir(data_dir)}: "
                               "run `make citus` first")
    return f"postgres://postgres@{HOST}:{found['coordinator']}/{database}"


def _connect(port: int, database: str):
    import psycopg

    return psycopg.connect(host=HOST, port=port, user="postgres", dbname=database, autocommit=True)


def _ensure_database(port: int, database: str) -> None:
    with _connect(port, "postgres") as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')
        # No JIT for the database's sessions, the workers' too (Citus opens its own connections
        # to them, which no coordinator session setting reaches): the dashboard's statements run
        # in milliseconds, and a plan whose estimate passes jit_above_cost was compiled for
        # ~650 ms on a worker (the critical path 43 ms → 720 ms; docs/scaling.md, step 6).
        conn.execute(f'ALTER DATABASE "{database}" SET jit = off')
    with _connect(port, database) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS citus")


def join_database(coordinator, workers: list[tuple[str, int]], database: str) -> None:
    """Make `database` (which exists on the coordinator `coordinator`, host and port) a member of
    the cluster of these workers: the database and the extension on every node, the coordinator
    in its own metadata (local tables may then reference the reference tables), the workers added.
    Idempotent."""
    host, port = coordinator
    for worker_host, worker_port in workers:
        if worker_host != HOST:
            raise CitusUnavailable(f"worker {worker_host}:{worker_port} is not on this machine: "
                                   "create the database and the extension on it yourself")
        _ensure_database(worker_port, database)
    _ensure_database(port, database)
    with _connect(port, database) as conn:
        conn.execute("SELECT citus_set_coordinator_host(%s, %s)", [host, port])
        known = {(h, p) for h, p in conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary'")}
        for worker in workers:
            if worker not in known:
                conn.execute("SELECT citus_add_node(%s, %s)", list(worker))


def drop_database(workers: list[tuple[str, int]], database: str, *, attempts: int = 20) -> None:
    """Drop a database (the suite's test database) from these nodes, whoever is connected to it.
    FORCE ends the sessions of clients, not Citus's maintenance daemon, a background worker that
    connects to each Citus database now and then: while it is in, the drop is retried."""
    import psycopg

    for _host, port in workers:
        with _connect(port, "postgres") as conn:
            for attempt in range(attempts):
                try:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == attempts - 1:
                        raise
                    time.sleep(0.25)


def workers_of(conn) -> list[tuple[str, int]]:
    """The workers registered in the database `conn` is connected to (a psycopg or DB-API cursor
    owner), empty when it is not a Citus coordinator."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        if cursor.fetchone() is None:
            return []
        cursor.execute("SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' "
                       "AND groupid <> 0 ORDER BY nodeport")
        return [(h, p) for h, p in cursor.fetchall()]


def start(data_dir: Path, *, migrate: bool = True) -> str:
    """Install if needed, start the three nodes, register the workers, migrate: the coordinator's URL."""
    ensure_installed()
    root = cluster_dir(data_dir)
    with embedded._file_lock(root / ".lock"):
        found = {}
        for node in NODES:
            pgdata = root / node
            if not (pgdata / "PG_VERSION").exists():
                if pgdata.exists():
                    shutil.rmtree(pgdata)  # an initdb that did not finish
                _initdb(pgdata, coordinator=node == "coordinator")
            found[node] = _start_node(pgdata)
        join_database((HOST, found["coordinator"]), [(HOST, found[w]) for w in NODES[1:]],
                      DATABASE_NAME)
    database_url = url(data_dir)
    if migrate:
        # migrate sends nothing to a broker: no embedded Redis is left running behind it.
        env = {"CELERY_BROKER_URL": "memory://", **os.environ, "DATABASE_URL": database_url, "DEBUG": "1"}
        subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), "migrate", "-v0"],
                       check=True, env=env, cwd=BASE_DIR)
    return database_url


def stop(data_dir: Path) -> list[str]:
    """Fast shutdown of every node running under data_dir/citus: the nodes stopped."""
    root = cluster_dir(data_dir)
    stopped = []
    for node in reversed(NODES):
        if _running(root / node):
            embedded.stop_postmaster(root / node)
            stopped.append(node)
    return stopped


def _data_dir() -> Path:
    return Path(os.environ.get("AGENTOPS_DATA_DIR", str(BASE_DIR / ".data"))).resolve()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    data_dir = _data_dir()
    try:
        if command == "start":
            database_url = start(data_dir)
            print(f"citus: coordinator and 2 workers under {cluster_dir(data_dir)}, migrated\n"
                  f"DATABASE_URL={database_url}")
        elif command == "url":
            print(url(data_dir))
        elif command == "stop":
            stopped = stop(data_dir)
            print(f"citus: stopped {', '.join(stopped)}" if stopped else "citus: nothing running")
        else:
            print(f"usage: python -m agentops.citus start|url|stop (got {command!r})", file=sys.stderr)
            return 2
    except CitusUnavailable as exc:
        print(f"citus: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
