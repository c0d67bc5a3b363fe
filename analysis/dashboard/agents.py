"""The Agent page (`/agents/<name>`) and its API (`GET /api/v1/agents/<name>`): an agent's typical
call graph as its recent runs show it (analysis/engine/learned.py), which calls feed which, which
run together, which are independent yet run one after another (the parallelism to win), with the
run counts and the evidence behind every edge.

It reads only the learned tables (AgentProfile, CallPair), a few hundred rows per agent whatever
the number of steps behind them: the workers learn, the page never scans steps."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.dashboard.views import _page, _project
from analysis.engine.detectors.bases import BASES
from analysis.engine.detectors.dependencies import (
    DEPENDENT,
    INDEPENDENT,
    LEARNED_TOGETHER,
    LEARNED_UNKNOWN,
    MIN_PAIR_RUNS,
    UNKNOWN_VERDICT,
    pair_verdict,
)
from analysis.models import AgentProfile, CallPair
from ingest.models import Project, Task

# How the page names an edge (a verdict and, for independent pairs, whether they ran together).
FEEDS, TOGETHER, SERIAL, UNKNOWN = "feeds", "runs together", "independent, run one after another", "unknown"
RELATIONS = [FEEDS, SERIAL, TOGETHER, UNKNOWN]
TITLES = {FEEDS: "Which calls feed which", SERIAL: "Independent, yet run one after another: could run in parallel",
          TOGETHER: "Which run together", UNKNOWN: "Not known yet"}


def relation(pair: CallPair) -> str:
    verdict, basis = pair_verdict(pair)
    if verdict == DEPENDENT:
        return FEEDS
    if verdict == INDEPENDENT:
        return TOGETHER if basis == LEARNED_TOGETHER and pair.concurrent_runs >= pair.runs / 2 else SERIAL
    return UNKNOWN


def agent_graph(*, project: Project, agent: str, release: str | None = None) -> dict | None:
    """The agent's learned call graph for a release (its newest learned one by default); None
    when nothing was learned for this agent."""
    profiles = list(AgentProfile.objects.filter(project=project, agent=agent).exclude(agent="")
                    .order_by("-through", "-pk"))
    if not profiles:
        return None
    chosen = next((p for p in profiles if p.release == release), None) if release is not None else profiles[0]
    if chosen is None:
        return None
    pairs = list(CallPair.objects.filter(project=project, agent=agent, release=chosen.release)
                 .order_by("-runs", "earlier", "later"))
    calls: dict[str, int] = {}
    edges = []
    for p in pairs:
        for name in (p.earlier, p.later):
            calls[name] = max(calls.get(name, 0), p.runs)
        verdict, basis = pair_verdict(p)
        verdict, basis = verdict or UNKNOWN_VERDICT, BASES[basis or LEARNED_UNKNOWN].meaning
        edges.append({
            "earlier": p.earlier, "later": p.later, "relation": relation(p), "verdict": verdict, "basis": basis,
            "runs": p.runs, "flow_runs": p.flow_runs, "blind_runs": p.blind_runs, "concurrent_runs": p.concurrent_runs,
            "together_runs": p.together_runs, "result_variants": p.result_variants,
            "saved_ms": round(p.serial_ms, 1) if verdict == INDEPENDENT else None,
        })
    edges.sort(key=lambda e: (RELATIONS.index(e["relation"]), -e["runs"]))
    return {
        "agent": agent, "release": chosen.release, "releases": [p.release for p in profiles],
        "runs": chosen.runs, "learned_through": chosen.through, "refreshed_at": chosen.refreshed_at,
        "min_pair_runs": MIN_PAIR_RUNS,
        "calls": [{"name": name, "runs": runs} for name, runs in sorted(calls.items(), key=lambda kv: -kv[1])],
        "edges": edges,
    }


@login_required
def agent_detail(request, name: str):
    project = _project(request)
    if project is None or not Task.objects.filter(project=project, name=name).exists():
        raise Http404("no such agent")  # an agent of another project is not there
    release = request.GET.get("release") or None
    graph = agent_graph(project=project, agent=name, release=release)
    sections = [(r, TITLES[r], edges) for r in RELATIONS
                if (edges := [e for e in (graph or {}).get("edges", []) if e["relation"] == r])]
    return _page(request, "analysis/agent_detail.html", project, agent=name, graph=graph, sections=sections)


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
    releases = serializers.ListField(child=serializers.CharField())
    runs = serializers.IntegerField(help_text="runs the graph was learned from")
    learned_through = serializers.DateTimeField(allow_null=True)
    refreshed_at = serializers.DateTimeField()
    min_pair_runs = serializers.IntegerField()
    calls = AgentCallSerializer(many=True)
    edges = AgentEdgeSerializer(many=True)


class AgentDetailView(APIView):
    @extend_schema(operation_id="agent_detail",
                   parameters=[OpenApiParameter("project", OpenApiTypes.STR, required=False),
                               OpenApiParameter("release", OpenApiTypes.STR, required=False)],
                   responses=AgentGraphSerializer)
    def get(self, request, name: str):
        graph = agent_graph(project=request_project(request), agent=name,
                            release=request.query_params.get("release"))
        if graph is None:
            raise NotFound("nothing learned for this agent yet (it needs runs that ended)")
        return Response(AgentGraphSerializer(graph).data)
