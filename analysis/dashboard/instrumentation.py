"""Instrumentation health: per service and instrumentation scope, which of the fields the analysis
reads arrive and on what share of spans, what that leaves the detectors unable to see, and the
switch that fixes it in that library (analysis/dashboard/libraries.py); and, for one task, the
checks its own steps left blind ("repeated calls not checked: …") for the task page.

The page reads only ingest's counters (ingest.models.InstrumentationCount: spans and fields per
hour, service, scope, release, environment and kind), over a bounded window of hours: a week is a
few thousand rows whatever the number of steps behind them. The task's checks read that task's
own steps, one aggregate over the (task, step) index.

Thresholds: a field on fewer than 5 % of the spans it applies to is "not recorded" (`NONE`: a
field a library records it records on nearly every span; a few odd spans are not a switch); on
fewer than 90 % it is "recorded on some" (`MOST`: a failing tool has no result, a final answer
requests no calls, so a healthy share of some fields is below 100 %, never below 90 % of the
spans that could carry them for the fields checked here).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Max, Q, Sum

from agentops.db import read_connection
from analysis.dashboard.libraries import LIBRARIES, Fix, Library, library_of, package_name
from analysis.filters import TaskFilters
from ingest.conventions import ARGS_CONTENT_KEYS, REDACTED_VALUES
from ingest.instrumentation import FIELDS, HTTP_METHOD_KEYS, HTTP_SERVER_KEYS
from ingest.models import InstrumentationCount, Project, Step, Task

NONE = 0.05
MOST = 0.9
DEFAULT_WINDOW = timedelta(days=7)
MAX_WINDOW = timedelta(days=31)
HOUR = timedelta(hours=1)

BLIND, WEAKENED, OK = "blind", "weakened", "ok"
STATUS_ORDER = {BLIND: 0, WEAKENED: 1, OK: 2}
TOOL_KINDS = ("tool",)
# The fields the page shows, their label and the step kinds whose spans they are counted over.
SHOWN = [
    ("model", "model", ("llm",)),
    ("tokens", "tokens", ("llm",)),
    ("ttft", "TTFT", ("llm",)),
    ("responses", "response recorded", ("llm",)),
    ("call_ids", "requested call ids", ("llm",)),
    ("tool_name", "tool name", TOOL_KINDS),
    ("tool_args", "tool arguments", TOOL_KINDS),
    ("tool_result", "tool result", TOOL_KINDS),
    ("tool_call_id", "tool call id", TOOL_KINDS),
    ("session", "session id", None),
    ("server_address", "server.address", ("llm",)),
    ("device", "device or server", ("llm",)),
]
HARDWARE_FIX = Fix("server.address / server.port (or hw.id)",
                   "on each model call: the server that answered, as its metrics name it (docs/otlp.md, \"Which "
                   "server and GPU served a call\")")


@dataclass
class Check:
    check: str          # what cannot be seen: a finding kind, or a page
    status: str         # blind | weakened | ok
    because: list[str] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)

    def worse(self, status: str, because: str, fix: Fix | None) -> None:
        if STATUS_ORDER[status] < STATUS_ORDER[self.status]:
            self.status = status
        self.because.append(because)
        if fix is not None and fix not in self.fixes:
            self.fixes.append(fix)

    def as_dict(self) -> dict:
        return {"check": self.check, "status": self.status, "because": "; ".join(self.because),
                "fixes": [{"switch": f.switch, "text": f.text} for f in self.fixes]}


def _share(count: int, total: int) -> float | None:
    return round(count / total, 4) if total else None


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


# --- the window ------------------------------------------------------------------------------


def window(*, project: Project, filters: TaskFilters, now: datetime | None = None) -> dict:
    """The hours read: the filters' range when given, else the week up to the newest counted hour
    (the data's time, as baselines use: replayed data behaves like live data); never more than
    MAX_WINDOW (the last 31 days of a longer range)."""
    now = now or datetime.now(tz=UTC)
    until = filters.until
    if until is None and filters.since is not None:
        until = now
    if until is None:
        newest = InstrumentationCount.objects.filter(project=project).aggregate(h=Max("hour"))["h"]
        until = (newest + HOUR) if newest else now
    since = filters.since or until - DEFAULT_WINDOW
    clipped = until - since > MAX_WINDOW
    if clipped:
        since = until - MAX_WINDOW
    return {"since": since, "until": until, "clipped": clipped}


# --- the page ----------------------------------------------------------------------------------


SCOPE_KEYS = ("scope_name", "scope_version", "sdk_name", "sdk_language", "sdk_version")
# The most services the page and the API list, and scopes per service listed: past them, the rest
# is one block "other (N services)" (its scopes summed across those services) and one scope row
# "other (N scopes)". PostgreSQL ranks and groups them: whatever the number of services (96,000
# spans, each with its own service, once made a 227 MB page), an answer is at most
# (MAX_SERVICES + 1) × (MAX_SCOPES + 1) scopes.
MAX_SERVICES = 20
MAX_SCOPES = 8


def _rows(*, project: Project, filters: TaskFilters, span: dict, service: str | None = None) -> list[dict]:
    """The counters summed per (service, scope, kind), ranked and cut in SQL: the busiest
    MAX_SERVICES services (service None: the others together, `services` of them) and each one's
    busiest MAX_SCOPES scopes (scope keys None: the others together, `scopes` of them)."""
    table = InstrumentationCount._meta.db_table
    where = ["project_id = %(project)s", "hour >= %(since)s", "hour < %(until)s"]
    params = {"project": project.pk, "since": span["since"].replace(minute=0, second=0, microsecond=0),
              "until": span["until"], "services": MAX_SERVICES, "scopes": MAX_SCOPES}
    for name, value in (("release", filters.release), ("environment", filters.environment), ("service", service)):
        if value is not None and (value or name == "service"):
            where.append(f"{name} = %({name})s")
            params[name] = value
    keys = ", ".join(SCOPE_KEYS)
    sums = ", ".join(f"sum({f})::bigint AS {f}" for f in ("spans", *FIELDS))
    shown = ", ".join(f"CASE WHEN scope_n <= %(scopes)s THEN {k} END AS {k}" for k in SCOPE_KEYS)
    # Window functions over the summed rows, no join (a join of the grouped rows to their ranks
    # planned as a nested loop over 20,000 services: minutes): a service's spans and rank, then
    # the rank of each scope within its group (a service, or the other services together).
    sql = f"""
        WITH counted AS (
            SELECT service, {keys}, kind, {sums} FROM {table} WHERE {" AND ".join(where)}
            GROUP BY service, {keys}, kind),
        by_service AS (
            SELECT *, sum(spans) OVER (PARTITION BY service) AS service_spans FROM counted),
        service_ranked AS (
            SELECT *, dense_rank() OVER (ORDER BY service_spans DESC, service) AS service_n FROM by_service),
        grouped AS (
            SELECT *, service_n > %(services)s AS other,
                   CASE WHEN service_n > %(services)s THEN '' ELSE service END AS service_group,
                   max(service_n) OVER () AS service_count,
                   sum(spans) OVER (PARTITION BY service_n > %(services)s,
                                    CASE WHEN service_n > %(services)s THEN '' ELSE service END, {keys})
                     AS scope_spans
            FROM service_ranked),
        scope_ranked AS (
            SELECT *, dense_rank() OVER (PARTITION BY other, service_group ORDER BY scope_spans DESC, {keys})
                     AS scope_n FROM grouped),
        counted_scopes AS (
            SELECT *, max(scope_n) OVER (PARTITION BY other, service_group) AS scope_count FROM scope_ranked)
        SELECT CASE WHEN other THEN NULL ELSE service_group END AS service, {shown}, kind,
               CASE WHEN scope_n > %(scopes)s THEN scope_count - %(scopes)s ELSE 1 END AS scopes,
               CASE WHEN other THEN service_count - %(services)s ELSE 1 END AS services,
               {", ".join(f"sum({f})::bigint AS {f}" for f in ("spans", *FIELDS))}
        FROM counted_scopes GROUP BY {", ".join(str(i) for i in range(1, 1 + len(SCOPE_KEYS) + 4))}
    """
    with read_connection().cursor() as cur:
        cur.execute(sql, params)
        names = [c.name for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _ai_sdk_share(kinds: dict[str, dict]) -> float:
    """The share of a scope's model and tool spans shaped as the Vercel AI SDK writes them."""
    spans = sum(kinds[k]["spans"] for k in ("llm", "tool") if k in kinds)
    return sum(kinds[k]["ai_sdk_shape"] for k in ("llm", "tool") if k in kinds) / spans if spans else 0.0


def _field_rows(kinds: dict[str, dict]) -> list[dict]:
    out = []
    for name, label, applies in SHOWN:
        over = [k for k in kinds if applies is None or k in applies]
        of = sum(kinds[k]["spans"] for k in over)
        if not of:
            continue
        count = sum(kinds[k][name] for k in over)
        out.append({"field": name, "label": label, "of": "all" if applies is None else "/".join(applies),
                    "count": count, "spans": of, "share": _share(count, of)})
    return out


def _checks(kinds: dict[str, dict], library: Library, *, http_servers: int = 0) -> list[Check]:
    """What the detectors cannot see in this scope's spans, and the switch that fixes it.
    `http_servers`: the service's HTTP client spans that name the server they requested (any
    scope): below a model call that names none, such a span names the server that answered."""
    checks: list[Check] = []
    tools = kinds.get("tool")
    llm = kinds.get("llm")

    def share(kind: dict, name: str) -> float:
        return kind[name] / kind["spans"]

    if tools:
        repeated = Check("repeated_tool_call", OK)
        args = share(tools, "tool_args")
        if args < NONE:
            redacted = tools["args_redacted"] / tools["spans"] >= NONE
            repeated.worse(BLIND, "tool arguments arrive redacted (sent as __REDACTED__ or [REDACTED])" if redacted
                           else "this scope does not record tool arguments", library.args)
        elif args < MOST:
            repeated.worse(WEAKENED, f"tool arguments on {_pct(args)} of tool calls: the others are not compared",
                           library.args)
        checks.append(repeated)
        parallel = Check("parallelizable_calls", OK)
        ids, results = share(tools, "tool_call_id"), share(tools, "tool_result")
        if ids < NONE and results < NONE:
            parallel.worse(BLIND, "no tool-call ids and no tool results: calls run one after another are only "
                                  "possible findings, counted in no total", library.call_ids)
            if library.results != library.call_ids:
                parallel.fixes.append(library.results)
        elif ids < NONE:
            parallel.worse(WEAKENED, "tool spans carry no call ids: which calls one response requested is "
                                     "inferred from timing, independence from recorded results (medium confidence)",
                           _call_id_fix(library, results))
        elif ids < MOST:
            parallel.worse(WEAKENED, f"tool-call ids on {_pct(ids)} of tool calls", library.call_ids)
        if results < NONE <= ids:
            parallel.worse(WEAKENED, "no tool results: a value passed from one call to the next cannot be seen",
                           library.results)
        checks.append(parallel)
    if llm:
        if share(llm, "responses") < NONE:
            parallel = next((c for c in checks if c.check == "parallelizable_calls"), None)
            if parallel is None:
                parallel = Check("parallelizable_calls", OK)
                checks.append(parallel)
            if tools and share(tools, "tool_result") < NONE:
                # A tool span's own call id says which call it answered, not which calls one response
                # asked for together: without the responses, and without results, nothing tells.
                parallel.worse(BLIND, "neither the model's responses nor tool results are recorded: the calls "
                                      "one response requested together cannot be told, so calls run one after "
                                      "another are only possible findings", library.responses)
            else:
                parallel.worse(WEAKENED, "model responses are not recorded: the calls one response requested "
                                         "together (independent by construction) cannot be told", library.responses)
        slow = Check("slow_step", OK)
        growth = Check("context_growth", OK)
        ttft = share(llm, "ttft")
        if ttft < NONE:
            slow.worse(WEAKENED, "no TTFT: slow model calls are judged on their whole duration and output tokens, "
                                 "without the TTFT / time-per-token split", library.ttft)
            growth.worse(WEAKENED, "no TTFT: the prompt's cost is estimated from duration less decode",
                         library.ttft)
        elif ttft < MOST:
            slow.worse(WEAKENED, f"TTFT on {_pct(ttft)} of model calls: the others are judged on their whole "
                                 "duration", library.ttft)
        if share(llm, "tokens") < NONE:
            slow.worse(WEAKENED, "no token counts: a long answer cannot be told from a slow one", None)
            growth.worse(BLIND, "no token counts: a growing prompt cannot be seen", None)
        if share(llm, "model") < NONE:
            slow.worse(WEAKENED, "no model name: model calls share one baseline", None)
        hardware = Check("hardware verdicts", OK)
        if share(llm, "device") < NONE and http_servers < NONE * llm["spans"]:
            hardware.worse(BLIND, "model calls name no server (server.address) or device (hw.id): no verdict can "
                                  "read the serving side, every slow call is 'nominal'", HARDWARE_FIX)
        checks.extend([slow, growth, hardware])
    order = {"repeated_tool_call": 0, "parallelizable_calls": 1, "slow_step": 2, "context_growth": 3}
    return sorted(checks, key=lambda c: (STATUS_ORDER[c.status], order.get(c.check, 9)))


def _call_id_fix(library: Library, results: float) -> Fix:
    """With the results arriving the content switch is on: a library that still sends no call id
    has no switch for it."""
    if results < MOST:
        return library.call_ids
    return Fix("", f"no switch: {library.name or 'this instrumentation'} records no call id on tool spans")


# The library of a row of several scopes summed ("other (N scopes)"): its fixes are each scope's own.
SEVERAL = Library("several", "several libraries",
                  *[Fix("", "each library's own switch: list the service alone (service=) to see its scopes")] * 5)


def instrumentation_health(*, project: Project, filters: TaskFilters, now: datetime | None = None,
                           service: str | None = None) -> dict:
    """Per service, its scopes with the share of spans carrying each field and what is blind or
    weakened as a result; services and scopes by span count, the busiest MAX_SERVICES services
    and MAX_SCOPES scopes of each, the rest summed into one "other" block or row (`service`: that
    service alone)."""
    span = window(project=project, filters=filters, now=now)
    sources: dict[tuple, dict] = {}
    grouped: dict[tuple, tuple[int, int]] = {}  # source → (services, scopes) it sums
    for row in _rows(project=project, filters=filters, span=span, service=service):
        key = (row["service"], *(row[k] for k in SCOPE_KEYS))
        sources.setdefault(key, {})[row["kind"]] = row
        grouped[key] = (row["services"], row["scopes"])
    services: dict[str | None, dict] = {}
    http_servers: dict[str | None, int] = defaultdict(int)  # per service: HTTP client spans naming their server
    for key, kinds in sources.items():
        http_servers[key[0]] += kinds.get("other", {}).get("server_address", 0)
    for key, kinds in sources.items():
        name, scope_name, scope_version, sdk_name, sdk_language, sdk_version = key
        other_services, other_scopes = grouped[key]
        several = scope_name is None  # the service's scopes past MAX_SCOPES, summed
        library = SEVERAL if several else library_of(scope_name, scope_version, sdk_language=sdk_language,
                                                     ai_sdk_share=_ai_sdk_share(kinds))
        spans = sum(k["spans"] for k in kinds.values())
        totals = {f: sum(k[f] for k in kinds.values()) for f in ("session", "serving")}
        checks = _checks(kinds, library, http_servers=http_servers[name])
        entry = services.setdefault(name, {"service": name, "other_services": other_services if name is None else 0,
                                           "spans": 0, "session": 0, "scopes": [], "checks": []})
        entry["spans"] += spans
        entry["session"] += totals["session"]
        entry["scopes"].append({
            "scope": {"name": scope_name or "", "version": scope_version or ""},
            "sdk": {"name": sdk_name or "", "language": sdk_language or "", "version": sdk_version or ""},
            "library": {"key": library.key, "name": library.name,
                        "package": "" if several else package_name(scope_name, library)},
            "other_scopes": other_scopes if several else 0,
            "spans": spans,
            "kinds": {k: v["spans"] for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]["spans"])},
            "unclassified": kinds.get("other", {}).get("spans", 0),
            "server_spans": totals["serving"],
            "fields": _field_rows(kinds),
            "checks": [c.as_dict() for c in checks],
        })
    for entry in services.values():
        # The busiest scopes first, their "other" row last.
        entry["scopes"].sort(key=lambda s: (bool(s["other_scopes"]), -s["spans"]))
        if entry["spans"] and not entry["session"]:  # one span per task is enough to name its session
            main = LIBRARIES.get(entry["scopes"][0]["library"]["key"], SEVERAL)
            entry["checks"].append(Check("sessions", BLIND, ["no span of this service carries a session id: the "
                                                             "Sessions page and the time per user turn stay empty"],
                                         [main.session]).as_dict())
        entry["session_share"] = _share(entry.pop("session"), entry["spans"])
        entry["blind"] = sorted({c["check"] for s in entry["scopes"] for c in s["checks"] if c["status"] == BLIND}
                                | {c["check"] for c in entry["checks"] if c["status"] == BLIND})
        entry["weakened"] = sorted({c["check"] for s in entry["scopes"] for c in s["checks"]
                                    if c["status"] == WEAKENED} - set(entry["blind"]))
    listed = sorted((e for e in services.values() if e["service"] is not None), key=lambda s: (-s["spans"], s["service"]))
    return {"since": span["since"], "until": span["until"], "clipped": span["clipped"],
            "thresholds": {"none": NONE, "most": MOST}, "max_services": MAX_SERVICES, "max_scopes": MAX_SCOPES,
            "services": listed + ([services[None]] if None in services else [])}


