"""Settings pages: only a project's admins reach its settings (a member gets 403, anyone else 404
as for a project that does not exist), every change is a CSRF-checked POST that is audited, bad
input answers 400 saying what is wrong, and hostile names are shown escaped."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from analysis.models import ModelPrice
from ingest.models import AuditEntry, IngestKey, ProjectMembership
from ingest.services import key_create, member_add
from tests.analysis.factories import make_task

pytestmark = pytest.mark.django_db

HOSTILE = '<script>window.pwned=1</script>"\'&'


def login(name: str, *, project=None, role=None, superuser=False) -> Client:
    maker = get_user_model().objects.create_superuser if superuser else get_user_model().objects.create_user
    user = maker(name, password="pw")
    if project is not None:
        member_add(project=project, user=user, role=role)
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def admin(project):
    return login("alice", project=project, role="admin")


def settings_urls(name: str) -> list[str]:
    base = f"/projects/{name}/settings/"
    return [base, base + "members", base + "retention", base + "audit"]


def test_an_admin_sees_every_settings_page_and_the_link_to_them(admin, project):
    for url in settings_urls("acme") + ["/settings/", "/settings/prices"]:
        assert admin.get(url).status_code == 200, url
    assert b'href="/settings/"' in admin.get("/").content


def test_a_member_who_is_not_an_admin_gets_403_and_no_link(project):
    viewer = login("victor", project=project, role="member")
    for url in settings_urls("acme") + ["/settings/", "/settings/prices"]:
        assert viewer.get(url).status_code == 403, url
    for url in ["/projects/acme/settings/keys/new", "/projects/acme/settings/members/add"]:
        assert viewer.post(url, {"scopes": "read", "username": "victor", "role": "admin"}).status_code == 403
    assert b'href="/settings/"' not in viewer.get("/").content
    assert not IngestKey.objects.exists() and ProjectMembership.objects.get().role == "member"


def test_anyone_else_gets_the_404_of_a_project_that_does_not_exist(admin, project, other_project):
    key, _ = key_create(project=other_project, scopes=["ingest"])
    globex_admin = get_user_model().objects.create_user("gina", password="pw")
    member_add(project=other_project, user=globex_admin, role="admin")
    for url in settings_urls("globex"):
        missing = admin.get(url.replace("globex", "no-such-project"))
        theirs = admin.get(url)
        assert theirs.status_code == missing.status_code == 404, url
        assert theirs.content == missing.content.replace(b"no-such-project", b"globex")
    for url, data in [(f"/projects/globex/settings/keys/{key.prefix}/revoke", {}),
                      ("/projects/globex/settings/keys/new", {"scopes": "read"}),
                      (f"/projects/globex/settings/members/{globex_admin.pk}/role", {"role": "member"}),
                      (f"/projects/globex/settings/members/{globex_admin.pk}/remove", {}),
                      # B's key and member through A's own settings URLs
                      (f"/projects/acme/settings/keys/{key.prefix}/revoke", {}),
                      (f"/projects/acme/settings/members/{globex_admin.pk}/remove", {})]:
        assert admin.post(url, data).status_code == 404, url
    key.refresh_from_db()
    assert key.revoked_at is None and ProjectMembership.objects.get(user=globex_admin).role == "admin"
    assert not AuditEntry.objects.filter(project=other_project, actor=admin.user).exists()
    anonymous = Client().get("/projects/acme/settings/")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_a_new_key_is_shown_once_and_listed_by_its_prefix(admin, project):
    created = admin.post("/projects/acme/settings/keys/new", {"name": HOSTILE, "scopes": ["ingest", "read"]})
    assert created.status_code == 200
    key = IngestKey.objects.get(project=project)
    secret = created.content.decode().split('id="new-key-secret">')[1].split("<")[0]
    assert secret.startswith(f"ao_{key.prefix}_")
    assert "no-store" in created["Cache-Control"]
    assert HOSTILE.encode() not in created.content and b"&lt;script&gt;" in created.content
    listed = admin.get("/projects/acme/settings/")
    assert key.prefix.encode() in listed.content and secret.encode() not in listed.content
    entry = AuditEntry.objects.get(action="key.create")
    assert (entry.actor, entry.target, entry.details["scopes"]) == (admin.user, key.prefix, ["ingest", "read"])


def test_a_revoked_key_is_refused_and_stays_listed_as_revoked(admin, project):
    key, plaintext = key_create(project=project, scopes=["ingest"])
    assert admin.get(f"/projects/acme/settings/keys/{key.prefix}/revoke").status_code == 405
    assert admin.post(f"/projects/acme/settings/keys/{key.prefix}/revoke").status_code == 302
    assert Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}").post(
        "/api/v1/ingest", {"events": []}, content_type="application/json").status_code == 401
    assert b'class="revoked"' in admin.get("/projects/acme/settings/").content
    assert AuditEntry.objects.filter(action="key.revoke", target=key.prefix, actor=admin.user).exists()


@pytest.mark.parametrize("data, message", [
    ({"name": "x"}, b"choose at least one scope"),
    ({"scopes": "root"}, b"Select a valid choice"),
    ({"scopes": "read", "name": "n" * 101}, b"at most 100 characters"),
    ({"scopes": "read", "name": "a\x00b"}, b"Null characters are not allowed"),
])
def test_a_bad_key_form_is_a_400_that_says_why(admin, data, message):
    response = admin.post("/projects/acme/settings/keys/new", data)
    assert response.status_code == 400 and message in response.content
    assert not IngestKey.objects.exists()


@pytest.fixture
def operator(project):
    return login("root", superuser=True)


def test_a_project_admin_cannot_add_members_nor_learn_which_usernames_exist(admin, project, other_project):
    """Adding is for superusers (issue 39, item 7): an admin of one project could otherwise test
    usernames one by one, and put another tenant's user into their project unasked."""
    theirs = get_user_model().objects.create_user("tenant-b-user", password="pw")
    member_add(project=other_project, user=theirs, role="member")
    answers = [admin.post("/projects/acme/settings/members/add", {"username": name, "role": "member"})
               for name in ("tenant-b-user", "no-such-user")]
    assert [a.status_code for a in answers] == [403, 403] and answers[0].content == answers[1].content
    assert list(project.members.all()) == [admin.user]
    page = admin.get("/projects/acme/settings/members").content.decode()
    assert 'id="member-form"' not in page and "added by an operator" in page


