"""The Agent page (`/agents/<name>`) and its API (`GET /api/v1/agents/<name>`): an agent's typical
call graph as its recent runs show it (analysis/engine/learned.py), which calls feed which, which
run together, which are independent yet run one after another (the parallelism to win), with the
run counts and the evidence behind every edge.

It reads only the learned tables (AgentProfile, CallPair), never the steps. A turn of n calls
learns n(n-1)/2 pairs (a 1,000-call turn: 499,500), so no read returns them all: PostgreSQL
ranks them (a relation from the verdict the refresh stored, then time saved or runs) and hands
over one page, the calls' top MAX_CALLS and the count per relation (docs/reliability.md,
"Bounded responses")."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Case, Count, F, FloatField, IntegerField, Q, Value, When, Window
from django.db.models.functions import Cast, RowNumber
from django.db.models.lookups import GreaterThanOrEqual
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from agentops.db import read_connection
from analysis.access import request_project
from analysis.dashboard.views import _page, _project
from analysis.engine.detectors.bases import BASES
from analysis.engine.detectors.dependencies import (
    DEPENDENT,
    INDEPENDENT,
    LEARNED_TOGETHER,
    MIN_PAIR_RUNS,
)
from analysis.filters import FilterError, cursor_number, cursor_parts, encode_cursor, parse_limit
from analysis.models import AgentProfile, CallPair
from ingest.models import Project, Task

# How the page names an edge (a verdict and, for independent pairs, whether they ran together).
FEEDS, TOGETHER, SERIAL, UNKNOWN = "feeds", "runs together", "independent, run one after another", "unknown"
RELATIONS = [FEEDS, SERIAL, TOGETHER, UNKNOWN]
# The relation's name in a URL (`relation=serial`) and in `edge_counts`.
KEYS = {FEEDS: "feeds", SERIAL: "serial", TOGETHER: "together", UNKNOWN: "unknown"}
BY_KEY = {key: rel for rel, key in KEYS.items()}
TITLES = {FEEDS: "Which calls feed which", SERIAL: "Independent, yet run one after another: could run in parallel",
          TOGETHER: "Which run together", UNKNOWN: "Not known yet"}
SAVES = (SERIAL, TOGETHER)  # independent pairs: ranked by the time running them together saves

# The bounds of one answer: edges per API page (parse_limit's 50 by default, at most 500), per
# table of the page (SECTION_ROWS, then "N more" leads to pages of PAGE_ROWS), the busiest
# MAX_CALLS calls and the newest MAX_RELEASES releases.
SECTION_ROWS = 20
PAGE_ROWS = 50
MAX_PAGE_ROWS = 200
MAX_CALLS = 100
MAX_RELEASES = 20

# A pair's relation, as the refresh's stored verdict and basis give it (pair_verdict, written by
# analysis/engine/learned.py): its rank is RELATIONS' order.
_RANK = Case(
    When(verdict=DEPENDENT, then=Value(RELATIONS.index(FEEDS))),
    When(Q(verdict=INDEPENDENT, basis=LEARNED_TOGETHER)
         & GreaterThanOrEqual(F("concurrent_runs") * 2, F("runs")), then=Value(RELATIONS.index(TOGETHER))),
    When(verdict=INDEPENDENT, then=Value(RELATIONS.index(SERIAL))),
    default=Value(RELATIONS.index(UNKNOWN)), output_field=IntegerField())
# Within a relation, independent pairs by the time they would save, the others by runs.
_WEIGHT = Case(When(verdict=INDEPENDENT, then=F("serial_ms")), default=Cast("runs", FloatField()),
               output_field=FloatField())


def _pairs(*, project: Project, agent: str, release: str):
    return (CallPair.objects.filter(project=project, agent=agent, release=release)
            .annotate(rank=_RANK, weight=_WEIGHT))


def _cursor(rank: int, weight: float, pk: int) -> str:
    return encode_cursor(f"{rank}~{weight!r}", pk)


def _after(cursor: str) -> Q:
    """The pairs after a cursor in (rank, weight descending, pk) order; FilterError naming
    `cursor` for anything `_cursor` did not make."""
    try:
        value, pk = cursor_parts(cursor)
        rank, _, weight = value.partition("~")
        rank, weight = int(rank), cursor_number(weight)
        if not 0 <= rank < len(RELATIONS):
            raise ValueError("no such relation")
    except (ValueError, OverflowError, UnicodeDecodeError):
        raise FilterError("cursor: not a cursor this API returned") from None
    return Q(rank__gt=rank) | Q(rank=rank, weight__lt=weight) | Q(rank=rank, weight=weight, pk__gt=pk)


def _edge(p: CallPair) -> dict:
    return {
        "earlier": p.earlier, "later": p.later, "relation": RELATIONS[p.rank], "verdict": p.verdict,
        # A basis is a code of the closed list; a row learned before the list holds its sentence.
        "basis": BASES[p.basis].meaning if p.basis in BASES else p.basis, "runs": p.runs, "flow_runs": p.flow_runs, "blind_runs": p.blind_runs,
        "concurrent_runs": p.concurrent_runs, "together_runs": p.together_runs,
        "result_variants": p.result_variants,
        "saved_ms": round(p.serial_ms, 1) if p.verdict == INDEPENDENT else None,
    }


def edge_page(*, project: Project, agent: str, release: str, relation: str | None = None, limit: int = PAGE_ROWS,
              cursor: str = "") -> tuple[list[dict], str | None]:
    """One page of the pairs in (relation, time saved or runs) order, one relation's only when
    named, and the cursor of the next page (None at the end): a top-N sort in PostgreSQL, whatever
    the number of pairs."""
    if limit <= 0:
        return [], None
    qs = _pairs(project=project, agent=agent, release=release)
    if relation is not None:
        qs = qs.filter(rank=RELATIONS.index(relation))
    if cursor:
        qs = qs.filter(_after(cursor))
    rows = list(qs.order_by("rank", "-weight", "pk")[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return [_edge(p) for p in rows], (_cursor(rows[-1].rank, rows[-1].weight, rows[-1].pk) if more else None)


def section_tops(*, project: Project, agent: str, release: str, limit: int = SECTION_ROWS
                 ) -> dict[str, tuple[list[dict], str | None]]:
    """Each relation's first `limit` pairs and the cursor after them (None: no more), in one
    statement: one scan and one sort of the agent's pairs instead of one top-N scan per relation."""
    ranked = (_pairs(project=project, agent=agent, release=release)
              .annotate(row=Window(RowNumber(), partition_by=[F("rank")], order_by=[F("weight").desc(), F("pk")]))
              .filter(row__lte=limit + 1).order_by("rank", "row"))
    rows: dict[int, list[CallPair]] = {}
    for p in ranked:
        rows.setdefault(p.rank, []).append(p)
    out = {}
    for rank, pairs in rows.items():
        shown = pairs[:limit]
        last = shown[-1]
        out[RELATIONS[rank]] = ([_edge(p) for p in shown],
                                _cursor(last.rank, last.weight, last.pk) if len(pairs) > limit else None)
    return out


