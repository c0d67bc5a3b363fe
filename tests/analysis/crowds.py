"""Hostile cardinality, inserted in one statement each (never through a 46 s ingest): the learned
pairs of a turn of many calls and the counters of many services, for the tests and the bench of
bounded pages (docs/reliability.md, "Bounded responses")."""

from __future__ import annotations

from django.db import connection

from analysis.engine.detectors.dependencies import (
    BOTH_ORDERS,
    LEARNED_FLOW,
    LEARNED_TOGETHER,
    LEARNED_UNKNOWN,
)
from analysis.models import AgentProfile, CallPair
from ingest.instrumentation import FIELDS
from ingest.models import InstrumentationCount
from tests.analysis.factories import T0, make_task


def insert_wide_turn(project, agent: str, *, calls: int = 1000, release: str = "v1") -> int:
    """The learned pairs of one turn of `calls` calls of `search` (`search#0` … `search#{calls-1}`):
    every ordered pair, calls·(calls−1)/2 of them, spread over the four relations (next
    neighbours feed each other, a third run together, a third are independent yet serial, the rest
    unknown), with a task of the agent and its profile. Returns the number of pairs."""
    make_task(project, f"{agent}-run", name=agent, release=release)
    AgentProfile.objects.create(project=project, agent=agent, release=release, runs=50, through=T0)
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {CallPair._meta.db_table} (project_id, agent, release, earlier, later, runs, flow_runs,"
            " blind_runs, concurrent_runs, together_runs, result_variants, serial_ms, verdict, basis)"
            " SELECT %(project)s, %(agent)s, %(release)s, 'search#' || i, 'search#' || j, r,"
            "  CASE WHEN j = i + 1 THEN r ELSE 0 END, 0, CASE WHEN (i + j) %% 3 = 0 THEN r ELSE 0 END,"
            "  CASE WHEN (i + j) %% 3 = 0 THEN r ELSE 0 END, 16, ((i * j) %% 997) + 0.5,"
            "  CASE WHEN j = i + 1 THEN 'dependent' WHEN (i + j) %% 3 < 2 THEN 'independent' ELSE 'unknown' END,"
            "  CASE WHEN j = i + 1 THEN %(flow)s WHEN (i + j) %% 3 = 0 THEN %(together)s"
            "   WHEN (i + j) %% 3 = 1 THEN %(both_orders)s ELSE %(unknown)s END"
            " FROM generate_series(0, %(n)s - 1) i, generate_series(0, %(n)s - 1) j,"
            "  LATERAL (SELECT 8 + (i * 7 + j) %% 50 AS r) runs WHERE i < j",
            {"project": project.pk, "agent": agent, "release": release, "n": calls, "flow": LEARNED_FLOW,
             "together": LEARNED_TOGETHER, "both_orders": BOTH_ORDERS, "unknown": LEARNED_UNKNOWN})
        return cur.rowcount


def insert_services(project, *, services: int = 20_000, hour=T0) -> None:
    """One hour of counters from `services` services, each with its own instrumentation scope,
    sending model and tool spans (96,000 spans each with its own service made /instrumentation
    list 96,000 blocks, 227 MB)."""
    columns = ", ".join(FIELDS)
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {InstrumentationCount._meta.db_table} (project_id, hour, service, scope_name, scope_version,"
            f" sdk_name, sdk_language, sdk_version, release, environment, kind, spans, {columns})"
            " SELECT %s, %s, 'svc-' || s, 'scope-' || s, '1.0', 'opentelemetry', 'python', '1.45.2', 'v1', 'prod', k,"
            " 1 + s %% 7, " + ", ".join("(s %% 2)" for _ in FIELDS)
            + " FROM generate_series(1, %s) s, unnest(ARRAY['llm', 'tool']) k",
            [project.pk, hour, services])
