"""A Python read client for agentops: the read API as pandas DataFrames and the dashboard's own
charts as Plotly figures, for notebooks and scripts (docs/client.md).

    from agentops.client import Client
    client = Client("http://127.0.0.1:8000", "<a key with the read scope>")
    steps = client.steps(release="v3", kind="tool")        # every matching step, via Parquet
    client.latency(group_by="model")                       # p50/p90/p95/p99 per model
    client.figure("latency", "task_ecdf", release="v3").show()

It imports nothing from Django or the rest of agentops (only the standard library, pandas,
pyarrow and plotly), so the file also works on its own, copied next to a notebook. Bulk reads
(tasks, steps, findings, samples) stream the Parquet export to a temporary file; list endpoints
are read page after page, following their cursors. Errors are exceptions that say what the
server said: AuthenticationError (401), PermissionDenied (403), NotFound (404), BadRequest (400),
RateLimited (429) and Unavailable (503) carry `retry_after` seconds when the server sent one."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode, urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

import pandas as pd

from ingest.ids import to_segment

__all__ = ["AgentopsError", "AuthenticationError", "BadRequest", "Client", "NotFound", "PermissionDenied",
           "RateLimited", "Unavailable"]

# The dashboard's chart JSON endpoints and the chart each returns when none is named.
FIGURES = {
    "overview": ("/charts/overview.json", "percentiles"),  # volume, errors, percentiles, findings, budget
    "latency": ("/charts/latency.json", "task_histogram"),  # task_histogram, task_ecdf, group_histogram, group_ecdf
    "devices": ("/charts/devices.json", "ttft"),  # ttft, tpot, telemetry, serving
    "waterfall": ("/tasks/{task_id}/waterfall.json", "waterfall"),  # waterfall, budget
}
# Release comparison tables `compare(..., table=)` can return.
COMPARE_TABLES = ("tasks", "summary", "steps", "tools", "models", "kinds", "findings", "budget", "whatif",
                  "cost", "cost_steps")
SPOOL_BYTES = 64 * 2**20  # an export larger than this goes to a temporary file on disk


class AgentopsError(Exception):
    """The server refused a request. `status` is the HTTP status, `message` what it said."""

    def __init__(self, status: int, message: str, *, url: str = "", retry_after: float | None = None):
        self.status, self.message, self.url, self.retry_after = status, message, url, retry_after
        wait = f" (retry after {retry_after:g} s)" if retry_after is not None else ""
        super().__init__(f"{status}: {message}{wait}" + (f" [{url}]" if url else ""))


class BadRequest(AgentopsError):
    """400: a parameter was wrong; the message names it."""


class AuthenticationError(AgentopsError):
    """401: no key, or a key the server does not know (revoked, mistyped)."""


class PermissionDenied(AgentopsError):
    """403: the key lacks the `read` scope (an ingest-only key)."""


class NotFound(AgentopsError):
    """404: no such task, or a project this key may not see."""


class RateLimited(AgentopsError):
    """429: too many requests for this key; wait `retry_after` seconds."""


class Unavailable(AgentopsError):
    """503: the server or its database is unavailable for now; wait `retry_after` seconds."""


_ERRORS = {400: BadRequest, 401: AuthenticationError, 403: PermissionDenied, 404: NotFound, 429: RateLimited,
           503: Unavailable}


def _clean(params: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters: None dropped, datetimes as RFC 3339, booleans as 1/0, the rest as text."""
    out = {}
    for key, value in params.items():
        if value is None:
            continue
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        elif isinstance(value, bool):
            value = "1" if value else "0"
        out[key] = str(value)
    return out