def edge_counts(*, project: Project, agent: str, release: str) -> dict[str, int]:
    """Pairs per relation (every relation, zero included), keyed by KEYS."""
    counts = dict(_pairs(project=project, agent=agent, release=release).order_by()
                  .values_list("rank").annotate(n=Count("id")))
    return {KEYS[rel]: counts.get(i, 0) for i, rel in enumerate(RELATIONS)}


def busiest_calls(*, project: Project, agent: str, release: str, limit: int = MAX_CALLS) -> tuple[list[dict], int]:
    """The `limit` calls seen in most runs (a call's runs: the most of any pair it is in), and how
    many calls there are."""
    with read_connection().cursor() as cur:
        cur.execute(
            f"SELECT name, runs, count(*) OVER () FROM ("
            f" SELECT name, max(runs) AS runs FROM ("
            f"  SELECT earlier AS name, runs FROM {CallPair._meta.db_table}"
            f"   WHERE project_id = %(project)s AND agent = %(agent)s AND release = %(release)s"
            f"  UNION ALL SELECT later AS name, runs FROM {CallPair._meta.db_table}"
            f"   WHERE project_id = %(project)s AND agent = %(agent)s AND release = %(release)s) named"
            f" GROUP BY name) called ORDER BY runs DESC, name LIMIT %(limit)s",
            {"project": project.pk, "agent": agent, "release": release, "limit": limit})
        rows = cur.fetchall()
    return [{"name": name, "runs": runs} for name, runs, _ in rows], (rows[0][2] if rows else 0)


