"""The servers and devices page's reads: devices grouped by the host they run on (an inference
server and its GPUs), one colour per device, the hardware verdicts grouped into incidents, the
server's own account of its calls next to the client's, and the telemetry the small multiples
draw. Every read is bounded: telemetry from the sample rollups (raw samples only at the edges of
a range), verdict groups paginated in SQL, the server-side breakdown over each server's latest
calls (docs/ui.md, "Servers and devices")."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.urls import reverse

from agentops.db import read_connection
from analysis import rollups
from analysis.dashboard.aggregates import HARDWARE_FINDINGS
from analysis.dashboard.selectors import filtered_findings
from analysis.filters import TaskFilters
from analysis.measures import percentile_cont_sql, tpot_expr
from analysis.models import COUNTED_FINDING_SQL
from analysis.units import fmt_ms
from ingest.conventions import ROLE_GPU, host_of_server
from ingest.models import Device, Project, Step

# Ten distinct colours first (the dashboard's palette: the servers, which share the ECDFs and
# the breakdown, get these), then ten more for GPUs, none close to the first ten; past twenty they
# repeat. A host's GPUs share charts and take consecutive colours: distinct within a host.
DEVICE_PALETTE = ["#3556d8", "#e07b00", "#0f9d76", "#c4320a", "#7a4cc2", "#8a6d00", "#d6457a", "#2a9fd6",
                  "#5b6b00", "#6b4f3a", "#1b9e9e", "#b0478f", "#84cc16", "#111827", "#f59e0b", "#9ca3af",
                  "#be123c", "#0e7490", "#6d28d9", "#14532d"]
# Hosts per page of the small multiples (each a row of six charts).
HOSTS_PER_PAGE = 6
# Verdict groups per page.
GROUPS_PER_PAGE = 15
# Calls on one server with the same verdict at most this far apart are one incident: a queue
# that builds and drains within minutes is one event to a person, not forty rows.
INCIDENT_GAP = timedelta(minutes=5)
# The server-side breakdown reads each server's newest steps in range, this many at most (client
# calls and server spans together): a bounded index walk whatever the range.
SERVING_WINDOW = 2000
# Telemetry bucket widths (s) and how many buckets a chart aims at: enough to see a 5-minute
# incident in a day, few enough for 36 small charts.
BUCKET_LADDER = [15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
                 7 * 86400]
BUCKETS_TARGET = 200
# Longer ranges get hour-wide buckets at least, from the rollups (a 4-day range at 200 buckets
# would read every raw sample: 18 devices scraped every 30 s send 207,000 in 4 days).
RAW_SPAN = timedelta(hours=48)
# The time around an incident a link opens: enough to see the telemetry before and after it.
MOMENT_PAD = timedelta(minutes=10)
# A finding's step is looked up in the weeks after its task started (runtime partition pruning).
_STEP_WITHIN = "interval '7 days'"


def page_filters(filters: TaskFilters) -> TaskFilters:
    """The filters as this page applies them to steps and findings: `device` picks which
    devices are shown, it does not narrow the tasks (which would also send every read past the
    rollups to raw rows)."""
    return replace(filters, device="")


# --- devices and hosts ------------------------------------------------------------------------


@dataclass(frozen=True)
class HostGroup:
    """The devices of one host: its inference servers and its GPUs (accelerator cards)."""
    host: str
    servers: tuple[Device, ...]
    gpus: tuple[Device, ...]

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.servers + self.gpus

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def title(self) -> str:
        parts = [self.host]
        if self.servers:
            parts.append(", ".join(device_label(d.name) for d in self.servers))
        if self.gpus:
            kinds = sorted({d.hardware for d in self.gpus if d.hardware})
            parts.append(f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}"
                         + (f" ({', '.join(kinds)})" if kinds else ""))
        return " · ".join(parts)


def host_of(device: Device) -> str:
    """The host a device runs on: as ingest recorded it, else read off a server key
    (`host:port`), else the device's own name (a device nothing says more of)."""
    return device.host or host_of_server(device.name) or device.name


def is_gpu(device: Device) -> bool:
    return device.role == ROLE_GPU


def host_groups(devices: Iterable[Device]) -> list[HostGroup]:
    """Devices by host, hosts by name; servers (and devices of no known role) before GPUs."""
    by_host: dict[str, list[Device]] = defaultdict(list)
    for d in devices:
        by_host[host_of(d)].append(d)
    out = []
    for host in sorted(by_host):
        members = sorted(by_host[host], key=lambda d: d.name)
        out.append(HostGroup(host, tuple(d for d in members if not is_gpu(d)), tuple(d for d in members if is_gpu(d))))
    return out