# --- one task ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """A check this task's own steps left blind or weakened, with the switch that fixes it."""

    check: str
    status: str
    headline: str
    because: str
    fix: Fix | None
    library: str


# Where the counters say nothing of a task's hours (data stored before they existed): no library,
# and the fix is the Instrumentation page's to give.
UNKNOWN = Library("unknown", "", *[None] * 5)


def _task_libraries(*, task: Task) -> tuple[Library, Library]:
    """The libraries that sent this task's tool spans and its model calls: the scopes of its service
    that counted most spans of each kind over the task's hours (any service when the root span,
    which names it, has not arrived)."""
    if task.started_at is None:
        return UNKNOWN, UNKNOWN
    first = task.started_at.replace(minute=0, second=0, microsecond=0)
    qs = InstrumentationCount.objects.filter(project_id=task.project_id, hour__gte=first,
                                             hour__lte=task.ended_at or task.started_at, kind__in=("tool", "llm"))
    service = (task.attributes or {}).get("service.name")
    if isinstance(service, str):
        qs = qs.filter(service=service)
    best: dict[str, tuple[int, Library]] = {}
    for row in qs.values("scope_name", "scope_version", "sdk_language", "kind").annotate(
            n=Sum("spans"), shaped=Sum("ai_sdk_shape")):
        if row["n"] > best.get(row["kind"], (-1, None))[0]:
            best[row["kind"]] = (row["n"], library_of(row["scope_name"], row["scope_version"],
                                                      sdk_language=row["sdk_language"],
                                                      ai_sdk_share=row["shaped"] / row["n"] if row["n"] else 0.0))
    return best.get("tool", (0, UNKNOWN))[1], best.get("llm", (0, UNKNOWN))[1]


