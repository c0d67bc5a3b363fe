"""Step 4 of the Citus browser check: which statements the product ran on the coordinator asked
more than one shard, and where they came from.

    python contrib/citus-check/routing.py [--since 'YYYY-MM-DD HH:MM:SS'] [--explain]

Reads the coordinator's log (.data/citus/coordinator/server.log), where setup.sh turned on
`citus.multi_task_query_log_level = log` (Citus logs "multi-task query about to be executed"
for every statement it splits into more than one task, i.e. asks more than one shard) and
`log_min_error_statement = log` (the statement follows as STATEMENT). Each such statement is
attributed to its process by its backend pid (connmap.py's record: web, celery-worker,
celery-periodic, celery-beat, a command), and a web statement to the browser check that was
running at that moment (timeline.jsonl, browser_check.py). Statements are grouped by shape
(literals replaced by ?), with their count, sources and one example; --explain also EXPLAINs the
example and reports the Task Count. Writes /tmp/browser-check/routing.json.
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / ".data" / "citus" / "coordinator" / "server.log"
CONNMAP = ROOT / ".data" / "citus-check" / "connmap.jsonl"
TIMELINES = ROOT / ".data" / "citus-check"  # timeline*.jsonl: every run of browser_check.py
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC \[(\d+)\] (.*?) ?(LOG|STATEMENT|HINT|ERROR|WARNING|DETAIL|CONTEXT|NOTICE|FATAL):  (.*)$")


def entries(path: Path):
    current = None
    with path.open(errors="replace") as fh:
        for line in fh:
            m = LINE.match(line)
            if m:
                if current:
                    yield current
                ts, pid, app, level, text = m.groups()
                current = {"ts": datetime.strptime(ts, "%Y-%m-%d %H:%M:%S.%f").timestamp(), "pid": int(pid),
                           "app": app, "level": level, "text": text}
            elif current:
                current["text"] += "\n" + line.rstrip("\n")
    if current:
        yield current


def multi_task_statements(path: Path, since: float):
    pending: dict[int, dict] = {}
    for e in entries(path):
        if e["ts"] < since:
            continue
        if e["level"] == "LOG" and e["text"].startswith("multi-task query about to be executed"):
            pending[e["pid"]] = e
        elif e["level"] == "STATEMENT" and e["pid"] in pending:
            first = pending.pop(e["pid"])
            yield {"ts": first["ts"], "pid": e["pid"], "app": e["app"], "sql": e["text"].strip()}


def shape(sql: str) -> str:
    s = re.sub(r"'(?:[^']|'')*'", "?", sql)
    s = re.sub(r"\b\d+(\.\d+)?\b", "?", s)
    s = re.sub(r"\(\s*\?(\s*,\s*\?)*\s*\)", "(?…)", s)
    s = re.sub(r"ARRAY\[[^\]]*\]", "ARRAY[…]", s)
    return re.sub(r"\s+", " ", s).strip()


class Roles:
    def __init__(self, path: Path):
        self.by_pid: dict[int, list[tuple[float, str]]] = defaultdict(list)
        if path.exists():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                self.by_pid[r["backend"]].append((r.get("t", 0.0), r["role"]))
        for v in self.by_pid.values():
            v.sort()

    def role(self, pid: int, ts: float) -> str:
        seen = self.by_pid.get(pid)
        if not seen:
            return "?"
        # the connection seen last before the statement (connmap samples every 2 s: allow it)
        best = seen[0][1]
        for t, role in seen:
            if t <= ts + 3:
                best = role
        return best


class Timeline:
    def __init__(self, folder: Path):
        self.rows = [json.loads(line) for path in folder.glob("timeline*.jsonl") for line in path.read_text().splitlines()]
        self.rows.sort(key=lambda r: r["start"])
        self.starts = [r["start"] for r in self.rows]

    def at(self, ts: float) -> dict | None:
        i = bisect.bisect_right(self.starts, ts) - 1
        if i >= 0 and ts <= self.rows[i]["end"] + 1.0:
            return self.rows[i]
        return None


def executed_statements(path: Path, since: float):
    """Every statement logged with its duration (log_min_duration_statement = 0): the simple
    protocol's text, or an extended-protocol execute with its parameters put back in."""
    pending: dict[int, dict] = {}
    for e in entries(path):
        if e["ts"] < since:
            continue
        if e["level"] == "LOG" and e["text"].startswith("duration: "):
            m = re.match(r"duration: [\d.]+ ms  (statement|execute [^:]*): (.*)", e["text"], re.S)
            if not m:
                continue
            if m.group(1) == "statement":
                yield {"ts": e["ts"], "pid": e["pid"], "app": e["app"], "sql": m.group(2).strip()}
            else:
                pending[e["pid"]] = {"ts": e["ts"], "pid": e["pid"], "app": e["app"], "sql": m.group(2).strip()}
        elif e["level"] == "DETAIL" and e["pid"] in pending and e["text"].startswith("Parameters: "):
            st = pending.pop(e["pid"])
            params = dict(re.findall(r"(\$\d+) = ((?:'(?:[^']|'')*')|NULL)", e["text"]))
            st["sql"] = re.sub(r"\$\d+", lambda m, params=params: params.get(m.group(0), m.group(0)), st["sql"])
            yield st
        elif e["pid"] in pending and e["level"] == "LOG":
            yield pending.pop(e["pid"])  # an execute without parameters