def agent_graph(*, project: Project, agent: str, release: str | None = None, relation: str | None = None,
                limit: int = PAGE_ROWS, cursor: str = "") -> dict | None:
    """The agent's learned call graph for a release (its newest learned one by default), one page
    of its edges: None when nothing was learned for this agent (or that release)."""
    profiles = AgentProfile.objects.filter(project=project, agent=agent).exclude(agent="").order_by("-through", "-pk")
    chosen = (profiles.filter(release=release) if release is not None else profiles).first()
    if chosen is None:
        return None
    releases = list(profiles.values_list("release", flat=True)[:MAX_RELEASES])
    calls, calls_total = busiest_calls(project=project, agent=agent, release=chosen.release)
    edges, next_cursor = edge_page(project=project, agent=agent, release=chosen.release, relation=relation,
                                   limit=limit, cursor=cursor)
    return {
        "agent": agent, "release": chosen.release, "releases": releases,
        "releases_total": profiles.count() if len(releases) == MAX_RELEASES else len(releases),
        "runs": chosen.runs, "learned_through": chosen.through, "refreshed_at": chosen.refreshed_at,
        "min_pair_runs": MIN_PAIR_RUNS, "calls": calls, "calls_total": calls_total,
        "edge_counts": edge_counts(project=project, agent=agent, release=chosen.release),
        "edges": edges, "next_cursor": next_cursor,
    }


@login_required
def agent_detail(request, name: str):
    """Every relation's top SECTION_ROWS edges, each table with its "N more"; `relation=` pages
    through one relation's edges (`cursor`, `limit` up to MAX_PAGE_ROWS)."""
    project = _project(request)
    if project is None or not Task.objects.filter(project=project, name=name).exists():
        raise Http404("no such agent")  # an agent of another project is not there
    release = request.GET.get("release") or None
    key = request.GET.get("relation", "")
    if key and key not in BY_KEY:
        raise Http404("no such relation")
    try:
        limit = parse_limit(request.GET, default=PAGE_ROWS, maximum=MAX_PAGE_ROWS)
        graph = agent_graph(project=project, agent=name, release=release, relation=BY_KEY.get(key),
                            limit=limit if key else 0, cursor=request.GET.get("cursor", "") if key else "")
    except FilterError as exc:
        return _page(request, "analysis/agent_detail.html", project, str(exc), agent=name, graph=None, sections=[])
    sections = []
    tops = section_tops(project=project, agent=name, release=graph["release"]) if graph and not key else {}
    for rel in ([BY_KEY[key]] if key else RELATIONS):
        count = graph["edge_counts"][KEYS[rel]] if graph else 0
        if not count:
            continue
        if key:
            edges, next_cursor = graph["edges"], graph["next_cursor"]
        else:
            edges, next_cursor = tops.get(rel, ([], None))
        sections.append({"relation": rel, "key": KEYS[rel], "title": TITLES[rel], "edges": edges, "count": count,
                         "next_cursor": next_cursor, "more": count - len(edges) if not key else None})
    return _page(request, "analysis/agent_detail.html", project, agent=name, graph=graph, sections=sections,
                 relation=key, page_rows=PAGE_ROWS, first_page=not request.GET.get("cursor"))