def device_colors(devices: Iterable[Device]) -> dict[str, str]:
    """One colour per device for every chart and table of the page, from all the project's
    devices, so a device keeps its colour whatever the filter: servers first, then GPUs by host."""
    ordered = sorted(devices, key=lambda d: (is_gpu(d), host_of(d) if is_gpu(d) else "", d.name))
    return {d.name: DEVICE_PALETTE[i % len(DEVICE_PALETTE)] for i, d in enumerate(ordered)}


def device_label(name: str) -> str:
    """A name short enough for a legend: a GPU's UUID (`GPU-12ab3800-4f1d-…`) by its first
    block, anything else cut at 40 characters."""
    if name.startswith("GPU-") and len(name) > 20:
        return name[:12] + "…"
    return name if len(name) <= 40 else name[:39] + "…"


def selected_groups(groups: Sequence[HostGroup], *, vendor: str = "", device: str = "") -> list[HostGroup]:
    """The host groups the page shows: the one holding `device`; those with a device of `vendor`."""
    if device:
        return [g for g in groups if device in g.names]
    if vendor:
        return [g for g in groups if any(d.vendor == vendor for d in g.devices)]
    return list(groups)


# --- verdicts, grouped ------------------------------------------------------------------------

VERDICT_PHRASES = {"hardware_queueing": "queued on", "hardware_throttling": "slowed by throttling on",
                   "hardware_kv_cache_pressure": "slowed by a full KV cache on"}
# Where a finding's evidence names the device whose readings convicted it (verdicts.py signals).
_CULPRIT_SQL = {
    "hardware_queueing": ("queue_depth", "utilization"),
    "hardware_throttling": ("clock_reasons", "clock_ratio", "temperature_c", "power_w"),
    "hardware_kv_cache_pressure": ("preempted", "kv_cache_usage"),
}


@dataclass(frozen=True)
class VerdictGroup:
    """Calls with one hardware verdict on one server, each within INCIDENT_GAP of the last."""
    kind: str
    device: str
    culprits: tuple[str, ...]   # the devices whose readings said so, when not the server itself
    calls: int
    tasks: int
    start: datetime             # first call's start
    end: datetime               # last call's end
    wasted_ms: float
    seen: str                   # what was seen during the worst call
    worst_task: str
    first_task_at: datetime
    last_task_at: datetime

    @property
    def text(self) -> str:
        """"11 calls queued on vllm-2 between Nov 30 14:02 and 14:09: 15.5 s"."""
        calls = f"{self.calls} call{'s' if self.calls != 1 else ''}"
        where = device_label(self.device)
        others = [device_label(c) for c in self.culprits if c != self.device]
        if others:
            where += f" ({', '.join(others)})"
        return f"{calls} {VERDICT_PHRASES.get(self.kind, self.kind)} {where} {when(self.start, self.end)}: {fmt_ms(self.wasted_ms)}"

    @property
    def verdict(self) -> str:
        return self.kind.removeprefix("hardware_")


def when(start: datetime, end: datetime) -> str:
    """"at Nov 30 14:02 UTC", "between Nov 30 14:02 and 14:09 UTC", or with both dates."""
    a, b = start.strftime("%b %d %H:%M"), end.strftime("%H:%M")
    if start.strftime("%Y%m%d%H%M") == end.strftime("%Y%m%d%H%M"):
        return f"at {a} UTC"
    if start.date() != end.date():
        b = end.strftime("%b %d %H:%M")
    return f"between {a} and {b} UTC"


def _culprit_sql() -> str:
    def source(metric: str) -> str:
        return f"f.evidence #>> '{{signals,{metric},source}}'"

    cases = " ".join(f"WHEN f.kind = '{kind}' THEN coalesce({', '.join(source(m) for m in metrics)})"
                     for kind, metrics in _CULPRIT_SQL.items())
    return f"CASE {cases} END"