def test_joining_another_project_does_not_change_a_users_default_project(project, other_project, operator):
    """The pages without ?project= show the user's default: the project they joined first, not
    the first by name, which a new membership could silently replace."""
    bob = login("bob", project=other_project, role="member")  # globex
    assert operator.post("/projects/acme/settings/members/add", {"username": "bob", "role": "member"}).status_code == 302
    assert set(bob.user.projects.values_list("name", flat=True)) == {"acme", "globex"}
    make_task(other_project, "globex-task")
    make_task(project, "acme-task")
    assert [t["task_id"] for t in bob.get("/api/v1/tasks").json()["results"]] == ["globex-task"]
    assert [t["task_id"] for t in bob.get("/api/v1/tasks", {"project": "acme"}).json()["results"]] == ["acme-task"]


def test_a_superuser_adds_a_member_and_an_admin_changes_the_role_and_removes_them(admin, operator, project):
    bob = get_user_model().objects.create_user(HOSTILE[:150], password="pw")
    assert operator.post("/projects/acme/settings/members/add", {"username": bob.username, "role": "member"}).status_code == 302
    page = admin.get("/projects/acme/settings/members")
    assert HOSTILE.encode() not in page.content and b"&lt;script&gt;window.pwned=1&lt;/script&gt;" in page.content
    assert admin.post(f"/projects/acme/settings/members/{bob.pk}/role", {"role": "admin"}).status_code == 302
    assert ProjectMembership.objects.get(user=bob).role == "admin"
    assert admin.post(f"/projects/acme/settings/members/{bob.pk}/remove").status_code == 302
    assert list(project.members.all()) == [admin.user]
    assert [e.action for e in AuditEntry.objects.filter(project=project, actor=admin.user).order_by("id")] == [
        "member.role", "member.remove"]
    assert AuditEntry.objects.filter(project=project, actor=operator.user, action="member.add").exists()
    audit = admin.get("/projects/acme/settings/audit")
    assert audit.content.count(b"&lt;script&gt;window.pwned=1&lt;/script&gt;") == 3 and HOSTILE.encode() not in audit.content


