"""The servers and devices page through the Django test client on a real Postgres: verdicts
grouped into incidents (and paginated), the telemetry small multiples with one colour per device,
the server's account of its calls next to the client's, hostile device names escaped, a hardware
finding on the task page linking to its server at that moment, and the telemetry rollups reading
what the raw samples say."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from analysis import rollups
from analysis.dashboard.devices import GROUPS_PER_PAGE
from analysis.models import Finding
from analysis.units import fmt_ms
from ingest.models import Device, ResourceSample
from tests.analysis.factories import T0, analyse, make_step, make_task

SERVER, GPU_A, GPU_B = "vllm-2:8000", "GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-1111-2222-3333-444444444444"
XSS_DEVICE = '<img src=x onerror="window.pwned=1">:8000'


@pytest.fixture
def client(client, project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    client.force_login(user)
    return client


def get(client, url, **params):
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:800]
    return response


def text(response) -> str:
    """The page's text as a reader sees it: tags dropped, entities decoded, spaces collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())))


def host(project, server=SERVER, gpus=(GPU_A, GPU_B), hostname="vllm-2"):
    Device.objects.create(project=project, name=server, host=hostname, role="server", first_seen=T0, last_seen=T0)
    for g in gpus:
        Device.objects.create(project=project, name=g, host=hostname, role="gpu", vendor="nvidia",
                              hardware="NVIDIA H100 80GB HBM3", first_seen=T0, last_seen=T0)


def slow_call(project, task_id, *, at, device=SERVER, kind="hardware_queueing", wasted_ms=1500.0, evidence=None,
              duration_ms=2000.0):
    """A task with one LLM call on `device` at `at`, and its hardware finding."""
    task = make_task(project, task_id, duration_ms=duration_ms + 100, start=at)
    make_step(task, "chat", kind="llm", device=device, duration_ms=duration_ms, ttft_ms=duration_ms / 2,
              output_tokens=51, model="llama")
    analyse(task, kinds=[kind], wasted_ms=wasted_ms)
    return Finding.objects.create(
        project=project, task=task, kind=kind, step_ids=["chat"], wasted_ms=wasted_ms, summary="slow",
        task_started_at=task.started_at, release=task.release,
        evidence=evidence or {"device": device, "verdict": kind.removeprefix("hardware_"),
                              "evidence": ["41 requests waiting vs a usual 2"],
                              "signals": {"queue_depth": {"value": 41, "source": device}}})


def test_calls_queued_on_one_server_within_minutes_read_as_one_incident(client, project):
    host(project)
    incident = [T0 + timedelta(hours=4, minutes=2) + timedelta(seconds=40 * i) for i in range(11)]
    wasted = [1000.0 + 100 * i for i in range(11)]
    for i, (at, w) in enumerate(zip(incident, wasted, strict=True)):
        slow_call(project, f"q{i}", at=at, wasted_ms=w)
    slow_call(project, "later", at=T0 + timedelta(hours=6))  # two hours on: an incident of its own
    samples(project, SERVER, range(0, 8 * 60, 1), queue_depth=lambda m: 41.0 if 240 <= m < 250 else 2.0)
    possible = slow_call(project, "low", at=incident[3], wasted_ms=9000.0)
    Finding.objects.filter(pk=possible.pk).update(confidence=Finding.CONFIDENCE_LOW)  # in no total
    page = get(client, "/devices")
    body = text(page)
    end = incident[-1] + timedelta(milliseconds=2000)
    expected = (f"11 calls queued on {SERVER} between {incident[0]:%b %d %H:%M} and {end:%H:%M} UTC:"
                f" {fmt_ms(sum(wasted))}")
    assert expected in body
    assert f"1 call queued on {SERVER} at" in body
    assert "12 calls in 2 incidents" in body
    assert "41 requests waiting vs a usual 2" in body

    # "tasks" lists the incident's tasks (and the possible one among them), not the later one;
    # "chart" opens the host around the incident, shaded.
    row = page.content.decode().split(html.escape(expected))[1].split("</tr>")[0]
    tasks_url = html.unescape(re.search(r'class="tasks-link" href="([^"]+)"', row).group(1))
    listed = re.findall(r'href="/tasks/(q\d+|later|low)', get(client, tasks_url).content.decode())
    assert set(listed) - {"low"} == {f"q{i}" for i in range(11)}
    chart_url = html.unescape(re.search(r'class="chart-link" href="([^"]+)"', row).group(1))
    query = parse_qs(urlparse(chart_url).query)
    assert query["device"] == [SERVER] and query["mark_from"] == [incident[0].isoformat()]
    charts = get(client, "/charts/devices.json", **{k: v[0] for k, v in query.items()}).json()
    shapes = charts["telemetry"]["layout"]["shapes"]
    assert shapes and all(s["x0"] == incident[0].isoformat() for s in shapes)