def explain_all(since: float, roles: Roles, timeline: Timeline) -> list[dict]:
    """EXPLAIN one example of every distinct read or write shape the web ran during a browser
    check: a cross-check of the multi-task log (the Task Count of each distributed scan)."""
    seen: dict[str, dict] = {}
    for st in executed_statements(LOG, since):
        if roles.role(st["pid"], st["ts"]) != "web" or st["app"] in ("citus-check", "connmap", "psql"):
            continue
        check = timeline.at(st["ts"])
        if not check or not st["sql"].lstrip().upper().startswith(("SELECT", "WITH", "UPDATE", "DELETE", "INSERT")):
            continue
        key = shape(st["sql"])
        if key not in seen:
            seen[key] = {"shape": key[:400], "example": st["sql"], "source": f"{check['project']} {check['label']} {check['url']}"}
    wide = []
    for row in seen.values():
        counts = explain(row["example"])
        row["task_counts"] = counts
        if isinstance(counts, str) or any(n > 1 for n in counts):
            wide.append(row)
    print(f"{len(seen)} distinct statement shapes the web ran during the checks EXPLAINed; "
          f"{len(wide)} asked more than one shard or could not be EXPLAINed")
    for row in wide:
        print(f"  {row['task_counts']} {row['source']}\n     {row['shape'][:300]}")
    return list(seen.values())


def explain(sql: str) -> list[int] | str:
    import psycopg

    sys.path.insert(0, str(ROOT))
    from agentops import citus

    try:
        with psycopg.connect(citus.url(ROOT / ".data"), autocommit=True, application_name="citus-check") as conn:
            conn.execute("SET citus.enable_repartition_joins = off")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())
        return [int(line.split(":", 1)[1]) for line in plan.splitlines() if "Task Count:" in line]
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--since", default=None, help="UTC time, 'YYYY-MM-DD HH:MM:SS'")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--explain-all", action="store_true",
                        help="also EXPLAIN every distinct statement the web ran during a browser check")
    args = parser.parse_args()
    since = datetime.strptime(args.since, "%Y-%m-%d %H:%M:%S").timestamp() if args.since else 0.0
    roles, timeline = Roles(CONNMAP), Timeline(TIMELINES)
    groups: dict[str, dict] = {}
    for st in multi_task_statements(LOG, since):
        role = roles.role(st["pid"], st["ts"])
        if role in ("connmap", "?") and st["app"] == "psql":
            role = "psql"
        if "connmap.py" in role or role == "psql" or st["app"] in ("citus-check", "connmap", "psql") \
                or st["sql"].lstrip().upper().startswith("EXPLAIN"):
            continue  # the check's own queries
        check = timeline.at(st["ts"]) if role == "web" else None
        source = f"{role}: {check['project']} {check['label']} {check['url']}" if check else role
        key = shape(st["sql"])
        g = groups.setdefault(key, {"shape": key, "count": 0, "sources": defaultdict(int), "example": st["sql"],
                                    "roles": set()})
        g["count"] += 1
        g["sources"][source] += 1
        g["roles"].add(role)
    out = []
    for g in sorted(groups.values(), key=lambda g: (sorted(g["roles"]), -g["count"])):
        row = {"shape": g["shape"][:600], "count": g["count"], "roles": sorted(g["roles"]),
               "sources": dict(sorted(g["sources"].items(), key=lambda kv: -kv[1])[:12]), "example": g["example"][:3000]}
        if args.explain:
            row["task_counts"] = explain(g["example"])
        out.append(row)
    Path("/tmp/browser-check").mkdir(exist_ok=True)
    Path("/tmp/browser-check/routing.json").write_text(json.dumps(out, indent=1))
    for row in out:
        print(f"\n[{row['count']}× {','.join(row['roles'])}] {row.get('task_counts', '')}")
        print("  ", row["shape"][:400])
        for s, n in list(row["sources"].items())[:6]:
            print(f"     {n:>5} {s}")
    print(f"\n{len(out)} statement shapes asked more than one shard")
    if args.explain_all:
        explained = explain_all(since, roles, timeline)
        Path("/tmp/browser-check/explained.json").write_text(json.dumps(explained, indent=1, default=str))


if __name__ == "__main__":
    main()