class Client:
    """The read API of one agentops server, as one project's key sees it.

    `base_url`: e.g. "http://127.0.0.1:8000"; `key`: a project key with the `read` scope
    (`manage.py create_key PROJECT --scope read`); `timeout`: seconds to wait for the server to
    start answering a request (a long export keeps streaming after that); `retries`: how many
    times to wait out a 429 or 503 (its Retry-After) before raising RateLimited / Unavailable."""

    def __init__(self, base_url: str, key: str, *, timeout: float = 300.0, retries: int = 0):
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.timeout = timeout
        self.retries = retries

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, key={self.key[:12]}…)"

    # --- HTTP ------------------------------------------------------------------------------------

    def _open(self, path: str, params: Mapping[str, Any] | None = None):
        query = urlencode(_clean(params or {}))
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        request = Request(url, headers={"Authorization": f"Bearer {self.key}", "Accept-Encoding": "identity",
                                        "User-Agent": "agentops.client"})
        for attempt in range(self.retries + 1):
            try:
                response = _opener.open(request, timeout=self.timeout)
            except HTTPError as exc:
                error = self._error(exc, url)
                if isinstance(error, RateLimited | Unavailable) and attempt < self.retries:
                    time.sleep(error.retry_after if error.retry_after is not None else 2 ** attempt)
                    continue
                raise error from None
            except URLError as exc:
                raise AgentopsError(0, f"cannot reach {self.base_url}: {exc.reason}", url=url) from None
            if response.geturl().split("?")[0].endswith("/login/"):  # a page that wants a browser login
                raise AuthenticationError(401, "the server asked for a browser login: is the key right?", url=url)
            return response
        raise AssertionError("unreachable")

    @staticmethod
    def _error(exc: HTTPError, url: str) -> AgentopsError:
        body = exc.read(65536).decode("utf-8", "replace")
        try:
            data = json.loads(body)
            message = data.get("error") or data.get("detail") or body if isinstance(data, dict) else body
        except json.JSONDecodeError:
            message = body.strip()[:500] or exc.reason
        if isinstance(message, dict):
            message = json.dumps(message)
        retry = exc.headers.get("Retry-After")
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        cls = _ERRORS.get(exc.code, AgentopsError)
        return cls(exc.code, str(message), url=url, retry_after=retry_after)

    def get_json(self, path: str, **params) -> Any:
        """GET one JSON document of the read API (e.g. "/api/v1/tasks/<id>")."""
        with self._open(path, params) as response:
            return json.loads(response.read())

    def pages(self, path: str, **params) -> Iterator[dict]:
        """Every result of a cursor-paginated list endpoint ("/api/v1/tasks", "/api/v1/findings"),
        page after page."""
        cursor = None
        while True:
            page = self.get_json(path, **params, **({"cursor": cursor} if cursor else {}))
            yield from page["results"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def records(self, path: str, **params) -> pd.DataFrame:
        """A list endpoint, every page, as a DataFrame (timestamps parsed)."""
        frame = pd.DataFrame(list(self.pages(path, **params)))
        return _parse_times(frame)

    # --- bulk reads: the Parquet export ------------------------------------------------------------

    def export(self, entity: str, **filters) -> pd.DataFrame:
        """`GET /api/v1/export/<entity>?format=parquet&<filters>` as a DataFrame. `entity`: tasks,
        steps, findings or samples; filters: release, environment, name (task name), status,
        session_id, device, finding, q, min_duration_ms, max_duration_ms, since, until, range, kind,
        model (samples: device, since, until, range)."""
        with self._open(f"/api/v1/export/{entity}", {**filters, "format": "parquet"}) as response, \
                tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            shutil.copyfileobj(response, spool, 1 << 20)
            spool.seek(0)
            return pd.read_parquet(spool)

    def save(self, entity: str, path: str, *, format: str = "parquet", **filters) -> int:
        """Write an export to a file as the server sends it (parquet, csv or jsonl); returns bytes."""
        with self._open(f"/api/v1/export/{entity}", {**filters, "format": format}) as response, \
                open(path, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
            return out.tell()

    def tasks(self, **filters) -> pd.DataFrame:
        """Every task matching the filters: one row each, with cost_usd and its findings' summary."""
        return self.export("tasks", **filters)

    def steps(self, **filters) -> pd.DataFrame:
        """Every step of the matching tasks (narrowed by kind, model, device), with its task's
        name, release and environment, and the cost of LLM steps."""
        return self.export("steps", **filters)

    def findings(self, **filters) -> pd.DataFrame:
        """Every finding of the matching tasks (`finding=` keeps one kind)."""
        return self.export("findings", **filters)

    def samples(self, **filters) -> pd.DataFrame:
        """Device telemetry samples (device, since, until)."""
        return self.export("samples", **filters)

    # --- aggregates ---------------------------------------------------------------------------------

    def latency(self, group_by: str = "task", **filters) -> pd.DataFrame:
        """count, p50, p90, p95, p99 and max duration (ms) per group: task, kind, name, tool, model
        or device, as the Latency page shows them (the same selector)."""
        body = self.get_json("/api/v1/latency", group_by=group_by, **filters)
        return pd.DataFrame(body["results"], columns=["group", "count", "p50", "p90", "p95", "p99", "max"])

    def compare(self, a: str, b: str, *, table: str = "tasks", **filters) -> pd.DataFrame:
        """The release comparison of `b` against baseline `a`, one of its tables as a DataFrame:
        tasks (per task name, percentiles of A and B and their deltas, p-value, verdict), summary,
        steps / tools / models / kinds (where the time changed), findings, budget, whatif, cost
        (per task and per LLM call for A and B) or cost_steps (per LLM step group). The whole
        report is in `frame.attrs["report"]`."""
        if table not in COMPARE_TABLES:
            raise ValueError(f"table: must be one of {', '.join(COMPARE_TABLES)}")
        report = self.get_json("/api/v1/releases/compare", a=a, b=b, **filters)
        frame = pd.DataFrame(_compare_rows(report, table))
        frame.attrs["report"] = report
        return frame

    # --- the dashboard's figures --------------------------------------------------------------------

    def figures(self, page: str, **params) -> dict:
        """Every figure of a dashboard page's chart JSON, as plotly.graph_objects.Figure: page is
        overview, latency, devices or waterfall (with task_id=)."""
        import plotly.graph_objects as go

        if page not in FIGURES:
            raise ValueError(f"page: must be one of {', '.join(FIGURES)}")
        path = FIGURES[page][0]
        if "{task_id}" in path:
            task_id = params.pop("task_id", None)
            if not task_id:
                raise ValueError("task_id: required for the waterfall")
            path = path.format(task_id=_segment(task_id))
        data = self.get_json(path, **params)
        return {name: go.Figure(figure) for name, figure in data.items() if isinstance(figure, dict)
                and "data" in figure}

    def figure(self, page: str, chart: str | None = None, **params):
        """One of the dashboard's own figures as a plotly.graph_objects.Figure, e.g.
        `figure("latency", "task_ecdf", release="v3")` or `figure("waterfall", task_id="t-1")`."""
        figures = self.figures(page, **params)
        name = chart or FIGURES[page][1]
        if name not in figures:
            raise ValueError(f"chart: {page} has {', '.join(sorted(figures))}")
        return figures[name]


def _parse_times(frame: pd.DataFrame) -> pd.DataFrame:
    for column in frame.columns:
        if column.endswith("_at") and (frame[column].dtype == object
                                       or pd.api.types.is_string_dtype(frame[column].dtype)):
            frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


def _compare_rows(report: dict, table: str) -> list[dict]:
    if table == "tasks":
        rows = []
        for row in [*report["tasks"], {**report["overall"], "name": "(all tasks)"}]:
            flat = {k: v for k, v in row.items() if k not in ("percentiles", "warnings")}
            for p in row["percentiles"]:
                q = f"p{p['q']}"
                flat.update({f"{q}_a_ms": p["a_ms"], f"{q}_b_ms": p["b_ms"], f"{q}_delta_ms": p["delta_ms"],
                             f"{q}_delta_pct": p["delta_pct"], f"{q}_ci_low_ms": p["ci_low_ms"],
                             f"{q}_ci_high_ms": p["ci_high_ms"]})
            rows.append(flat)
        return rows
    if table in ("steps", "tools", "models", "kinds"):
        return report["attribution"][table]
    cost = report.get("cost") or {}
    if table == "cost":
        return [{"release": cost[side]["release"], "side": side, **{k: v for k, v in cost[side].items()
                                                                       if k != "release"}}
                for side in ("a", "b") if side in cost]
    if table == "cost_steps":
        return cost.get("steps", [])
    return report[table]


def _segment(value) -> str:
    """An id as one path segment of the dashboard's URLs (any character, "/" included)."""
    return quote(to_segment(str(value)), safe="")


class _SameOriginAuth(HTTPRedirectHandler):
    """Follow a redirect, but carry the key only to the same scheme, host and port: urllib
    sends every header on, so a redirect to another host (or down to http) would hand it over."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            before, after = urlsplit(req.full_url), urlsplit(new.full_url)
            if (before.scheme, before.hostname, before.port) != (after.scheme, after.hostname, after.port):
                new.headers.pop("Authorization", None)
                new.unredirected_hdrs.pop("Authorization", None)
        return new


_opener = build_opener(_SameOriginAuth)
