"""Step 3 of the Citus browser check: every page, export, read API endpoint and MCP tool of each
project, in headless Chromium (Debian's /usr/bin/chromium through Playwright), against a running
stack (contrib/citus-check/README.md).

    python contrib/citus-check/browser_check.py http://127.0.0.1:18731

Reads the projects and keys from .data/citus-check/env (setup.sh). A check passes when its
status is the expected one (200, or the documented 403/404), the page logged no console error
and raised no page error, and no request it made failed or answered >= 400 (the expected
status of the page itself aside). Writes every check to /tmp/browser-check/results.json, the time
window of each to .data/citus-check/timeline.jsonl (to attribute the coordinator's logged
statements to pages: routing.py), screenshots of a few pages to /tmp/browser-check/.
Exit status 1 when any check failed.
"""
from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import requests
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = Path("/tmp/browser-check")
TIMELINE = ROOT / ".data" / "citus-check" / "timeline.jsonl"
WAIT_MS = 60_000
KNOWN: list[dict] = []  # problems seen and understood (see visit), listed apart
PROJECTS = ["sim-a", "sim-b", "corpus-a", "recorded"]
ONLY = [p for p in os.environ.get("CHECK_PROJECTS", "").split(",") if p]  # a trial on fewer
SHOTS = {("sim-a", "overview"), ("sim-a", "task"), ("sim-a", "step panel"), ("corpus-a", "devices"),
         ("recorded", "live task"), ("sim-b", "release compare"), ("recorded", "session"),
         ("corpus-a", "compare typical"), ("sim-b", "latency")}



def until(page, js: str) -> None:
    """Poll an expression from here (Playwright's wait_for_function evaluates its string in the
    page, which the pages' CSP, script-src 'self', refuses at times)."""
    deadline = time.time() + WAIT_MS / 1000
    while not page.evaluate(js):
        if time.time() > deadline:
            raise TimeoutError(f"never true: {js}")
        page.wait_for_timeout(100)

def env() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".data" / "citus-check" / "env").read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            values[k] = v
    return values


def seg(value: str) -> str:
    """An id as one path segment, as the pages write it."""
    return quote(value.replace("~", "~7E").replace("/", "~2F"), safe="")


