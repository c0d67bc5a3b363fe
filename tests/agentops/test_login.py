"""Login: required everywhere, throttled against guessing."""

import pytest
from django.contrib.auth import get_user_model


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice", password="correct horse")


def test_pages_require_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_login_with_the_right_password(client, user):
    response = client.post("/login/", {"username": "alice", "password": "correct horse"})
    assert response.status_code == 302


def test_repeated_failures_lock_the_account_for_a_while(client, user, settings):
    settings.AGENTOPS_LOGIN_FAILURES = 3
    for _ in range(3):
        assert client.post("/login/", {"username": "alice", "password": "guess"}).status_code == 200
    locked = client.post("/login/", {"username": "alice", "password": "correct horse"})
    assert locked.status_code == 429
    assert "Too many failed attempts" in locked.content.decode()
    assert int(locked["Retry-After"]) > 0


def test_the_admin_login_goes_through_the_same_throttled_form(client):
    response = client.get("/admin/login/?next=/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/admin/"


def test_forms_carry_a_csrf_token(client):
    assert "csrfmiddlewaretoken" in client.get("/login/").content.decode()


@pytest.mark.slow
def test_the_lockout_counts_failures_across_web_workers(stack_env, tmp_path):
    """Two gunicorn workers share one lockout (the cache is the product's Redis): it trips after
    the configured number of wrong passwords in total, whichever worker answers them."""
    import re

    import requests

    from tests.agentops.test_runstack import Stack

    get_user_model().objects.create_user("bob", password="correct horse")
    stack_env["AGENTOPS_LOGIN_FAILURES"] = "4"
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "2", "--worker-concurrency", "1",
               "--no-beat") as stack:
        url = f"{stack.url}/login/"

        def attempt(password: str) -> int:
            # A new connection each time, so either worker may answer.
            page = requests.get(url, headers={"Connection": "close"}, timeout=10)
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            return requests.post(url, data={"username": "bob", "password": password,
                                            "csrfmiddlewaretoken": token},
                                 cookies=page.cookies, headers={"Connection": "close", "Referer": url},
                                 allow_redirects=False, timeout=10).status_code

        assert [attempt("guess") for _ in range(4)] == [200] * 4
        # Locked out everywhere: were the count per worker, one of these would reach a worker
        # that has seen fewer than four failures and answer 200 or let the right password in.
        assert [attempt("correct horse") for _ in range(8)] == [429] * 8