def _findings_sql(*, project: Project, filters: TaskFilters, devices: Sequence[str] | None) -> tuple[str, list]:
    """The counted hardware findings of the filtered tasks with their server, the device whose
    readings convicted them and their step's interval (one index probe per finding)."""
    qs = (filtered_findings(project=project, filters=filters).filter(kind__in=HARDWARE_FINDINGS)
          .values("pk"))
    sql, params = qs.query.sql_with_params()
    device_clause, device_params = "", []
    if devices is not None:
        device_clause, device_params = " AND x.device = ANY(%s)", [list(devices)]
    return f"""
        SELECT x.* FROM (
            SELECT f.id, f.kind, f.task_id, f.wasted_ms, f.task_started_at,
                   coalesce(nullif(f.evidence ->> 'device', ''), s.device) AS device, {_culprit_sql()} AS culprit,
                   s.started_at, s.ended_at
            FROM analysis_finding f
            CROSS JOIN LATERAL (SELECT s.started_at, s.ended_at, s.device FROM ingest_step s
                                WHERE s.project_id = %s AND s.task_id = f.task_id AND s.step_id = f.step_ids[1]
                                  AND s.started_at >= f.task_started_at AND s.started_at < f.task_started_at + {_STEP_WITHIN}
                                LIMIT 1) s
            WHERE f.project_id = %s AND f.id IN ({sql}) AND f.{COUNTED_FINDING_SQL}) x
        WHERE x.device <> ''{device_clause}""", [project.pk, project.pk, *params, *device_params]


def verdict_groups(*, project: Project, filters: TaskFilters, devices: Sequence[str] | None = None,
                   limit: int = GROUPS_PER_PAGE, offset: int = 0) -> tuple[list[VerdictGroup], dict]:
    """One page of verdict groups, most wasted time first, and the totals over all of them
    (groups, calls, wasted ms, and `per_device`: the findings naming each server or resting on
    each GPU's readings). Findings are grouped in SQL, in one pass: calls of one kind on one
    server whose start is within INCIDENT_GAP of the latest end before it form one group."""
    findings, params = _findings_sql(project=project, filters=page_filters(filters), devices=devices)
    sql = f"""
        WITH f AS ({findings}),
        b AS (SELECT f.*, CASE WHEN f.started_at <= max(f.ended_at) OVER w + %s THEN 0 ELSE 1 END AS brk
              FROM f WINDOW w AS (PARTITION BY f.kind, f.device ORDER BY f.started_at, f.id
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)),
        n AS (SELECT b.*, sum(b.brk) OVER (PARTITION BY b.kind, b.device ORDER BY b.started_at, b.id) AS grp FROM b),
        g AS (SELECT kind, device, grp, count(*) AS calls, count(DISTINCT task_id) AS tasks,
                     min(started_at) AS lo, max(ended_at) AS hi, sum(wasted_ms) AS wasted,
                     (array_agg(id ORDER BY wasted_ms DESC, id))[1] AS worst,
                     array_agg(DISTINCT culprit) FILTER (WHERE culprit IS NOT NULL) AS culprits,
                     min(task_started_at) AS first_task, max(task_started_at) AS last_task
              FROM n GROUP BY kind, device, grp)
        SELECT g.kind, g.device, coalesce(g.culprits, '{{}}'), g.calls, g.tasks, g.lo, g.hi, g.wasted,
               (SELECT string_agg(e, '; ') FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(w.evidence -> 'evidence')
                        = 'array' THEN w.evidence -> 'evidence' ELSE '[]'::jsonb END) e),
               t.task_id, g.first_task, g.last_task,
               count(*) OVER (), sum(g.calls) OVER (), sum(g.wasted) OVER (),
               (SELECT jsonb_object_agg(d, n)::text FROM (
                    SELECT d, count(*) AS n FROM f CROSS JOIN LATERAL unnest(ARRAY[f.device, nullif(f.culprit, f.device)]) d
                    WHERE d IS NOT NULL GROUP BY d) c)
        FROM g JOIN analysis_finding w ON w.id = g.worst AND w.project_id = %s
               JOIN ingest_task t ON t.id = w.task_id AND t.project_id = w.project_id
        ORDER BY g.wasted DESC, g.lo, g.device, g.kind LIMIT %s OFFSET %s"""
    with read_connection().cursor() as cursor:
        cursor.execute(sql, [*params, INCIDENT_GAP, project.pk, limit, offset])
        rows = cursor.fetchall()
    groups = [VerdictGroup(kind, device, tuple(sorted(culprits)), calls, tasks, lo, hi, wasted or 0.0,
                           seen or "", worst_task,
                           first_task, last_task)
              for kind, device, culprits, calls, tasks, lo, hi, wasted, seen, worst_task, first_task, last_task, *_
              in rows]
    totals = {"groups": rows[0][-4], "calls": int(rows[0][-3]), "wasted_ms": rows[0][-2],
              "per_device": json.loads(rows[0][-1] or "{}")} if rows else {
        "groups": 0, "calls": 0, "wasted_ms": 0.0, "per_device": {}}
    if not rows and offset:  # past the last page: the totals are still wanted
        _, totals = verdict_groups(project=project, filters=filters, devices=devices, limit=1, offset=0)
    return groups, totals