class Checker:
    def __init__(self, base: str, page, who: str):
        self.base, self.page, self.who = base, page, who
        self.results: list[dict] = []
        self.events: list[str] = []
        page.on("pageerror", lambda e: self.events.append(f"pageerror: {e}"))
        page.on("console", lambda m: m.type == "error" and self.events.append(
            f"console: {m.text} ({(m.location or {}).get('url', '')})"))
        page.on("requestfailed", lambda r: self.events.append(f"requestfailed: {r.url} {r.failure}"))
        page.on("response", lambda r: r.status >= 400 and self.events.append(f"http {r.status}: {r.url}"))

    def _record(self, project, label, url, status, expect, started, problems, extra=None):
        ok = status == expect and not problems
        row = {"who": self.who, "project": project, "label": label, "url": url, "status": status,
               "expect": expect, "ok": ok, "problems": problems, **(extra or {})}
        self.results.append(row)
        with TIMELINE.open("a") as f:
            f.write(json.dumps({"start": started, "end": time.time(), "who": self.who, "project": project,
                                "label": label, "url": url}) + "\n")
        mark = "ok  " if ok else "FAIL"
        print(f"{mark} {self.who:<6} {project:<9} {label:<28} {status} {url}"
              + ("" if ok else f"  {problems}"), flush=True)
        return ok

    def _expected_noise(self, expect: int, url: str, events: list[str]) -> list[str]:
        """The page's own expected 4xx shows as an http line and a console 'Failed to load
        resource'; nothing else is excused."""
        if expect < 400:
            return events
        return [e for e in events if not (e.startswith(f"http {expect}: ") and e.endswith(url))
                and not (e.startswith("console: Failed to load resource") and f"{expect}" in e)]

    def visit(self, project: str, label: str, path: str, *, expect: int = 200, ready: str | None = None,
              scroll: bool = False, then=None) -> bool:
        url = self.base + path
        self.events.clear()
        started = time.time()
        status, problems = None, []
        try:
            response = self.page.goto(url, wait_until="load", timeout=WAIT_MS)
            status = response.status if response else None
            if scroll and status == 200:  # charts drawn only when the reader comes near them
                self.page.wait_for_load_state("networkidle", timeout=WAIT_MS)
                height = self.page.evaluate("document.body.scrollHeight")
                for y in range(0, height + 900, 600):
                    self.page.evaluate(f"window.scrollTo(0, {y}); window.dispatchEvent(new Event('scroll'))")
                    self.page.wait_for_timeout(150)
                self.page.evaluate("window.scrollTo(0, 0)")
            if ready and status == 200:
                self.page.wait_for_selector(ready, timeout=WAIT_MS, state="attached")
            self.page.wait_for_load_state("networkidle", timeout=WAIT_MS)
            if then and status == 200:
                then(self.page)
                self.page.wait_for_load_state("networkidle", timeout=WAIT_MS)
            if self.page.evaluate("document.body.getAttribute('data-charts-ready') === 'error'"):
                problems.append("data-charts-ready=error")
        except Exception as exc:  # noqa: BLE001 - a check that could not finish is a failure
            problems.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        problems += self._expected_noise(expect, url, list(self.events))
        known = [p for p in problems if p.endswith("/favicon.ico)") or p.endswith("/favicon.ico")]
        if expect >= 400 and known:
            # Django's own error pages link no icon (every other page says rel="icon" href="data:,"),
            # so the browser's first one asks /favicon.ico, which is a 404: reported, not failed.
            problems = [p for p in problems if p not in known]
            KNOWN.append({"who": self.who, "project": project, "label": label, "url": path, "events": known})
        if (project, label) in SHOTS and self.who == "root":
            self.page.screenshot(path=str(OUT / f"{project}-{label.replace(' ', '-')}.png"), full_page=True)
        return self._record(project, label, path, status, expect, started, problems)

    def fetch(self, project: str, label: str, path: str, *, expect: int = 200, check=None, headers=None,
              method: str = "GET", data=None) -> requests.Response | None:
        """A request outside the page (exports, API, MCP): with the browser's session, or with
        the key given in headers (then through requests)."""
        url = self.base + path
        started = time.time()
        problems: list[str] = []
        body = None
        try:
            if headers:
                r = requests.request(method, url, headers=headers, data=data, timeout=120)
                status, body = r.status_code, r.content
            else:
                r = self.page.request.fetch(url, method=method, data=data, timeout=WAIT_MS)
                status, body = r.status, r.body()
            if check and status == expect:
                problem = check(body)
                if problem:
                    problems.append(problem)
        except Exception as exc:  # noqa: BLE001
            status = None
            problems.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        self._record(project, label, path, status, expect, started, problems,
                     {"bytes": len(body) if body is not None else None})
        return body


def check_csv(body: bytes) -> str | None:
    text = body.decode()
    return None if text.count("\n") >= 2 else f"csv of {text.count(chr(10))} lines"


def check_jsonl(body: bytes) -> str | None:
    lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
    return None if lines else "no JSON lines"


def check_parquet(body: bytes) -> str | None:
    import pyarrow.parquet as pq

    if body[:4] != b"PAR1":
        return "not parquet"
    return None if pq.read_table(io.BytesIO(body)).num_rows > 0 else "parquet of 0 rows"


def check_json(body: bytes) -> str | None:
    json.loads(body)
    return None


