"""The Releases pages: list, comparison with its verdict, figures and attribution, filters in the
URL, escaping of hostile names, and no view into other projects."""

from __future__ import annotations

import json
import re

import pytest

from tests.releases.conftest import make_release

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client, django_user_model, two_releases):
    user = django_user_model.objects.create_user("ana", password="pw")
    two_releases.members.add(user)
    client.force_login(user)
    return client


def test_list_shows_each_release_with_volume_and_a_compare_link(member):
    page = member.get("/releases").content.decode()
    assert "v1" in page and "v2" in page and "<polyline points=" in page
    assert "/releases/compare?project=acme&amp;a=v1&amp;b=v2" in page


def test_compare_page_names_the_regression_and_the_step_behind_it(member):
    r = member.get("/releases/compare", {"a": "v1", "b": "v2"})
    assert r.status_code == 200
    page = r.content.decode()
    assert "Regressed: <b>checkout</b>" in page
    assert "Calls got slower: <b>tool:fetch_invoice</b>" in page
    steps_table = page.split('id="attribution-steps"')[1].split("</table>")[0]
    first = re.search(r'<tr class="top">.*?<span class="group-key">([^<]+)</span>', steps_table, re.S)
    assert first and first.group(1) == "tool:fetch_invoice"
    figures = json.loads(re.search(r'<script id="release-figures" type="application/json">(.*?)</script>',
                                   page, re.S).group(1))
    assert [t["name"] for t in figures["ecdf"]["data"]] == ["v1", "v2"]
    assert figures["ecdf"]["layout"]["xaxis"]["type"] == "log"
    assert len(figures["histogram"]["data"]) == 2
    assert "js/releases.js" in page and "js/plotly-basic.min.js" in page


def test_compare_defaults_to_the_two_newest_releases_and_keeps_filters(member):
    page = member.get("/releases/compare", {"environment": "prod"}).content.decode()
    assert '<option value="v1" selected>' in page
    assert '<input type="hidden" name="environment" value="prod">' in page


def test_bad_filter_or_unknown_release_is_a_400_with_the_reason(member):
    r = member.get("/releases/compare", {"a": "v1", "b": "v2", "alpha": "7"})
    assert r.status_code == 400 and "alpha: must be between 0 and 1" in r.content.decode()
    r = member.get("/releases/compare", {"a": "v1", "b": "v7"})
    assert r.status_code == 400 and "b: no release &#x27;v7&#x27;" in r.content.decode()


def test_hostile_names_are_escaped(member, two_releases):
    make_release(two_releases, "v2", 25, name="<script>alert(1)</script>", seed=5)
    page = member.get("/releases/compare", {"a": "v1", "b": "v2"}).content.decode()
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_other_projects_are_not_visible(member, other_project):
    make_release(other_project, "secret-v1", 5)
    assert member.get("/releases", {"project": "globex"}).status_code == 404
    assert member.get("/releases/compare", {"project": "globex", "a": "secret-v1", "b": "v2"}).status_code == 404
    assert "secret-v1" not in member.get("/releases").content.decode()


def test_pages_need_a_login(client):
    assert client.get("/releases/compare?a=v1&b=v2").status_code == 302
