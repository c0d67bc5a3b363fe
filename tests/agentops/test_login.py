"""Login: required everywhere, throttled against guessing."""
import pytest
from django.contrib.auth import get_user_model

from agentops.cache import caches_setting
from tests.conftest import faults_pass


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


def test_signing_in_is_refused_while_the_shared_counter_cannot_be_reached(client, user, settings, tmp_path):
    """The lockout fails closed (issue 39, item 6): counted in each web process's memory while
    Redis is away, each process would allow its own ten guesses."""
    settings.CACHES = caches_setting(f"redis+socket://{tmp_path / 'no-redis.sock'}")
    refused = client.post("/login/", {"username": "alice", "password": "correct horse"})
    assert refused.status_code == 503 and int(refused["Retry-After"]) > 0
    assert "Signing in is paused" in refused.content.decode() and "_auth_user_id" not in client.session


@pytest.mark.parametrize("spelling", ["\uff42ob",  # fullwidth b: NFKC makes it "bob"
                                      "\uff42\uff4f\uff42",  # all fullwidth
                                      "\u1d47ob",  # modifier letter small b
                                      " bob ", "BOB"])
def test_a_look_alike_username_is_locked_out_with_the_account(client, db, settings, spelling):
    """Django's login normalises the name (NFKC) before looking the user up, so `ｂob` is bob:
    once bob is locked out, no spelling of bob may get in with the right password."""
    get_user_model().objects.create_user("bob", password="correct horse")
    settings.AGENTOPS_LOGIN_FAILURES = 3
    for _ in range(3):
        assert client.post("/login/", {"username": "bob", "password": "guess"}).status_code == 200
    assert client.post("/login/", {"username": spelling, "password": "correct horse"}).status_code == 429


def test_failures_under_look_alike_spellings_count_together(client, db, settings):
    get_user_model().objects.create_user("bob", password="correct horse")
    settings.AGENTOPS_LOGIN_FAILURES = 3
    for spelling in ("bob", "\uff42ob", "BOB"):
        assert client.post("/login/", {"username": spelling, "password": "guess"}).status_code == 200
    assert client.post("/login/", {"username": "bob", "password": "correct horse"}).status_code == 429


def test_the_username_lockout_holds_whatever_the_client_address(client, user, settings):
    """Guesses for one account spread over many addresses still lock it."""
    settings.AGENTOPS_LOGIN_FAILURES = 3
    for n in range(3):
        response = client.post("/login/", {"username": "alice", "password": "guess"}, REMOTE_ADDR=f"192.0.2.{n + 1}")
        assert response.status_code == 200
    locked = client.post("/login/", {"username": "alice", "password": "correct horse"}, REMOTE_ADDR="192.0.2.99")
    assert locked.status_code == 429


def test_one_client_trying_many_usernames_is_locked_out(client, user, settings):
    settings.AGENTOPS_LOGIN_FAILURES = 10
    settings.AGENTOPS_LOGIN_CLIENT_FAILURES = 3
    for name in ("carol", "dave", "erin"):
        assert client.post("/login/", {"username": name, "password": "guess"}).status_code == 200
    # A fresh username, even the right password of a real account: refused from this client...
    locked = client.post("/login/", {"username": "alice", "password": "correct horse"})
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) > 0
    # ...but not from another client, and alice herself is not locked.
    other = client.post("/login/", {"username": "alice", "password": "correct horse"}, REMOTE_ADDR="192.0.2.50")
    assert other.status_code == 302


def test_clients_behind_one_proxy_do_not_lock_each_other_out(client, user, settings):
    """Behind the reverse proxy every request comes from its address: with the header setting,
    each client is counted by the address the proxy added (the right-most), so one client
    tripping the per-client limit leaves the others alone, even when it forges the header."""
    settings.AGENTOPS_TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    settings.AGENTOPS_LOGIN_CLIENT_FAILURES = 3
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    # The attacker prepends the victim's address; the proxy appends the attacker's real one.
    attacker = {"X-Forwarded-For": "198.51.100.7, 203.0.113.5"}
    victim = {"X-Forwarded-For": "198.51.100.7"}
    for name in ("carol", "dave", "erin"):
        response = client.post("/login/", {"username": name, "password": "guess"}, headers=attacker, **proxy)
        assert response.status_code == 200
    assert client.post("/login/", {"username": "frank", "password": "guess"},
                       headers=attacker, **proxy).status_code == 429
    assert client.post("/login/", {"username": "frank", "password": "guess"},
                       headers={"X-Forwarded-For": "203.0.113.5"}, **proxy).status_code == 429
    # The other client behind the same proxy address logs in.
    response = client.post("/login/", {"username": "alice", "password": "correct horse"}, headers=victim, **proxy)
    assert response.status_code == 302


