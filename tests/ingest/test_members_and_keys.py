"""Keys and members have one write path (ingest.services), which the settings pages, the admin and
the command line share: each change is checked the same way and audited once, without secrets."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ingest.models import AuditEntry, IngestKey, ProjectMembership
from ingest.services import (
    COMMAND_LINE,
    key_authenticate,
    key_create,
    key_revoke,
    member_add,
    member_remove,
    member_role_set,
)
from tests.conftest import single_node

pytestmark = pytest.mark.django_db

BEFORE_ROLES = [("ingest", "0014_step_search_indexes")]
ROLES = [("ingest", "0015_membership_roles_and_audit")]


def user(name: str):
    return get_user_model().objects.create_user(name, password="pw")


def test_creating_and_revoking_a_key_is_audited_without_its_secret(project):
    alice = user("alice")
    key, plaintext = key_create(project=project, scopes=["read", "read"], name="ci", actor=alice)
    assert key.scopes == ["read"]
    assert key_revoke(key=key, actor=alice) and not key_revoke(key=key, actor=alice)
    assert key_authenticate(plaintext=plaintext) is None
    entries = list(AuditEntry.objects.filter(project=project).order_by("id"))
    assert [(e.action, e.target, e.actor_name) for e in entries] == [
        ("key.create", key.prefix, "alice"), ("key.revoke", key.prefix, "alice")]
    assert entries[0].details == {"scopes": ["read"], "name": "ci"}
    assert not AuditEntry.objects.filter(details__icontains=plaintext.split("_", 2)[2]).exists()  # the whole secret: it may hold "_"


def test_a_bad_key_request_is_refused_before_anything_is_stored(project):
    for scopes, name in [([], ""), (["root"], ""), (["ingest"], "x" * 101)]:
        with pytest.raises(ValueError):
            key_create(project=project, scopes=scopes, name=name)
    assert not IngestKey.objects.exists() and not AuditEntry.objects.exists()


def test_members_are_added_re_roled_and_removed_with_an_audit_entry_each(project):
    alice, bob = user("alice"), user("bob")
    member_add(project=project, user=alice, role="admin")
    member_add(project=project, user=bob, role="member", actor=alice)
    with pytest.raises(ValueError, match="already a member"):
        member_add(project=project, user=bob, role="admin", actor=alice)
    member_role_set(project=project, user=bob, role="admin", actor=alice)
    member_remove(project=project, user=alice, actor=bob)
    assert list(project.members.all()) == [bob]
    assert [(e.action, e.target, e.actor_name, e.details) for e in AuditEntry.objects.order_by("id")] == [
        ("member.add", "alice", COMMAND_LINE, {"role": "admin"}),
        ("member.add", "bob", "alice", {"role": "member"}),
        ("member.role", "bob", "alice", {"from": "member", "to": "admin"}),
        ("member.remove", "alice", "bob", {"role": "admin"}),
    ]


def test_a_project_keeps_its_last_admin(project):
    alice = user("alice")
    member_add(project=project, user=alice, role="admin")
    for change in (lambda: member_role_set(project=project, user=alice, role="member"),
                   lambda: member_remove(project=project, user=alice)):
        with pytest.raises(ValueError, match="last admin"):
            change()
    assert ProjectMembership.objects.get(user=alice).role == "admin"
    with pytest.raises(ValueError, match="a role is one of"):
        member_add(project=project, user=user("bob"), role="owner")


def test_the_command_line_adds_members_and_revokes_keys_through_the_same_audited_path(project, capsys):
    user("carol")
    call_command("add_member", "acme", "carol", "--role", "admin")
    assert ProjectMembership.objects.get(user__username="carol").role == "admin"
    with pytest.raises(CommandError, match="already a member"):
        call_command("add_member", "acme", "carol")
    with pytest.raises(CommandError, match="no user named"):
        call_command("add_member", "acme", "nobody")
    call_command("create_key", "acme", "--scope", "read")
    plaintext = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("revoke_key", plaintext.split("_")[1])
    with pytest.raises(CommandError, match="already revoked"):
        call_command("revoke_key", plaintext.split("_")[1])
    assert key_authenticate(plaintext=plaintext) is None
    assert [(e.action, e.actor_name) for e in AuditEntry.objects.order_by("id")] == [
        ("member.add", COMMAND_LINE), ("key.create", COMMAND_LINE), ("key.revoke", COMMAND_LINE)]


@single_node("it migrates back to before the roles, past ingest 0018 and analysis 0015-0016, which "
             "distribute the tables on Citus and do not go back there")
@pytest.mark.django_db(transaction=True)
def test_members_from_before_roles_are_kept_as_admins():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_ROLES)
    try:
        old = executor.loader.project_state(BEFORE_ROLES).apps
        project = old.get_model("ingest", "Project").objects.create(name="legacy")
        member = old.get_model("auth", "User").objects.create(username="old-timer")
        project.members.add(member)
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(ROLES)
        membership = ProjectMembership.objects.get(project__name="legacy")
        assert (membership.user.username, membership.role) == ("old-timer", "admin")
    finally:
        # The tests after this one run on the latest schema, not on the roles' migration.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
