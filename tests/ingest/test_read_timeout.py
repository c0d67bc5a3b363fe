"""Every GET and HEAD runs its statements under AGENTOPS_READ_TIMEOUT_SECONDS (ingest.middleware):
a read that runs past it answers 503 saying what to do, on the read API and on the pages alike,
and the bound does not outlive the request (issue 39, item 1)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from tests.analysis.factories import make_step, make_task
from tests.conftest import subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def steps_locked(*, at_most_seconds: float = 20):
    """Another session holds ingest_step, so that a statement that reads it runs as long as the
    lock is held (at most `at_most_seconds`), the way a costly search does."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with psycopg.connect(subprocess_database_url()) as conn:
            conn.execute("LOCK TABLE ingest_step IN ACCESS EXCLUSIVE MODE")
            held.set()
            release.wait(at_most_seconds)
            conn.rollback()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join()


def statement_timeout() -> str:
    with connection.cursor() as cur:
        cur.execute("SHOW statement_timeout")
        return cur.fetchone()[0]


def test_a_read_past_its_bound_answers_503_saying_so_and_the_bound_ends_with_the_request(
        project, read_key, settings):
    settings.AGENTOPS_READ_TIMEOUT_SECONDS = 1
    task = make_task(project, "t1")
    make_step(task, "s1", tool_name="search")
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {read_key}"}
    user = get_user_model().objects.create_user("reader", password="pw")
    project.members.add(user)
    browser = Client()
    browser.force_login(user)
    default = statement_timeout()

    with steps_locked():
        api = client.get("/api/v1/tasks", {"tool": "search"}, **auth)
        page = browser.get("/tasks", {"tool": "search"})
    for response in (api, page):
        assert response.status_code == 503, response.content
        assert response.json()["error"].startswith("this read took longer than 1 s and was stopped: narrow it")
    assert statement_timeout() == default  # not left on the connection for the next request

    assert [t["task_id"] for t in client.get("/api/v1/tasks", {"tool": "search"}, **auth).json()["results"]] == ["t1"]
    assert browser.get("/tasks", {"tool": "search"}).status_code == 200