class AgentEdgeSerializer(serializers.Serializer):
    earlier = serializers.CharField(help_text="the call that ran first: its tool and position among that tool's calls")
    later = serializers.CharField()
    relation = serializers.ChoiceField(choices=RELATIONS)
    verdict = serializers.ChoiceField(choices=["dependent", "independent", "unknown"])
    basis = serializers.CharField(help_text="the evidence the verdict rests on")
    runs = serializers.IntegerField(help_text="runs where both calls ran")
    flow_runs = serializers.IntegerField(help_text="runs where a value of the earlier result reached the later call")
    blind_runs = serializers.IntegerField(help_text="runs where only values common to the agent's runs linked them")
    concurrent_runs = serializers.IntegerField()
    together_runs = serializers.IntegerField(help_text="runs where one model response requested both")
    result_variants = serializers.IntegerField(help_text="distinct results of the earlier call (at most 16 counted)")
    saved_ms = serializers.FloatField(allow_null=True, help_text="mean time running them together would save")


class AgentCallSerializer(serializers.Serializer):
    name = serializers.CharField()
    runs = serializers.IntegerField()


class AgentGraphSerializer(serializers.Serializer):
    agent = serializers.CharField()
    release = serializers.CharField()
    releases = serializers.ListField(child=serializers.CharField(),
                                     help_text=f"the releases learned, newest first (at most {MAX_RELEASES})")
    releases_total = serializers.IntegerField()
    runs = serializers.IntegerField(help_text="runs the graph was learned from")
    learned_through = serializers.DateTimeField(allow_null=True)
    refreshed_at = serializers.DateTimeField()
    min_pair_runs = serializers.IntegerField()
    calls = AgentCallSerializer(many=True, help_text=f"the {MAX_CALLS} calls seen in most runs")
    calls_total = serializers.IntegerField(help_text="every call of the agent's learned pairs")
    edge_counts = serializers.DictField(child=serializers.IntegerField(),
                                        help_text="pairs per relation: " + ", ".join(KEYS.values()))
    edges = AgentEdgeSerializer(many=True, help_text="one page: by relation, then the time running them together "
                                                     "would save (independent pairs) or runs (the others)")
    next_cursor = serializers.CharField(allow_null=True, help_text="the next page's cursor; null on the last page")


class AgentDetailView(APIView):
    @extend_schema(operation_id="agent_detail",
                   parameters=[OpenApiParameter("project", OpenApiTypes.STR, required=False),
                               OpenApiParameter("release", OpenApiTypes.STR, required=False),
                               OpenApiParameter("relation", OpenApiTypes.STR, required=False,
                                                enum=list(KEYS.values()), description="only this relation's edges"),
                               OpenApiParameter("limit", OpenApiTypes.INT, required=False,
                                                description="edges per page: 50 by default, at most 500"),
                               OpenApiParameter("cursor", OpenApiTypes.STR, required=False)],
                   responses=AgentGraphSerializer)
    def get(self, request, name: str):
        params = request.query_params
        key = params.get("relation", "")
        if key and key not in BY_KEY:
            raise ValidationError({"error": f"relation: must be one of {', '.join(KEYS.values())}"})
        try:
            graph = agent_graph(project=request_project(request), agent=name, release=params.get("release"),
                                relation=BY_KEY.get(key), limit=parse_limit(params), cursor=params.get("cursor", ""))
        except FilterError as exc:
            raise ValidationError({"error": str(exc)}) from None
        if graph is None:
            raise NotFound("nothing learned for this agent yet (it needs runs that ended)")
        return Response(AgentGraphSerializer(graph).data)