def test_verdict_groups_are_paginated(client, project):
    host(project)
    n = GROUPS_PER_PAGE * 2 + 3
    for i in range(n):  # an hour apart: each an incident of its own, the first the most wasteful
        slow_call(project, f"t{i}", at=T0 + timedelta(hours=i), wasted_ms=10_000.0 - i)
    first = get(client, "/devices")
    assert first.content.decode().count('class="verdict-group"') == GROUPS_PER_PAGE
    assert "page 1 of 3" in text(first) and "less wasted" in text(first)
    last = get(client, "/devices", vpage=3)
    assert last.content.decode().count('class="verdict-group"') == 3
    assert f"{n} calls in {n} incidents" in text(last)
    assert client.get("/devices", {"vpage": "0"}).status_code == 400


def samples(project, device, minutes, **metrics):
    ResourceSample.objects.bulk_create([
        ResourceSample(project=project, device=device, ts=T0 + timedelta(minutes=m),
                       **{k: (v(m) if callable(v) else v) for k, v in metrics.items() if k != "extra"},
                       extra=metrics.get("extra", {}))
        for m in minutes])


def test_the_small_multiples_draw_each_device_in_its_own_colour_on_every_chart(client, project):
    host(project)
    make_task(project, "t", start=T0)
    minutes = range(0, 180, 1)
    samples(project, SERVER, minutes, queue_depth=lambda m: 40.0 if 60 <= m < 62 else 1.0, batch_size=8.0,
            kv_cache_usage=0.5)
    for gpu in (GPU_A, GPU_B):
        samples(project, gpu, minutes, sm_clock_mhz=lambda m: 600.0 if m == 90 else 1900.0, sm_clock_max_mhz=1980.0,
                clock_reasons=lambda m: 0x88 if m == 90 else 0.0, power_w=450.0, temperature_c=60.0,
                extra={"power_limit_w": 700.0})
    page = get(client, "/devices")
    figs = get(client, "/charts/devices.json").json()
    traces = figs["telemetry"]["data"]
    colors: dict[str, set] = {}
    for t in traces:
        colors.setdefault(t["legendgroup"], set()).add(t["line"]["color"] if "line" in t else t["marker"]["color"])
    assert set(colors) == {SERVER, GPU_A, GPU_B}
    assert all(len(c) == 1 for c in colors.values()) and len({c.pop() for c in colors.values()}) == 3
    # the table's swatch is the chart's colour
    swatch = re.search(r'background: (#[0-9a-f]{6})"></span><span title="' + re.escape(GPU_A), page.content.decode())
    gpu_line = next(t for t in traces if t["legendgroup"] == GPU_A and t.get("mode") == "lines")
    assert swatch and swatch.group(1) == gpu_line["line"]["color"]
    # each point is the bucket's highest reading (lowest for the clock): the 2-minute spike shows
    queue = next(t for t in traces if t["legendgroup"] == SERVER and t["yaxis"] == "y")
    assert max(v for v in queue["y"] if v is not None) == 40.0
    marker = next(t for t in traces if t["legendgroup"] == GPU_A and t.get("mode") == "markers")
    assert marker["y"] == [600.0] and "HW power brake" in marker["hovertext"][0]
    dotted = [t for t in traces if t["legendgroup"] == GPU_A and t.get("line", {}).get("dash") == "dot"]
    assert {max(v for v in t["y"] if v is not None) for t in dotted} == {1980.0, 700.0}  # max clock, power limit
    # a server reports no SM clock: its row's clock cell says so instead of drawing an empty axis
    assert not any(t["legendgroup"] == SERVER and t["yaxis"] in ("y4", "y5", "y6") for t in traces)
    # the page fetches only the telemetry: the other figures come with it
    assert set(get(client, "/charts/devices.json", parts="telemetry").json()) == {"telemetry"}
    assert client.get("/charts/devices.json", {"parts": "everything"}).status_code == 400
    config = json.loads(re.search(r'id="page-config" type="application/json">(.*?)</script>',
                                  page.content.decode()).group(1))
    assert set(config["figures"]) == {"serving", "ttft", "tpot"} and "parts=telemetry" in config["charts"]


