"""Page loads in Chromium against a running stack, timed from navigation to the load event:
p50 / p99 / max over N loads (docs/reliability.md, "Page loads"). Each load is a fresh navigation
of one logged-in browser, as a user clicking through the pages does: HTML, CSS, scripts and, on
the chart pages, the chart JSON, over the connections Chromium opens and keeps.

    .venv/bin/python bench/page_loads.py --url http://127.0.0.1:8000 --loads 200

Logs in as demo/demo (make demo's user) unless --user/--password say otherwise. `--pages` names
the pages (comma-separated; `{slow_task}` is the slowest task, the first of the task list sorted
by duration); `--charts` also times each load until every chart of the page
is drawn, scrolling to the bottom first so that a page drawing its lower charts when they come
near draws them all, and reports both per page."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from urllib.parse import urlparse

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGES = ("/tasks", "/", "/latency", "/tasks?q=search", "/alerts")
# Every chart of the page drawn (Plotly's .main-svg inside its .chart), or saying in words why it
# has none (an empty range); "Loading…" is not an answer yet.
CHARTS_DRAWN = """() => [...document.querySelectorAll('.chart')].every(el => el.querySelector('.main-svg')
    || (el.textContent.trim() && !/Loading/.test(el.textContent)))"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def hold_idle_sockets(url: str, count: int, stop: threading.Event, *, linger: float = 6.0) -> None:
    """Keep `count` connections open that send nothing, each replaced after `linger` seconds: the
    unused sockets other browsers leave (Chromium's preconnects, a late-bound socket per request)."""
    parsed = urlparse(url)
    held: list[tuple[float, socket.socket]] = []
    while not stop.is_set():
        now = time.monotonic()
        for opened, sock in [h for h in held if now - h[0] > linger]:
            sock.close()
            held.remove((opened, sock))
        while len(held) < count:
            held.append((time.monotonic() + len(held) * linger / count - linger,
                         socket.create_connection((parsed.hostname, parsed.port or 80))))
        stop.wait(0.2)
    for _, sock in held:
        sock.close()


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--loads", type=int, default=200)
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--fresh", action="store_true",
                        help="a new browser context (no cache, no open connections) for every load")
    parser.add_argument("--idle-sockets", type=int, default=0,
                        help="meanwhile, keep this many connections open that send nothing (other browsers' "
                             "unused preconnects), each for 6 s")
    parser.add_argument("--pages", default=",".join(PAGES), help="comma-separated paths ({slow_task}: the slowest task)")
    parser.add_argument("--charts", action="store_true", help="also time each load until its charts are drawn")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    pages = [p for p in args.pages.split(",") if p]
    times: list[float] = []
    drawn: list[float] = []
    stop = threading.Event()
    idler = threading.Thread(target=hold_idle_sockets, args=(args.url, args.idle_sockets, stop), daemon=True)
    if args.idle_sockets:
        idler.start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{args.url}/login/")
        page.fill("#id_username", args.user)
        page.fill("#id_password", args.password)
        page.click("section.login button[type=submit]")
        page.wait_for_load_state("load")
        state = context.storage_state()
        if any("{slow_task}" in p for p in pages):
            page.goto(f"{args.url}/tasks?sort=-duration_ms", wait_until="load")  # the slowest first
            slowest_task = page.evaluate("""() => [...document.querySelectorAll('a[href]')].map(a => a.pathname)
                .find(p => /^\\/tasks\\/[^/]+$/.test(p))""")
            if not slowest_task:
                raise SystemExit("--pages {slow_task}: the task list links no task")
            pages = [p.replace("{slow_task}", slowest_task.split("/tasks/", 1)[1]) for p in pages]
        for i in range(args.loads):
            path = pages[i % len(pages)]
            if args.fresh:
                context.close()
                context = browser.new_context(storage_state=state)
                page = context.new_page()
            started = time.perf_counter()
            page.goto(f"{args.url}{path}", wait_until="load", timeout=60_000)
            times.append(1000 * (time.perf_counter() - started))
            if args.charts:
                page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
                page.wait_for_function(CHARTS_DRAWN, timeout=60_000, polling=20)
                drawn.append(1000 * (time.perf_counter() - started))
        browser.close()
    stop.set()
    slow = sorted(((t, pages[i % len(pages)]) for i, t in enumerate(times)), reverse=True)[:5]
    per_page = {}
    for k, path in enumerate(pages):
        loads = times[k::len(pages)]
        row = {"loads": len(loads), "p50_ms": round(statistics.median(loads)), "max_ms": round(max(loads))}
        if drawn:
            charts = drawn[k::len(pages)]
            row.update(charts_p50_ms=round(statistics.median(charts)), charts_max_ms=round(max(charts)))
        per_page[path] = row
    result = {"loads": len(times), "idle_sockets": args.idle_sockets, "fresh": args.fresh, "p50_ms": round(statistics.median(times)),
              "p99_ms": round(percentile(times, 0.99)), "max_ms": round(max(times)),
              "over_2s": sum(t > 2000 for t in times), "slowest": [(round(t), path) for t, path in slow],
              "pages": per_page}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**result, "times_ms": [round(t, 1) for t in times]}, f)


if __name__ == "__main__":
    main()