# A tool step whose arguments came as an instrumentation's stand-in for hidden content.
_HIDDEN_ARGS = Q()
for _key in ARGS_CONTENT_KEYS:
    for _value in sorted(REDACTED_VALUES):
        _HIDDEN_ARGS |= Q(attributes__contains={_key: _value})


def task_coverage(*, task: Task) -> list[Note]:
    """The checks this task could not make, where they matter: repeated calls when it made two or
    more tool calls, independent calls likewise, TTFT and hardware when it called a model."""
    tool = Q(kind="tool")
    llm = Q(kind="llm")
    c = Step.objects.filter(project_id=task.project_id, task=task).aggregate(
        tools=Count("id", filter=tool),
        args=Count("id", filter=tool & Q(tool_args__isnull=False)),
        redacted=Count("id", filter=tool & Q(tool_args__isnull=True) & _HIDDEN_ARGS),
        results=Count("id", filter=tool & ~Q(tool_result="")),
        ids=Count("id", filter=tool & ~Q(tool_call_id="")),
        llm=Count("id", filter=llm),
        requested=Count("id", filter=llm & ~Q(tool_call_ids=[])),
        ttft=Count("id", filter=llm & Q(ttft_ms__isnull=False)),
        device=Count("id", filter=llm & ~Q(device="")),
        # HTTP client spans naming their server: below a model call, the server that answered it.
        requests=Count("id", filter=Q(kind="other") & Q(attributes__has_any_keys=list(HTTP_SERVER_KEYS))
                       & Q(attributes__has_any_keys=list(HTTP_METHOD_KEYS))),
    )
    if not c["tools"] and not c["llm"]:
        return []
    tools_by, llm_by = _task_libraries(task=task)
    notes: list[Note] = []
    if c["tools"] >= 2 and c["args"] < c["tools"]:
        if c["args"] == 0:
            why = ("its tool arguments arrive redacted (sent as __REDACTED__ or [REDACTED])" if c["redacted"]
                   else "this service does not record tool arguments")
            notes.append(Note("repeated_tool_call", BLIND, "Repeated calls not checked", why, tools_by.args,
                              tools_by.name))
        else:
            notes.append(Note("repeated_tool_call", WEAKENED, f"Repeated calls checked for {c['args']} of "
                              f"{c['tools']} tool calls", "the others arrive without arguments", tools_by.args,
                              tools_by.name))
    if c["tools"] >= 2:
        no_ids = c["ids"] == 0 or c["requested"] == 0
        if no_ids and c["results"] == 0:
            fix = tools_by.call_ids if c["ids"] == 0 else llm_by.responses
            what = ("no tool-call ids and no tool results are recorded" if c["ids"] == 0 else
                    "neither the model's responses (the calls each requested) nor tool results are recorded")
            notes.append(Note("parallelizable_calls", BLIND, "Independent calls not checked",
                              f"{what}, so calls run one after another are only possible findings", fix,
                              tools_by.name if c["ids"] == 0 else llm_by.name))
        elif no_ids:
            fix, name = ((_call_id_fix(tools_by, c["results"] / c["tools"]), tools_by.name) if c["ids"] == 0
                         else (llm_by.responses, llm_by.name))
            what = "tool spans carry no call ids" if c["ids"] == 0 else "the model's responses are not recorded"
            notes.append(Note("parallelizable_calls", WEAKENED, "Independent calls judged on results only",
                              f"{what}, so which calls one response requested together is not known (medium "
                              "confidence at best)", fix, name))
    if c["llm"] and c["ttft"] == 0:
        notes.append(Note("slow_step", WEAKENED, "Model calls judged on their whole duration",
                          "no TTFT is recorded, so there is no TTFT / time-per-token split", llm_by.ttft, llm_by.name))
    if c["llm"] and c["device"] == 0 and c["requests"] == 0:
        notes.append(Note("hardware", BLIND, "Hardware not checked",
                          "the model calls name no server (server.address) or device (hw.id)", HARDWARE_FIX,
                          llm_by.name))
    return notes
