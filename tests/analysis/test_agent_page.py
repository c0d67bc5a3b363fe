"""The Agent page and GET /api/v1/agents/<name> stay bounded whatever the number of learned pairs
(issue #39.3: a 1,000-call turn's 499,500 pairs made a 132 MB answer): a page of edges in
(relation, time saved or runs) order with a cursor that walks every pair once, the count per
relation, the busiest calls; the page shows each relation's top rows and "N more"."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from analysis.dashboard.agents import (
    KEYS,
    MAX_CALLS,
    RELATIONS,
    SECTION_ROWS,
    edge_counts,
    edge_page,
    section_tops,
)
from analysis.engine.detectors.dependencies import (
    DEPENDENT,
    INDEPENDENT,
    LEARNED_TOGETHER,
    LEARNED_UNKNOWN,
    UNKNOWN_VERDICT,
    pair_verdict,
)
from analysis.filters import encode_cursor
from analysis.models import CallPair
from tests.analysis.crowds import insert_wide_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client, project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    return client


def api(client, key, name="wide", **params):
    return client.get(f"/api/v1/agents/{name}", params, HTTP_AUTHORIZATION=f"Bearer {key}")


def order_key(edge: dict) -> tuple:
    independent = edge["verdict"] == INDEPENDENT
    return RELATIONS.index(edge["relation"]), -(edge["saved_ms"] if independent else edge["runs"])


def test_the_cursor_walks_every_pair_once_in_order(client, project, read_key):
    pairs = insert_wide_turn(project, "wide", calls=40)  # 780 pairs
    seen, cursor, pages = [], "", 0
    while True:
        body = api(client, read_key, limit=200, **({"cursor": cursor} if cursor else {})).json()
        assert len(body["edges"]) <= 200
        seen += body["edges"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 4 and len(seen) == pairs == 780
    assert len({(e["earlier"], e["later"]) for e in seen}) == 780
    assert [order_key(e) for e in seen] == sorted(order_key(e) for e in seen)
    assert sum(body["edge_counts"].values()) == 780 and set(body["edge_counts"]) == set(KEYS.values())
    assert body["calls_total"] == 40 and len(body["calls"]) == 40


def test_one_relation_pages_alone_and_bad_parameters_are_400s(client, member, project, read_key):
    insert_wide_turn(project, "wide", calls=40)
    body = api(client, read_key, relation="serial", limit=500).json()
    assert {e["relation"] for e in body["edges"]} == {RELATIONS[1]}
    assert len(body["edges"]) == body["edge_counts"]["serial"] and body["next_cursor"] is None
    saved = [e["saved_ms"] for e in body["edges"]]
    assert saved == sorted(saved, reverse=True)  # the time running them together would save, most first
    for params in ({"relation": "nonsense"}, {"cursor": "nonsense"}, {"limit": "501"}, {"limit": "0"},
                   {"cursor": encode_cursor("9~1.0", 1)}, {"cursor": encode_cursor("1~nan", 1)},
                   {"cursor": encode_cursor("1~1.0", 2**64)}):
        r = api(client, read_key, **params)
        assert r.status_code == 400, (params, r.content[:200])
        assert next(iter(params)) in r.json()["error"]
    page = member.get("/agents/wide", {"project": project.name, "relation": "serial", "cursor": "nonsense"})
    assert page.status_code == 400 and b"cursor: not a cursor" in page.content
    assert member.get("/agents/wide", {"project": project.name, "relation": "nonsense"}).status_code == 404


def test_a_1000_call_turn_answers_a_page_not_half_a_million_pairs(client, member, project, read_key):
    pairs = insert_wide_turn(project, "wide", calls=1000)
    assert pairs == 499_500
    r = api(client, read_key)
    body = r.json()
    assert len(body["edges"]) == 50 and body["next_cursor"] and sum(body["edge_counts"].values()) == pairs
    assert body["calls_total"] == 1000 and len(body["calls"]) == MAX_CALLS
    assert len(r.content) < 64_000
    page = member.get("/agents/wide", {"project": project.name})
    html = page.content.decode()
    assert page.status_code == 200 and len(page.content) < 256_000
    assert html.count("<tr>") <= 4 * SECTION_ROWS + MAX_CALLS + 5
    unknown = body["edge_counts"]["unknown"]
    assert f"{unknown - SECTION_ROWS} more." in html and "1000 calls in all" in html
    # "Next 50" opens that relation alone, from its 21st row.
    more = member.get("/agents/wide", {"project": project.name, "relation": "unknown",
                                       "cursor": _next_cursor(html, "unknown")})
    rows = more.content.decode()
    assert more.status_code == 200 and 'data-relation="unknown"' in rows and 'id="agent-calls"' not in rows
    assert rows.count("<tr>") == 50 + 1


def _next_cursor(html: str, key: str) -> str:
    from html import unescape
    from urllib.parse import parse_qs, urlsplit

    link = html.split(f'<p class="more" data-relation="{key}">')[1].split('href="')[1].split('"')[0]
    return parse_qs(urlsplit(unescape(link)).query)["cursor"][0]


def test_the_relation_read_in_sql_is_the_one_the_verdict_gives(project):
    """The page ranks pairs by relation in SQL, from the verdict and basis the refresh stored
    (pair_verdict): for every combination of counts it agrees with reading them in Python."""
    combos = [(runs, flow, concurrent, together, variants)
              for runs in (1, 8, 20) for flow in (0, 1, 20) for concurrent in (0, 4, 10, 20)
              for together in (0, 3) for variants in (1, 16)]
    for n, (runs, flow, concurrent, together, variants) in enumerate(combos):
        pair = CallPair(project=project, agent="grid", release="", earlier=f"a#{n}", later=f"b#{n}", runs=runs,
                        flow_runs=min(flow, runs), concurrent_runs=min(concurrent, runs),
                        together_runs=min(together, runs), result_variants=variants, serial_ms=10.0)
        verdict, basis = pair_verdict(pair)
        pair.verdict, pair.basis = verdict or UNKNOWN_VERDICT, basis or LEARNED_UNKNOWN
        pair.save()
    expected = {k: 0 for k in KEYS.values()}
    for pair in CallPair.objects.filter(project=project, agent="grid"):
        if pair.verdict == DEPENDENT:
            expected["feeds"] += 1
        elif pair.verdict == INDEPENDENT and pair.basis == LEARNED_TOGETHER and pair.concurrent_runs >= pair.runs / 2:
            expected["together"] += 1
        elif pair.verdict == INDEPENDENT:
            expected["serial"] += 1
        else:
            expected["unknown"] += 1
    assert edge_counts(project=project, agent="grid", release="") == expected
    assert expected["feeds"] and expected["together"] and expected["unknown"]


def test_the_pages_tables_are_each_relations_first_page(project):
    """The page reads every relation's top rows in one statement (section_tops): the same rows and
    cursors as paging each relation alone."""
    insert_wide_turn(project, "wide", calls=40)
    tops = section_tops(project=project, agent="wide", release="v1", limit=7)
    assert set(tops) == set(RELATIONS)
    for rel in RELATIONS:
        assert tops[rel] == edge_page(project=project, agent="wide", release="v1", relation=rel, limit=7)