def rounded(bucket):
    return (bucket.device, bucket.start, bucket.samples, bucket.reasons, bucket.slowed,
            {m: tuple(round(v, 6) if isinstance(v, float) else v for v in values) for m, values in bucket.metrics.items()})


@pytest.mark.django_db(transaction=True)
def test_the_telemetry_rollups_read_what_the_raw_samples_say(project):
    host(project)
    make_task(project, "t", start=T0)
    minutes = range(0, 3 * 24 * 60, 5)
    samples(project, SERVER, minutes, queue_depth=lambda m: float(m % 37), kv_cache_usage=lambda m: (m % 100) / 100)
    samples(project, GPU_A, minutes, sm_clock_mhz=lambda m: 1000.0 + m % 900, clock_reasons=lambda m: 0x40 if m % 97 == 0 else 0,
            power_w=lambda m: 300.0 + m % 50, extra={"power_limit_w": 700.0})
    names, lo, hi = [SERVER, GPU_A], T0 + timedelta(minutes=17), T0 + timedelta(days=2, minutes=41)

    def read(mark):
        return rollups.sample_buckets(project_id=project.pk, devices=names, since=lo, until=hi,
                                             bucket_seconds=3 * 3600, rolled_up_until=mark)

    raw = read(None)
    rollups.rollups_rebuild(now=T0 + timedelta(days=4))
    rolled = read(rollups.watermark())
    assert len(raw) == 2 * 17 and any(b.slowed for b in raw)
    assert [rounded(b) for b in rolled] == [rounded(b) for b in raw]  # sums in another order: last bits
    # a sample that arrives late for an hour already rolled up is counted by the next refresh
    ResourceSample.objects.create(project=project, device=SERVER, ts=T0 + timedelta(days=3, hours=2, minutes=1),
                                  queue_depth=999.0)
    out = rollups.rollups_refresh(now=T0 + timedelta(days=4, minutes=2))
    assert out["sample_hours"] >= 1
    with connection.cursor() as cur:
        cur.execute("SELECT queue_max FROM analysis_sample_rollup WHERE device = %s AND hour = %s",
                    [SERVER, T0 + timedelta(days=3, hours=2)])
        assert cur.fetchone()[0] == 999.0


def test_the_server_side_breakdown_sits_next_to_the_clients_ttft_and_tpot(client, project):
    host(project)
    for i in range(20):
        task = make_task(project, f"t{i}", start=T0 + timedelta(minutes=i), duration_ms=3000.0)
        make_step(task, "chat", kind="llm", device=SERVER, duration_ms=2100.0, ttft_ms=600.0, output_tokens=101)
        make_step(task, "srv", parent="chat", kind="other", name="llm_request", device=SERVER, offset_ms=20.0,
                  duration_ms=2050.0, attributes={"agentops.serving": {
                      "queue_ms": 400.0 + i, "prefill_ms": 150.0, "ttft_ms": 550.0, "decode_ms": 1500.0, "e2e_ms": 2050.0}})
    task = make_task(project, "forged", start=T0 + timedelta(minutes=30))
    make_step(task, "chat", kind="llm", device=SERVER, duration_ms=500.0)
    make_step(task, "srv", parent="chat", kind="other", device=SERVER, offset_ms=1.0,
              attributes={"agentops.serving": {"queue_ms": "lots", "e2e_ms": {"x": 1}}})  # not numbers: not read
    body = text(get(client, "/devices"))
    row = body.split("Client TPOT Outside the server")[1].split("Each cell")[0]
    # queue p50 of 400..419 ms, prefill 150, client TTFT 600, server TPOT 1500/100, client (2100-600)/100, outside 50
    for figure in ("410 ms", "150 ms", "550 ms", "600 ms", "15 ms", "50 ms"):
        assert figure in row, (figure, row)
    assert " 21 " in f" {row} "  # calls with the server's timings, the forged one among them (its numbers unread)
    serving = get(client, "/charts/devices.json").json()["serving"]
    parts = {t["name"]: t["x"][0] for t in serving["data"] if t["type"] == "bar"}
    assert parts["queue (server)"] > 0 and parts["decode (server)"] == pytest.approx(1500.0)