@pytest.mark.parametrize("data, message", [
    ({"username": "nobody", "role": "member"}, "no active user named “nobody”"),
    ({"username": "alice", "role": "member"}, "already a member"),
    ({"username": "alice", "role": "owner"}, "Select a valid choice"),
    ({"username": "", "role": "member"}, "This field is required"),
    ({"username": "a\x00b", "role": "member"}, "Null characters are not allowed"),
])
def test_a_bad_member_form_is_a_400_that_says_why(admin, operator, data, message):
    response = operator.post("/projects/acme/settings/members/add", data)
    assert response.status_code == 400 and message in response.content.decode()


def test_the_last_admin_cannot_demote_or_remove_themselves(admin, project):
    # No Remove button for the only admin (it could only fail); one for each once there are two.
    page = admin.get("/projects/acme/settings/members").content.decode()
    assert "the only admin" in page and f"members/{admin.user.pk}/remove" not in page
    bob = get_user_model().objects.create_user("bob")
    member_add(project=project, user=bob, role="admin")
    page = admin.get("/projects/acme/settings/members").content.decode()
    assert "the only admin" not in page and f"members/{admin.user.pk}/remove" in page
    ProjectMembership.objects.filter(user=bob).delete()
    for url, data in [(f"/projects/acme/settings/members/{admin.user.pk}/role", {"role": "member"}),
                      (f"/projects/acme/settings/members/{admin.user.pk}/remove", {})]:
        response = admin.post(url, data)
        assert response.status_code == 400 and b"last admin" in response.content
    assert ProjectMembership.objects.get(user=admin.user).role == "admin"


def test_an_admin_who_steps_down_is_sent_back_to_the_settings_home(admin, project):
    member_add(project=project, user=get_user_model().objects.create_user("bob"), role="admin")
    response = admin.post(f"/projects/acme/settings/members/{admin.user.pk}/role", {"role": "member"})
    assert response.status_code == 302 and response["Location"] == "/settings/"
    assert admin.get("/projects/acme/settings/").status_code == 403


def test_a_superuser_manages_every_project(project):
    root = login("root", superuser=True)
    assert root.get("/projects/acme/settings/members").status_code == 200
    assert root.post("/projects/acme/settings/keys/new", {"scopes": "read"}).status_code == 200


def test_retention_is_shown_read_only_as_the_installations(admin, settings):
    settings.AGENTOPS_RETENTION_DAYS = 30
    page = admin.get("/projects/acme/settings/retention").content.decode()
    assert "older than <b>30 days</b>" in page and "AGENTOPS_RETENTION_DAYS" in page and "<form" not in page.split("<main>")[1]


def price_editor(project) -> Client:
    client = login("pat", project=project, role="admin")
    client.user.user_permissions.add(*Permission.objects.filter(codename__in=["add_modelprice", "change_modelprice"]))
    return client


PRICE = {"model": "gpt-x", "input_per_million": "2.5", "output_per_million": "10", "effective_from": "2026-11-01T00:00",
         "note": HOSTILE}


def test_a_price_editor_adds_and_edits_a_price_and_both_are_audited(project):
    editor = price_editor(project)
    assert editor.post("/settings/prices/new", PRICE).status_code == 302
    price = ModelPrice.objects.get()
    page = editor.get("/settings/prices")
    assert b"gpt-x" in page.content and HOSTILE.encode() not in page.content
    assert editor.post(f"/settings/prices/{price.pk}/edit", {**PRICE, "input_per_million": "3"}).status_code == 302
    price.refresh_from_db()
    assert str(price.input_per_million) == "3.000000"
    edit = AuditEntry.objects.get(action="price.edit")
    assert edit.project is None and edit.details == {
        "effective_from": "2026-11-01T00:00:00+00:00",
        "input_per_million": {"before": "2.500000", "after": "3.000000"}}
    audit = editor.get("/projects/acme/settings/audit").content.decode()
    assert "price.add" in audit and "price.edit" in audit and "all projects" in audit