# --- server side vs client side ---------------------------------------------------------------

# One side's figure: p50, p95 and the mean over the calls.
_SERVING_FIGURES = {"queue": "queue_ms", "prefill": "prefill_ms", "decode": "decode_ms", "server_ttft": "server_ttft",
                    "e2e": "e2e_ms", "client_ttft": "client_ttft", "client_ms": "client_ms",
                    "client_tpot": "client_tpot", "server_tpot": "server_tpot", "outside": "outside_ms"}


@dataclass(frozen=True)
class ServingRow:
    """A server's account of its latest calls next to the client's account of the same calls."""
    server: str
    calls: int                  # calls with the server's timings
    paired: int                 # of which the client's call was found (TTFT, TPOT, duration)
    first: datetime
    last: datetime
    figures: dict[str, tuple[float | None, float | None, float | None]]  # name → (p50, p95, mean)

    def p50(self, name: str) -> float | None:
        return self.figures[name][0]

    def p95(self, name: str) -> float | None:
        return self.figures[name][1]

    def mean(self, name: str) -> float | None:
        return self.figures[name][2]


def _number(doc: str, key: str) -> str:
    """A number from the server span's timings, NULL when it is missing or not a number (an
    attribute a sender set by hand)."""
    return f"CASE WHEN jsonb_typeof({doc} -> '{key}') = 'number' THEN ({doc} ->> '{key}')::float8 END"


def serving_breakdown(*, project: Project, filters: TaskFilters, servers: Sequence[str],
                      window: int = SERVING_WINDOW) -> list[ServingRow]:
    """Per server, over its newest `window` steps in range: the server's queue, prefill, decode,
    TTFT and end-to-end time (its request span, vLLM `llm_request`) and, for the same calls, the
    client's TTFT, TPOT and duration, and the time outside the server (client − server end to
    end: network, client, proxy). Server TPOT is decode time per output token after the first:
    TPOT's definition with the server's decode time for the client's (duration − TTFT).

    Only server spans under a client call count (kind `other`): their attributes are read, a
    client call's (its prompts, possibly large) never are."""
    if not servers:
        return []
    filters = page_filters(filters)
    clauses, params = [], []
    if filters.since is not None:
        clauses.append("s.started_at >= %s")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("s.started_at < %s")
        params.append(filters.until)
    for column in ("release", "environment"):
        if getattr(filters, column):
            clauses.append(f"EXISTS (SELECT 1 FROM ingest_task t WHERE t.project_id = s.project_id AND t.id = s.task_id"
                           f" AND t.{column} = %s)")
            params.append(getattr(filters, column))
    extra = "".join(f" AND {c}" for c in clauses)
    doc = "w.sv"
    figures = ", ".join(
        f"{percentile_cont_sql(column, (0.5, 0.95))}, avg({column})"
        for column in _SERVING_FIGURES.values())
    sql = f"""
        WITH w AS (
            SELECT d.name AS server, x.* FROM unnest(%s::text[]) d(name) CROSS JOIN LATERAL (
                SELECT s.task_id, s.parent_step_id, s.started_at,
                       CASE WHEN s.kind = 'other' AND s.parent_step_id <> '' THEN s.attributes -> 'agentops.serving' END AS sv
                FROM ingest_step s
                WHERE s.project_id = %s AND s.device = d.name AND s.device <> ''{extra}
                ORDER BY s.started_at DESC LIMIT %s) x),
        p AS (
            SELECT w.server, w.started_at,
                   {_number(doc, 'queue_ms')} AS queue_ms, {_number(doc, 'prefill_ms')} AS prefill_ms,
                   {_number(doc, 'decode_ms')} AS decode_ms, {_number(doc, 'ttft_ms')} AS server_ttft,
                   {_number(doc, 'e2e_ms')} AS e2e_ms,
                   c.ttft_ms AS client_ttft, c.duration_ms AS client_ms, {tpot_expr('c.duration_ms', 'c.ttft_ms', 'c.output_tokens')} AS client_tpot,
                   {tpot_expr(_number(doc, 'decode_ms'), '0', 'c.output_tokens')} AS server_tpot,
                   c.duration_ms - {_number(doc, 'e2e_ms')} AS outside_ms, c.duration_ms IS NOT NULL AS paired
            FROM w LEFT JOIN LATERAL (
                SELECT c.ttft_ms, c.duration_ms, c.output_tokens FROM ingest_step c
                WHERE c.project_id = %s AND c.task_id = w.task_id AND c.step_id = w.parent_step_id AND c.kind = 'llm'
                  AND c.started_at <= w.started_at AND c.started_at > w.started_at - interval '1 hour' LIMIT 1) c ON true
            WHERE jsonb_typeof(w.sv) = 'object')
        SELECT server, count(*), count(*) FILTER (WHERE paired), min(started_at), max(started_at), {figures}
        FROM p GROUP BY server"""
    with read_connection().cursor() as cursor:
        cursor.execute(sql, [list(servers), project.pk, *params, window, project.pk])
        rows = cursor.fetchall()
    out = {}
    for server, calls, paired, first, last, *values in rows:
        found = {}
        for i, name in enumerate(_SERVING_FIGURES):
            quantiles, mean = values[2 * i], values[2 * i + 1]
            found[name] = (*(quantiles or (None, None)), mean)
        out[server] = ServingRow(server, calls, paired, first, last, found)
    return [out[s] for s in servers if s in out]