def test_a_forged_forwarded_for_is_ignored_without_the_setting(client, user, settings):
    """Not behind a configured proxy, X-Forwarded-For is whatever the client wrote: a new value
    per attempt must not buy a new allowance."""
    settings.AGENTOPS_TRUSTED_PROXY_HEADER = ""
    settings.AGENTOPS_LOGIN_CLIENT_FAILURES = 3
    for n, name in enumerate(("carol", "dave", "erin")):
        response = client.post("/login/", {"username": name, "password": "guess"},
                               headers={"X-Forwarded-For": f"198.51.100.{n + 1}"})
        assert response.status_code == 200
    locked = client.post("/login/", {"username": "alice", "password": "correct horse"},
                         headers={"X-Forwarded-For": "198.51.100.200"})
    assert locked.status_code == 429


@pytest.mark.parametrize(("header", "count", "forwarded", "expected"), [
    ("", 1, "198.51.100.7", "10.0.0.2"),  # no setting: the header is ignored
    ("X-Forwarded-For", 1, "198.51.100.7, 203.0.113.5", "203.0.113.5"),  # right-most
    ("X-Forwarded-For", 2, "198.51.100.7, 203.0.113.5, 10.0.0.9", "203.0.113.5"),  # two proxies
    ("X-Forwarded-For", 2, "203.0.113.5", "10.0.0.2"),  # fewer hops than proxies: the connection
    ("X-Forwarded-For", 1, None, "10.0.0.2"),  # not through the proxy
    ("X-Forwarded-For", 1, "not-an-address", "10.0.0.2"),
    ("X-Forwarded-For", 1, "203.0.113.5:4711", "203.0.113.5"),
    ("X-Real-IP", 1, "203.0.113.5", "203.0.113.5"),
    ("X-Forwarded-For", 1, "2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # an IPv6 client's /64
    ("X-Forwarded-For", 1, "[2001:db8:1:2::5]:443", "2001:db8:1:2::/64"),
    ("X-Forwarded-For", 1, "::ffff:203.0.113.5", "203.0.113.5"),
])
def test_the_client_address(rf, settings, header, count, forwarded, expected):
    from agentops.login import client_address

    settings.AGENTOPS_TRUSTED_PROXY_HEADER = header
    settings.AGENTOPS_TRUSTED_PROXY_COUNT = count
    headers = {header or "X-Forwarded-For": forwarded} if forwarded is not None else {}
    request = rf.post("/login/", REMOTE_ADDR="10.0.0.2", headers=headers)
    assert client_address(request) == expected


def test_the_admin_login_goes_through_the_same_throttled_form(client):
    response = client.get("/admin/login/?next=/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/admin/"


def test_forms_carry_a_csrf_token(client):
    assert "csrfmiddlewaretoken" in client.get("/login/").content.decode()


def login_attempt(url: str, username: str, password: str) -> int:
    """One sign-in through the form over HTTP, on a new connection each time (so that any web
    worker may answer): its status."""
    import re

    import requests

    page = requests.get(url, headers={"Connection": "close"}, timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return requests.post(url, data={"username": username, "password": password, "csrfmiddlewaretoken": token},
                         cookies=page.cookies, headers={"Connection": "close", "Referer": url},
                         allow_redirects=False, timeout=10).status_code


@faults_pass
@pytest.mark.slow
def test_the_lockout_counts_failures_across_web_workers(stack_env, tmp_path):
    """Two gunicorn workers share one lockout (the cache is the product's Redis): it trips after
    the configured number of wrong passwords in total, whichever worker answers them."""


    from tests.agentops.test_runstack import Stack

    get_user_model().objects.create_user("bob", password="correct horse")
    stack_env["AGENTOPS_LOGIN_FAILURES"] = "4"
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "2", "--worker-concurrency", "1",
               "--no-beat") as stack:
        url = f"{stack.url}/login/"

        def attempt(password: str) -> int:
            return login_attempt(url, "bob", password)

        assert [attempt("guess") for _ in range(4)] == [200] * 4
        # Locked out everywhere: were the count per worker, one of these would reach a worker
        # that has seen fewer than four failures and answer 200 or let the right password in.
        assert [attempt("correct horse") for _ in range(8)] == [429] * 8


def test_a_signed_in_user_without_admin_access_is_told_so_not_sent_round_in_a_loop(client, django_user_model):
    user = django_user_model.objects.create_user("plain", password="pw-plain-123")
    client.force_login(user)
    response = client.get("/admin/", follow=True)
    assert len(response.redirect_chain) <= 2
    assert response.status_code == 403
    assert b"no access to the admin" in response.content