def test_hostile_device_names_are_text_on_the_page_and_in_every_chart(client, project):
    host(project, server=XSS_DEVICE, gpus=("<b>gpu</b>",), hostname="<i>h</i>")
    samples(project, XSS_DEVICE, range(10), queue_depth=3.0)
    samples(project, "<b>gpu</b>", range(10), temperature_c=70.0)
    slow_call(project, "t0", at=T0, device=XSS_DEVICE)
    body = get(client, "/devices").content.decode()
    assert "<img src=x" not in body and "<b>gpu</b>" not in body and "<i>h</i>" not in body
    assert html.escape(XSS_DEVICE) in body
    figs = get(client, "/charts/devices.json").json()
    rendered = json.dumps([[t.get("name"), t.get("hovertext"), t.get("text")] for f in figs.values() for t in f["data"]]
                          + [f["layout"].get("annotations") for f in figs.values()]
                          + [f["layout"].get("yaxis", {}).get("ticktext") for f in figs.values()])
    assert "<img" not in rendered and "<b>gpu" not in rendered and "<i>h" not in rendered


def test_a_hardware_finding_on_the_task_page_links_to_its_server_at_that_moment(client, project):
    host(project)
    slow_call(project, "t0", at=T0 + timedelta(hours=1))
    body = get(client, "/tasks/t0").content.decode()
    url = html.unescape(re.search(r'class="device-link" href="([^"]+)"', body).group(1))
    query = parse_qs(urlparse(url).query)
    assert urlparse(url).path == "/devices" and query["device"] == [SERVER]
    assert query["mark_from"] == [(T0 + timedelta(hours=1)).isoformat()]
    assert query["since"][0] < query["mark_from"][0] < query["mark_to"][0] < query["until"][0]
    assert "1 call queued on" in text(get(client, url))


def test_the_device_table_groups_servers_with_their_gpus_and_filters_by_vendor(client, project):
    host(project)
    Device.objects.create(project=project, name="groq-lpu-03", vendor="groq", hardware="LPU", first_seen=T0, last_seen=T0)
    for i in range(4):
        task = make_task(project, f"t{i}", start=T0 + timedelta(minutes=i))
        make_step(task, "gen", kind="llm", device="groq-lpu-03", duration_ms=1100.0, ttft_ms=100.0, output_tokens=101)
    slow_call(project, "hw", at=T0, evidence={"device": SERVER, "evidence": [], "signals": {
        "clock_reasons": {"value": 136, "source": GPU_A}}}, kind="hardware_throttling")
    page = get(client, "/devices").content.decode()
    row = page.split("groq-lpu-03</a>")[1].split("</tr>")[0]
    # steps, TTFT, TPOT = 1000/100, from the histogram: 100 and 10 ms sit on a bucket's lower edge, and
    # its middle is 1.9 % above
    assert ">4<" in row and "≈102 ms" in row and "≈10.2 ms" in row
    gpu_row = page.split(f'title="{GPU_A}"')[1].split("</tr>")[0]
    assert gpu_row.rstrip().endswith('<td class="num">1</td>')  # the finding rests on this GPU's readings
    assert "1 call slowed by throttling on vllm-2:8000 (GPU-aaaaaaaa…)" in text(get(client, "/devices"))
    nvidia = get(client, "/devices", vendor="nvidia").content.decode()
    assert GPU_A in nvidia and "groq-lpu-03" not in nvidia.split('id="verdicts"')[1]