# --- telemetry --------------------------------------------------------------------------------


def bucket_for(span: timedelta) -> int:
    """The smallest ladder width giving at most BUCKETS_TARGET buckets over `span`, and at least
    an hour past RAW_SPAN: hour buckets read the rollups, shorter ones every raw sample."""
    for width in BUCKET_LADDER:
        if span > RAW_SPAN and width < 3600:
            continue
        if span.total_seconds() / width <= BUCKETS_TARGET:
            return width
    return BUCKET_LADDER[-1]


def telemetry_span(*, project: Project, filters: TaskFilters, devices: Sequence[str]) -> tuple[datetime, datetime] | None:
    """The range the charts cover: the filter's, else the devices' first to last sample (one
    index probe per device and end)."""
    start, end = filters.since, filters.until
    if start is not None and end is not None:
        return start, end
    if not devices:
        return None
    with read_connection().cursor() as cursor:
        cursor.execute("""
            SELECT min(lo), max(hi) FROM unnest(%s::text[]) d(name)
            CROSS JOIN LATERAL (SELECT ts AS lo FROM ingest_resourcesample WHERE project_id = %s AND device = d.name
                                ORDER BY ts LIMIT 1) a
            CROSS JOIN LATERAL (SELECT ts AS hi FROM ingest_resourcesample WHERE project_id = %s AND device = d.name
                                ORDER BY ts DESC LIMIT 1) b""", [list(devices), project.pk, project.pk])
        first, last = cursor.fetchone()
    if first is None:
        return None
    start = start or first
    end = end or last + timedelta(seconds=1)
    return (start, end) if start < end else None


def telemetry(*, project: Project, filters: TaskFilters, devices: Sequence[str]) -> tuple[list[rollups.SampleBucket], int]:
    """The devices' readings per bucket over the page's range, and the bucket width (s)."""
    span = telemetry_span(project=project, filters=filters, devices=devices)
    if span is None:
        return [], 0
    width = bucket_for(span[1] - span[0])
    buckets = rollups.sample_buckets(project_id=project.pk, devices=devices, since=span[0], until=span[1],
                             bucket_seconds=width, rolled_up_until=rollups.watermark(project_id=project.pk))
    return buckets, width


# --- links to a moment ------------------------------------------------------------------------


def moment_url(params: dict[str, str], *, device: str, start: datetime, end: datetime) -> str:
    """The Devices page at `device`'s host around [start, end], that window shaded on every
    chart. `params`: the global filters to keep (the time range is replaced)."""
    pad = max(MOMENT_PAD, (end - start) / 2)
    query = {k: v for k, v in params.items() if k not in ("range", "since", "until")}
    query.update(device=device, since=(start - pad).isoformat(), until=(end + pad).isoformat(),
                 mark_from=start.isoformat(), mark_to=end.isoformat())
    return reverse("devices") + "?" + urlencode(query) + "#telemetry"


def finding_device_urls(params: dict[str, str], *, task, findings) -> dict[int, str]:
    """Per hardware finding of a task: the Devices page at its server over its step's interval
    (one query for the findings' steps)."""
    wanted = {f.step_ids[0]: f for f in findings if f.kind in HARDWARE_FINDINGS and f.step_ids}
    if not wanted:
        return {}
    steps = {s.step_id: s for s in Step.objects.filter(project_id=task.project_id, task=task, step_id__in=list(wanted))
             .only("step_id", "started_at", "ended_at", "device")}
    out = {}
    for step_id, f in wanted.items():
        step = steps.get(step_id)
        device = f.evidence.get("device") if isinstance(f.evidence, dict) else ""
        device = device or (step.device if step else "")
        if step is not None and isinstance(device, str) and device:
            out[f.pk] = moment_url(params, device=device, start=step.started_at, end=step.ended_at)
    return out
