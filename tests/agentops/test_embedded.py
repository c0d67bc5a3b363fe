"""The zero-setup default: real Postgres and Redis whose data survive a restart."""

from __future__ import annotations

import socket

import psycopg
import pytest

from agentops import embedded


def _redis(sock: str, *command: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock)
        s.sendall((f"*{len(command)}\r\n" + "".join(f"${len(c)}\r\n{c}\r\n" for c in command)).encode())
        return s.recv(1024)


@pytest.fixture
def data_dir(tmp_path_factory):
    # A short path: Unix socket paths are limited to ~100 bytes.
    path = tmp_path_factory.mktemp("emb")
    yield path
    embedded.stop_redis(path)
    embedded.stop_postgres(path)


def test_postgres_restart_keeps_the_data(data_dir):
    url = embedded.postgres_url(data_dir)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v text)")
        conn.execute("INSERT INTO kept VALUES ('still here')")
    embedded.stop_postgres(data_dir)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    url_again = embedded.postgres_url(data_dir)
    with psycopg.connect(url_again) as conn:
        assert conn.execute("SELECT v FROM kept").fetchone() == ("still here",)


def test_redis_restart_keeps_the_data(data_dir):
    url = embedded.redis_url(data_dir)
    sock = url.removeprefix("redis+socket://")
    assert _redis(sock, "SET", "queue-item", "42").startswith(b"+OK")
    embedded.stop_redis(data_dir)
    for _ in range(100):
        if not embedded._redis_answers(embedded.redis_socket(data_dir)):
            break
        import time
        time.sleep(0.05)
    assert embedded.redis_url(data_dir) == url
    assert _redis(sock, "GET", "queue-item") == b"$2\r\n42\r\n"
