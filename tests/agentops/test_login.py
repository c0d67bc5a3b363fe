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