@pytest.mark.parametrize("change, message", [
    ({"input_per_million": "-1"}, "a price is not negative"),
    ({"input_per_million": "lots"}, "Enter a number"),
    ({"effective_from": "yesterday"}, "Enter a valid date/time"),
    ({"model": ""}, "This field is required"),
])
def test_a_bad_price_is_a_400_that_says_why(project, change, message):
    response = price_editor(project).post("/settings/prices/new", {**PRICE, **change})
    assert response.status_code == 400, response.content
    assert message in response.content.decode()
    assert not ModelPrice.objects.exists()


def test_a_second_price_for_the_same_model_and_instant_is_a_400(project):
    editor = price_editor(project)
    editor.post("/settings/prices/new", PRICE)
    response = editor.post("/settings/prices/new", PRICE)
    assert response.status_code == 400 and ModelPrice.objects.count() == 1


def test_an_admin_without_the_price_permissions_reads_prices_but_cannot_change_them(admin):
    price = ModelPrice.objects.create(model="m", input_per_million=1, output_per_million=1, effective_from=timezone.now())
    page = admin.get("/settings/prices")
    assert page.status_code == 200 and b"Add a price" not in page.content
    assert admin.post("/settings/prices/new", PRICE).status_code == 403
    assert admin.get(f"/settings/prices/{price.pk}/edit").status_code == 403
    assert ModelPrice.objects.count() == 1


def test_the_audit_log_pages_newest_first_and_shows_only_this_project(admin, project, other_project):
    for i in range(105):
        key_create(project=project, scopes=["read"], name=f"k{i}")
    key_create(project=other_project, scopes=["read"], name="GLOBEX-KEY")
    first = admin.get("/projects/acme/settings/audit").content.decode()
    assert "k104" in first and "k0;" not in first and "GLOBEX-KEY" not in first
    older = first.split('href="?before=')[1].split('"')[0]
    second = admin.get(f"/projects/acme/settings/audit?before={older}").content.decode()
    assert "name: k0" in second and "k104" not in second and "GLOBEX-KEY" not in second
    assert admin.get("/projects/acme/settings/audit?before=junk").status_code == 200


def test_the_admin_changes_prices_and_revokes_keys_through_the_audited_path(project):
    root = login("root", superuser=True)
    form = {"model": "gpt-x", "input_per_million": "1", "output_per_million": "2",
            "effective_from_0": "2026-11-01", "effective_from_1": "00:00:00", "note": ""}
    assert root.post("/admin/analysis/modelprice/add/", form).status_code == 302
    price = ModelPrice.objects.get()
    assert root.post(f"/admin/analysis/modelprice/{price.pk}/change/", {**form, "note": "list"}).status_code == 302
    assert root.post(f"/admin/analysis/modelprice/{price.pk}/delete/", {"post": "yes"}).status_code == 302
    key, _ = key_create(project=project, scopes=["read"])
    root.post("/admin/ingest/ingestkey/", {"action": "revoke", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert [(e.action, e.actor_name) for e in AuditEntry.objects.exclude(action="key.create").order_by("id")] == [
        ("price.add", "root"), ("price.edit", "root"), ("price.delete", "root"), ("key.revoke", "root")]


def test_loading_a_price_file_is_one_audit_entry_for_every_project(admin, tmp_path):
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_per_million,output_per_million,effective_from\nm,1,2,2026-01-01\nn,1,2,2026-01-01\n")
    call_command("load_prices", str(prices), stdout=StringIO())
    entry = AuditEntry.objects.get(action="price.load")
    assert (entry.actor_name, entry.project, entry.details) == (
        "command line", None, {"created": 2, "updated": 0, "models": ["m", "n"]})
    assert "price.load" in admin.get("/projects/acme/settings/audit").content.decode()