def log_in(page, base: str, username: str, password: str) -> None:
    page.goto(base + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/login" not in page.url, f"login of {username} failed"


def facts(base: str, name: str, key: str) -> dict:
    """Ids to visit, from the project's own read API."""
    h = {"Authorization": f"Bearer {key}"}

    def get(path, **params):
        r = requests.get(f"{base}{path}", params=params, headers=h, timeout=120)
        r.raise_for_status()
        return r.json()

    slow = get("/api/v1/tasks", sort="-duration_ms", limit=50)["results"]
    findings = get("/api/v1/findings", limit=50)["results"]
    task = findings[0]["task_id"] if findings else slow[0]["task_id"]
    other = next(t["task_id"] for t in slow if t["task_id"] != task and not t.get("running"))
    detail = get(f"/api/v1/tasks/{seg(task)}")
    steps = detail.get("steps") or []
    step = next((s["step_id"] for s in steps if s.get("kind") in ("llm", "tool")), steps[0]["step_id"] if steps else None)
    tool = next((s.get("tool_name") or s.get("name") for s in steps if s.get("kind") == "tool"), "")
    model = next((s.get("model") for s in steps if s.get("model")), "")
    device = next((s.get("device") for s in steps if s.get("device")), "")
    sessions = get("/api/v1/sessions", limit=5)["results"]
    releases = [r["name"] for r in get("/api/v1/releases")["results"]]
    return {"task": task, "other": other, "step": step, "tool": tool, "model": model, "device": device,
            "agent": detail.get("name") or slow[0].get("name"), "session": sessions[0]["session_id"] if sessions else None,
            "releases": [r for r in releases if r], "finding": findings[0]["kind"] if findings else None,
            "task_attrs": detail.get("attributes") or {}}


def project_pages(c: Checker, name: str, f: dict, e: dict, var: str) -> None:
    p = f"project={quote(name)}"
    t, o = seg(f["task"]), seg(f["other"])
    c.visit(name, "overview", f"/?{p}", scroll=True)
    c.visit(name, "overview 24h", f"/?{p}&range=24h", scroll=True)
    c.visit(name, "overview 30d", f"/?{p}&range=30d", scroll=True)
    c.fetch(name, "overview charts json", f"/charts/overview.json?{p}", check=check_json)
    c.fetch(name, "overview cost json", f"/charts/overview-cost.json?{p}", check=check_json)
    c.fetch(name, "turn time json", f"/charts/turn-time.json?{p}", check=check_json)
    c.visit(name, "tasks", f"/tasks?{p}")
    filters = {"sort -duration": "sort=-duration_ms", "status error": "status=error", "range 7d": "range=7d",
               "search q": f"q={quote(f['tool'] or 'chat')}", "tool": f"tool={quote(f['tool'])}" if f["tool"] else None,
               "model": f"model={quote(f['model'])}" if f["model"] else None,
               "model pattern": "model=*", "device": f"device={quote(f['device'])}" if f["device"] else None,
               "finding": f"finding={f['finding']}" if f["finding"] else None, "min_step_ms": "min_step_ms=1000",
               "step_kind+min": "step_kind=tool&min_step_ms=200", "error": "error=1", "running": "running=1",
               "duration band": "min_duration_ms=1000&max_duration_ms=60000&sort=-duration_ms",
               "name": f"name={quote(f['agent'])}" if f["agent"] else None,
               "release": f"release={quote(f['releases'][0])}" if f["releases"] else None,
               "session": f"session_id={quote(f['session'])}" if f["session"] else None}
    if f["task_attrs"]:
        k, v = next(iter(f["task_attrs"].items()))
        if isinstance(v, str | int | float):
            filters["attr"] = f"attr={quote(f'{k}:{v}')}"
    for label, q in filters.items():
        if q:
            c.visit(name, f"tasks {label}", f"/tasks?{p}&{q}")
    c.fetch(name, "search values model", f"/api/v1/search/values?{p}&field=model&q=", check=check_json)
    c.fetch(name, "search values tool", f"/api/v1/search/values?{p}&field=tool&q=", check=check_json)

    def step_panel(page):
        page.focus("#chart-waterfall")
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("Enter")
        page.wait_for_function("document.getElementById('step-title').textContent.length > 0", timeout=WAIT_MS)
        page.wait_for_selector("#step-fields tr", timeout=WAIT_MS)

    def find_box(page):
        status = "document.getElementById('find-status').textContent"
        page.fill("#find-steps", f["tool"] or "chat")
        page.click("#find-form button[type=submit]")
        until(page, f"{status}.includes(' of ') || {status} === 'no step matches'")
        page.fill("#find-steps", "no such thing anywhere")
        page.click("#find-form button[type=submit]")
        until(page, f"{status} === 'no step matches'")

    ready = "body[data-waterfall-ready='1']"
    c.visit(name, "task", f"/tasks/{t}?{p}", ready=ready)
    c.visit(name, "step panel", f"/tasks/{t}?{p}", ready=ready, then=step_panel)
    c.visit(name, "find box", f"/tasks/{t}?{p}", ready=ready, then=find_box)
    c.visit(name, "other task", f"/tasks/{o}?{p}", ready=ready)
    c.fetch(name, "waterfall json", f"/tasks/{t}/waterfall.json?{p}", check=check_json)
    if f["step"]:
        c.fetch(name, "step json", f"/tasks/{t}/steps/{seg(f['step'])}.json?{p}", check=check_json)
    c.fetch(name, "find json", f"/tasks/{t}/search.json?{p}&q={quote(f['tool'] or 'chat')}", check=check_json)
    c.fetch(name, "live json", f"/tasks/{t}/live.json?{p}", check=check_json)
    cr = "body[data-compare-ready='1']"
    c.visit(name, "compare other", f"/tasks/{t}/compare?{p}&against={o}", ready=cr)
    c.visit(name, "compare typical", f"/tasks/{t}/compare?{p}&against=typical", ready=cr)
    c.fetch(name, "compare json", f"/tasks/{t}/compare.json?{p}&against=typical", check=check_json)
    c.visit(name, "compare pick", f"/compare?{p}&task={t}&task={o}")
    c.visit(name, "sessions", f"/sessions?{p}")
    if f["session"]:
        c.visit(name, "session", f"/sessions/{seg(f['session'])}?{p}", ready="body[data-session-ready='1']")
    c.visit(name, "latency", f"/latency?{p}", ready="body[data-charts-ready='1']")
    for group in ("tool", "model", "device", "session", "name", "kind"):
        c.visit(name, f"latency by {group}", f"/latency?{p}&group_by={group}", ready="body[data-charts-ready='1']")
    c.fetch(name, "latency json", f"/charts/latency.json?{p}", check=check_json)
    c.visit(name, "devices", f"/devices?{p}", ready="body[data-charts-ready]", scroll=True)
    if f["device"]:
        c.visit(name, "device", f"/devices?{p}&device={quote(f['device'])}", ready="body[data-charts-ready]", scroll=True)
    c.fetch(name, "devices json", f"/charts/devices.json?{p}", check=check_json)
    c.visit(name, "releases", f"/releases?{p}")
    if len(f["releases"]) >= 2:
        a, b = f["releases"][-1], f["releases"][0]
        c.visit(name, "release compare", f"/releases/compare?{p}&a={quote(a)}&b={quote(b)}")
    if f["agent"]:
        c.visit(name, "agent", f"/agents/{seg(f['agent'])}?{p}")
    c.visit(name, "instrumentation", f"/instrumentation?{p}")
    # alerts: list, create one, its page and chart, edit it
    c.visit(name, "alerts", f"/alerts/?{p}")
    created: dict = {}

    def create_rule(page):
        page.fill("input[name=name]", f"check {name} p95")
        page.select_option("select[name=metric]", index=0)
        page.fill("input[name=threshold]", "5000")
        page.fill("input[name=window_minutes]", "60")
        with page.expect_navigation():
            page.click("#alert-form button[type=submit]")
        created["url"] = page.url
        assert "/alerts/" in page.url and "/new" not in page.url, page.url

    c.visit(name, "alert create", f"/alerts/new?{p}", then=create_rule)
    if created.get("url"):
        rule = created["url"].split("/alerts/")[1].split("/")[0]
        c.visit(name, "alert", f"/alerts/{rule}/?{p}")

        def edit_rule(page):
            page.fill("input[name=threshold]", "7000")
            with page.expect_navigation():
                page.click("#alert-form button[type=submit]")
            assert "/edit" not in page.url, page.url

        c.visit(name, "alert edit", f"/alerts/{rule}/edit?{p}", then=edit_rule)
        c.fetch(name, "alert chart", f"/alerts/{rule}/chart?{p}")
        c.fetch(name, "api alert rule", f"/api/v1/alerts/rules/{rule}?{p}", check=check_json)
    # settings
    c.visit(name, "settings", f"/settings/?{p}")
    c.visit(name, "settings keys", f"/projects/{seg(name)}/settings/")
    c.visit(name, "settings members", f"/projects/{seg(name)}/settings/members")
    c.visit(name, "settings retention", f"/projects/{seg(name)}/settings/retention")
    c.visit(name, "settings audit", f"/projects/{seg(name)}/settings/audit")
    c.visit(name, "settings prices", f"/settings/prices?{p}")
    # exports: the page's CSVs, the export API in each format, with the session and with the read key
    c.fetch(name, "tasks.csv", f"/tasks.csv?{p}", check=check_csv)
    c.fetch(name, "findings.csv", f"/findings.csv?{p}", check=check_csv)
    key = {"Authorization": f"Bearer {e[var + '_READ']}"}
    checks = {"csv": check_csv, "jsonl": check_jsonl, "parquet": check_parquet}
    for entity in ("tasks", "steps", "findings", "samples"):
        for fmt, chk in checks.items():
            if entity == "samples" and name == "recorded":
                chk = None  # the recorded families send no device telemetry
            c.fetch(name, f"export {entity} {fmt}", f"/api/v1/export/{entity}?{p}&format={fmt}", check=chk)
        c.fetch(name, f"export {entity} key", f"/api/v1/export/{entity}?format=csv", headers=key)
    c.fetch(name, "export tasks filtered", f"/api/v1/export/tasks?{p}&format=jsonl&min_step_ms=500&status=ok")
    # the read API, with the session and with the key
    api = ["/api/v1/tasks", "/api/v1/tasks?sort=-duration_ms&limit=5", f"/api/v1/tasks?q={quote(f['tool'] or 'chat')}",
           f"/api/v1/tasks/{t}", f"/api/v1/tasks/{t}/diff?against=typical", f"/api/v1/tasks/{t}/diff?against={o}",
           "/api/v1/sessions", "/api/v1/findings", "/api/v1/latency", "/api/v1/latency?group_by=tool",
           "/api/v1/status", "/api/v1/releases", "/api/v1/instrumentation", "/api/v1/alerts/rules",
           "/api/v1/alerts/events"]
    if f["session"]:
        api.append(f"/api/v1/sessions/{seg(f['session'])}")
    if f["agent"]:
        api.append(f"/api/v1/agents/{seg(f['agent'])}")
    if len(f["releases"]) >= 2:
        api.append(f"/api/v1/releases/compare?a={quote(f['releases'][-1])}&b={quote(f['releases'][0])}")
    for path in api:
        sep = "&" if "?" in path else "?"
        c.fetch(name, "api session", f"{path}{sep}{p}", check=check_json)
        c.fetch(name, "api key", path, headers=key, check=check_json)


def mcp(c: Checker, name: str, key: str) -> None:
    from bench.mcp_tools import run

    started = time.time()
    try:
        with ThreadPoolExecutor(1) as pool:
            rows = pool.submit(asyncio.run, run(c.base + "/mcp", key, 1)).result()
        for label, _first, _median, chars in rows:
            c._record(name, f"mcp {label}", "/mcp", 200, 200, started, [] if chars else ["empty answer"])
    except BaseException as exc:  # noqa: BLE001 - SystemExit names the tool that failed
        c._record(name, "mcp", "/mcp", None, 200, started, [f"{type(exc).__name__}: {exc}"])


def member_checks(c: Checker, e: dict, f_all: dict) -> None:
    """A plain member of sim-a: its pages 200, its settings 403, every other project 404."""
    own = "sim-a"
    f = f_all[own]
    c.visit(own, "member overview", f"/?project={own}")
    c.visit(own, "member tasks", f"/tasks?project={own}")
    c.visit(own, "member task", f"/tasks/{seg(f['task'])}?project={own}", ready="body[data-waterfall-ready='1']")
    c.visit(own, "member settings", f"/projects/{own}/settings/", expect=403)
    c.visit(own, "member overview no project", "/")
    for other in PROJECTS[1:]:
        fo = f_all[other]
        p = f"project={quote(other)}"
        t = seg(fo["task"])
        for label, path in [("overview", f"/?{p}"), ("tasks", f"/tasks?{p}"), ("task", f"/tasks/{t}?{p}"),
                            ("compare", f"/tasks/{t}/compare?{p}&against=typical"), ("sessions", f"/sessions?{p}"),
                            ("latency", f"/latency?{p}"), ("devices", f"/devices?{p}"), ("releases", f"/releases?{p}"),
                            ("instrumentation", f"/instrumentation?{p}"), ("alerts", f"/alerts/?{p}"),
                            ("settings", f"/projects/{seg(other)}/settings/")]:
            c.visit(other, f"non-member {label}", path, expect=404)
        for label, path in [("waterfall json", f"/tasks/{t}/waterfall.json?{p}"), ("tasks.csv", f"/tasks.csv?{p}"),
                            ("api tasks", f"/api/v1/tasks?{p}"), ("api task", f"/api/v1/tasks/{t}?{p}"),
                            ("export", f"/api/v1/export/tasks?{p}&format=csv")]:
            c.fetch(other, f"non-member {label}", path, expect=404)
        # the task id of another project under the member's own project: no such task
        if fo["task"] != f["task"]:
            c.fetch(other, "non-member task as own", f"/api/v1/tasks/{t}?project={own}", expect=404)
        # sim-a's read key asking for another project
        c.fetch(other, "other key", f"/api/v1/tasks?{p}", expect=404,
                headers={"Authorization": f"Bearer {e['SIM_A_READ']}"})


def live_check(c: Checker, e: dict) -> None:
    """A running task of `recorded`: 4 steps and no task event (its end not reported), opened;
    4 more steps arrive while it is open and the page, polling live.json, draws them; then the
    task's end arrives and the page marks it ended."""
    from datetime import UTC, datetime, timedelta

    name, task = "recorded", f"live-{int(time.time())}"
    start = (datetime.now(UTC) - timedelta(seconds=15)).isoformat()
    feed = [sys.executable, str(ROOT / "contrib" / "citus-check" / "feed_files.py"), "live", c.base,
            e["RECORDED_INGEST"], task, start]
    subprocess.run([*feed, "4"], check=True)

    def grows(page):
        page.wait_for_selector("#running-marker", timeout=WAIT_MS)
        until(page, "document.body.dataset.taskRunning === '1'")
        subprocess.run([*feed, "8"], check=True)
        until(page, "document.getElementById('waterfall-status').textContent.includes('of 8 steps')")
        c.fetch(name, "live json running", f"/tasks/{task}/live.json?project={name}",
                check=lambda b: None if json.loads(b)["running"] and json.loads(b)["steps"] == 8 else f"{b[:200]!r}")
        subprocess.run([*feed, "8", "end"], check=True)
        until(page, "document.body.dataset.taskRunning === '0'")

    c.visit(name, "live task", f"/tasks/{task}?project={name}", ready="body[data-waterfall-ready='1']", then=grows)
    c.fetch(name, "live json ended", f"/tasks/{task}/live.json?project={name}",
            check=lambda b: None if not json.loads(b)["running"] else f"{b[:200]!r}")
    c.visit(name, "tasks running", f"/tasks?project={name}&running=1")


def main(base: str) -> int:
    OUT.mkdir(exist_ok=True)
    TIMELINE.parent.mkdir(parents=True, exist_ok=True)
    e = env()
    f_all = {}
    for name in PROJECTS:
        var = name.upper().replace("-", "_")
        f_all[name] = facts(base, name, e[var + "_READ"])
        print(name, json.dumps({k: v for k, v in f_all[name].items() if k != "task_attrs"}), flush=True)
    results: list[dict] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        log_in(page, base, "root", "root-pw-123")
        c = Checker(base, page, "root")
        for name in ONLY or PROJECTS:
            var = name.upper().replace("-", "_")
            project_pages(c, name, f_all[name], e, var)
            mcp(c, name, e[var + "_READ"])
        live_check(c, e)
        c.visit("-", "api docs", "/api/docs", ready="body[data-docs-ready='1']")
        c.fetch("-", "api schema", "/api/schema/")
        results += c.results
        ctx.close()
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        page = ctx.new_page()
        log_in(page, base, "member", "member-pw-123")
        m = Checker(base, page, "member")
        member_checks(m, e, f_all)
        results += m.results
        browser.close()
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results)} checks, {len(results) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        print("FAILED", r["who"], r["project"], r["label"], r["url"], r["status"], r["problems"])
    for k in KNOWN:
        print("KNOWN", k["who"], k["project"], k["label"], k["url"], k["events"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18731"))
