"""Settings in a real browser (issue #27 item 8): an admin creates a key and sees its secret once,
revokes it (ingest with it is then a 401), adds a member with a role, edits a model price, and
finds each of those in the audit log; hostile names render as text. Screenshots of the pages go
to test-artifacts/ (and $AGENTOPS_SETTINGS_SHOTS when set)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from analysis.models import ModelPrice
from ingest.services import member_add
from tests.browser.conftest import screenshot, skip_without_chromium
from tests.browser.test_dashboard import assert_nothing_ran, log_in

skip_without_chromium()
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE_USER = "<img src=x onerror=window.pwned=1>bob"


@pytest.fixture
def admin(project):
    # A superuser who is also the project's admin: only superusers add members (issue 39, item 7).
    user = get_user_model().objects.create_superuser("ana", password="secret-pw")
    member_add(project=project, user=user, role="admin")
    user.user_permissions.add(*Permission.objects.filter(codename__in=["add_modelprice", "change_modelprice"]))
    return user


def ingest_status(live_server, key: str) -> int:
    request = urllib.request.Request(f"{live_server.url}/api/v1/ingest", data=json.dumps({"events": []}).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def shot(page, name: str) -> None:
    screenshot(page, name)
    if folder := os.environ.get("AGENTOPS_SETTINGS_SHOTS"):
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_an_admin_manages_keys_members_and_prices_and_the_audit_log_shows_each(
        live_server, browser_page, admin, project):
    page = browser_page
    get_user_model().objects.create_user(HOSTILE_USER, password="pw")
    price = ModelPrice.objects.create(model="gpt-x", input_per_million="2.5", output_per_million="10",
                                      effective_from="2026-11-01T00:00:00Z")
    log_in(page, live_server, "/")
    page.click("nav.pages a:text-is('Settings')")
    page.click("a:text-is('acme')")

    # A key: its secret once, then never again.
    page.fill("#key-form input[name=name]", "ci <b>runner</b>")
    page.check("#key-form input[value=ingest]")
    page.click("#key-form button[type=submit]")
    secret = page.inner_text("#new-key-secret").strip()
    assert secret.startswith("ao_") and ingest_status(live_server, secret) == 200
    assert page.locator(".new-key h2").inner_text().startswith("New key “ci <b>runner</b>”")
    shot(page, "settings-keys-new")
    prefix = secret.split("_")[1]
    page.goto(f"{live_server.url}/projects/acme/settings/")
    assert page.locator("#new-key-secret").count() == 0 and secret not in page.content()
    row = page.locator(f"tr[data-prefix='{prefix}']")
    assert "never" not in row.inner_text() and "active" in row.inner_text()  # used once, just now

    row.locator("button:text-is('Revoke')").click()
    page.wait_for_selector(f"tr.revoked[data-prefix='{prefix}']")
    assert ingest_status(live_server, secret) == 401

    # A member with a role.
    page.click(".settings-nav a:text-is('Members')")
    page.fill("#member-form input[name=username]", HOSTILE_USER)
    page.select_option("#member-form select[name=role]", "admin")
    page.click("#member-form button[type=submit]")
    bob = page.locator(f"tr[data-user='{HOSTILE_USER}']")
    assert bob.locator("select[name=role]").input_value() == "admin"
    assert HOSTILE_USER in bob.inner_text()
    shot(page, "settings-members")

    # A price edited.
    page.click(".settings-nav a:text-is('Model prices')")
    page.click(f"a[href='/settings/prices/{price.pk}/edit']")
    page.fill("#price-form input[name=input_per_million]", "-1")
    page.click("#price-form button[type=submit]")
    assert "a price is not negative" in page.inner_text("#price-form")
    assert page.errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
    page.errors.clear()  # that 400 was the point
    page.fill("#price-form input[name=input_per_million]", "3.25")
    page.click("#price-form button[type=submit]")
    prices = page.locator("tr[data-model='gpt-x'] td.num").all_inner_texts()
    assert prices == ["$3.25", "$10.00"], prices  # as people write prices, not "$3.250000"
    # The settings pages filter nothing: no range, release or environment in their top bar.
    assert page.locator("#global-filters").count() == 0

    # Each action in the audit log, newest first.
    page.goto(f"{live_server.url}/projects/acme/settings/audit")
    actions = page.eval_on_selector_all("tr[data-action]", "rows => rows.map(r => r.dataset.action)")
    assert actions[:4] == ["price.edit", "member.add", "key.revoke", "key.create"], actions
    text = page.inner_text("table.audit-table")
    assert prefix in text and HOSTILE_USER in text and "ana" in text and secret not in page.content()
    shot(page, "settings-audit")
    assert_nothing_ran(page)
