"""GET /api/v1/export/<entity> and `manage.py export`: what comes out equals what the database
holds (per type), every filter narrows every export, one project never sees another's rows."""

from __future__ import annotations

import gc
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pandas as pd
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.test import Client

from analysis.dashboard import export_arrow, exports
from analysis.models import Finding, ModelPrice
from ingest.models import Device, ResourceSample, Step, Task
from tests.analysis.factories import T0, analyse, make_finding, make_step, make_task

HOSTILE = '=HYPERLINK("http://x")<script>alert(1)</script>'


def _populate(project, *, prefix: str = "") -> None:
    """Two releases, two environments, LLM and tool steps on two models and two devices,
    findings, samples; hostile text in names and attributes."""
    for i in range(6):
        release = "v1" if i < 3 else "v2"
        task = make_task(project, f"{prefix}t{i}", duration_ms=1000.0 + 100 * i, release=release,
                         environment="prod" if i % 2 == 0 else "staging", name="checkout" if i % 3 else "search",
                         start=T0 + timedelta(minutes=i), session_id=f"sess-{i // 2}",
                         attributes={"user": HOSTILE, "n": i}, input_tokens=1000 + i, output_tokens=50 + i)
        make_step(task, "root", kind="agent", duration_ms=1000.0, name="run")
        make_step(task, "plan", parent="root", kind="llm", duration_ms=400.0, name="chat",
                  model="llama-70b" if i % 2 == 0 else "mixtral", device="gpu-0" if i < 4 else "groq-1",
                  input_tokens=1000 + i, output_tokens=50 + i, ttft_ms=120.5, streamed=True,
                  attributes={"prompt": HOSTILE, "i": i})
        make_step(task, "call", parent="root", kind="tool", offset_ms=400.0, duration_ms=300.0 + i,
                  name="search_orders", tool_name="search_orders", tool_args={"q": HOSTILE, "id": i},
                  depends_on=["plan"], tool_call_ids=[])
        if i % 2 == 0:
            make_finding(task, "repeated_tool_call", wasted_ms=100.0 + i, step_ids=["call"], summary=HOSTILE)
        if i == 1:
            make_finding(task, "slow_step", wasted_ms=50.0, step_ids=["plan"])
        kinds = ["repeated_tool_call"] if i % 2 == 0 else ["slow_step"] if i == 1 else []
        analyse(task, kinds=kinds, wasted_ms=100.0 + i if i % 2 == 0 else 0)
    for device, vendor in (("gpu-0", "nvidia"), ("groq-1", "groq")):
        Device.objects.get_or_create(project=project, name=device,
                                     defaults={"vendor": vendor, "hardware": "H100" if vendor == "nvidia" else "LPU",
                                               "first_seen": T0, "last_seen": T0})
        for k in range(4):
            ResourceSample.objects.create(project=project, device=device, ts=T0 + timedelta(minutes=2 * k),
                                          utilization=0.5 + k / 10, queue_depth=float(k), extra={"fan": k})


@pytest.fixture
def data(project, other_project):
    _populate(project)
    _populate(other_project, prefix="other-")
    ModelPrice.objects.create(model="llama-70b", input_per_million=Decimal("0.6"), output_per_million=Decimal("0.8"),
                              effective_from=T0 - timedelta(days=30))
    return project


def export(key: str, entity: str, **params) -> tuple[int, bytes, dict]:
    response = Client().get(f"/api/v1/export/{entity}", params, HTTP_AUTHORIZATION=f"Bearer {key}")
    if response.streaming:
        body = b"".join(response.streaming_content)
    else:
        body = response.content
    return response.status_code, body, response


def frame(key: str, entity: str, fmt: str = "parquet", **params) -> pd.DataFrame:
    status, body, _ = export(key, entity, format=fmt, **params)
    assert status == 200, body[:500]
    if fmt == "parquet":
        return pd.read_parquet(io.BytesIO(body))
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(body), keep_default_na=False, na_values=[""], dtype=str)
    return pd.read_json(io.BytesIO(body), lines=True, dtype=False)


# --- round trips --------------------------------------------------------------------------------


def test_steps_parquet_equals_the_database_rows_with_typed_columns(data, read_key):
    body = export(read_key, "steps", format="parquet")[1]
    schema = pq.read_schema(io.BytesIO(body))
    assert str(schema.field("started_at").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("input_tokens").type) == "int64"
    assert str(schema.field("duration_ms").type) == "double"
    assert str(schema.field("streamed").type) == "bool"
    assert str(schema.field("attributes").type) == "string"
    df = pd.read_parquet(io.BytesIO(body))
    rows = Step.objects.filter(project=data).select_related("task")
    assert len(df) == rows.count() == 18
    by_key = df.set_index(["task_id", "step_id"])
    for step in rows:
        got = by_key.loc[(step.task.task_id, step.step_id)]
        assert got["started_at"] == pd.Timestamp(step.started_at)
        assert got["ended_at"] == pd.Timestamp(step.ended_at)
        assert got["duration_ms"] == step.duration_ms
        assert got["kind"] == step.kind and got["name"] == step.name and got["model"] == step.model
        assert got["release"] == step.task.release and got["task_name"] == step.task.name
        assert json.loads(got["attributes"]) == step.attributes
        assert json.loads(got["depends_on"]) == step.depends_on
        if step.input_tokens is None:
            assert pd.isna(got["input_tokens"])
        else:
            assert got["input_tokens"] == step.input_tokens
        if step.tool_args is not None:
            assert json.loads(got["tool_args"]) == step.tool_args
        assert (pd.isna(got["streamed"]) if step.streamed is None else got["streamed"] == step.streamed)


def test_tasks_parquet_equals_the_database_rows_and_carries_cost(data, read_key):
    df = frame(read_key, "tasks")
    tasks = Task.objects.filter(project=data).select_related("analysis")
    assert len(df) == tasks.count() == 6
    by_id = df.set_index("task_id")
    for task in tasks:
        got = by_id.loc[task.task_id]
        assert got["started_at"] == pd.Timestamp(task.started_at)
        assert got["duration_ms"] == task.duration_ms
        assert (got["release"], got["environment"], got["session_id"]) == (task.release, task.environment,
                                                                              task.session_id)
        assert got["input_tokens"] == task.input_tokens and got["step_count"] == task.step_count
        assert json.loads(got["attributes"]) == task.attributes
        assert got["wasted_ms"] == task.analysis.wasted_ms
        assert got["llm_steps"] == 1
    # llama-70b is priced (even task numbers), mixtral is not: no price, never 0
    t0 = by_id.loc["t0"]
    assert t0["cost_usd"] == pytest.approx((1000 * 0.6 + 50 * 0.8) / 1e6)
    assert t0["unpriced_llm_steps"] == 0
    assert pd.isna(by_id.loc["t1"]["cost_usd"]) and by_id.loc["t1"]["unpriced_llm_steps"] == 1


def test_findings_and_samples_parquet_equal_the_database_rows(data, read_key):
    findings = frame(read_key, "findings")
    stored = Finding.objects.filter(project=data).select_related("task")
    assert len(findings) == stored.count() == 4
    by_id = findings.set_index("finding_id")
    for f in stored:
        got = by_id.loc[f.pk]
        assert (got["task_id"], got["kind"], got["summary"], got["wasted_ms"]) == (
            f.task.task_id, f.kind, f.summary, f.wasted_ms)
        assert json.loads(got["step_ids"]) == f.step_ids
        assert got["task_started_at"] == pd.Timestamp(f.task_started_at)
    samples = frame(read_key, "samples")
    assert len(samples) == ResourceSample.objects.filter(project=data).count() == 8
    gpu = samples[samples["device"] == "gpu-0"].sort_values("ts")
    assert list(gpu["utilization"]) == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert set(gpu["vendor"]) == {"nvidia"} and set(gpu["hardware"]) == {"H100"}
    assert json.loads(gpu.iloc[3]["extra"]) == {"fan": 3}
    assert str(samples["ts"].dtype) == "datetime64[us, UTC]"


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("entity", exports.ENTITIES)
def test_csv_and_jsonl_hold_the_same_rows_as_parquet(data, read_key, entity, fmt):
    parquet = frame(read_key, entity)
    other = frame(read_key, entity, fmt)
    assert list(other.columns) == list(parquet.columns)
    assert len(other) == len(parquet) > 0
    key = {"tasks": ["task_id"], "steps": ["task_id", "step_id"], "findings": ["finding_id"],
           "samples": ["device", "ts"]}[entity]
    parquet = parquet.sort_values(key).reset_index(drop=True)
    if entity == "samples":
        other["ts"] = pd.to_datetime(other["ts"], utc=True)
    if entity == "findings":
        other["finding_id"] = other["finding_id"].astype(int)
    other = other.sort_values(key).reset_index(drop=True)
    for column in parquet.columns:
        for want, got in zip(parquet[column], other[column], strict=True):
            if want is None or (not isinstance(want, str) and pd.isna(want)):
                assert got in ("", None) or (not isinstance(got, str) and pd.isna(got)), (column, got)
            elif isinstance(want, pd.Timestamp):
                assert pd.Timestamp(got) == want, column
            elif want == "" and fmt == "csv":  # CSV writes an empty text and a NULL alike
                assert not isinstance(got, str) and pd.isna(got), column
            elif isinstance(want, str):
                # CSV keeps spreadsheets from running text: a leading = + - @ gets a '
                expected = "'" + want if fmt == "csv" and want.startswith(("=", "+", "-", "@")) else want
                assert got == expected, column
            elif isinstance(want, bool) or str(type(want)).endswith("bool_'>"):
                assert str(got).lower() == str(bool(want)).lower(), column
            else:
                assert float(got) == pytest.approx(float(want)), column


def test_csv_export_neutralises_formulas(data, read_key):
    body = export(read_key, "findings", format="csv")[1].decode()
    assert "'=HYPERLINK" in body and ',=HYPERLINK' not in body


def test_an_export_streams_in_batches_and_still_equals_the_rows(data, read_key, monkeypatch):
    monkeypatch.setattr(exports, "FETCH_ROWS", 4)
    monkeypatch.setattr(export_arrow.stream, "__kwdefaults__", {"progress": None, "fetch_rows": 4})
    status, body, response = export(read_key, "steps", format="parquet")
    assert status == 200 and response.streaming
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    assert 'filename="acme-steps.parquet"' in response["Content-Disposition"]
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    assert meta.num_row_groups == 5 and meta.num_rows == 18
    jsonl = export(read_key, "steps", format="jsonl")[1].decode().splitlines()
    assert len(jsonl) == 18 and all(json.loads(line)["task_id"] for line in jsonl)


def test_an_empty_export_still_has_its_columns(data, read_key):
    df = frame(read_key, "steps", release="no-such-release")
    assert len(df) == 0 and "cost_usd" in df.columns
    csv = export(read_key, "tasks", format="csv", release="nope")[1].decode()
    assert csv.startswith("task_id,name,release")


# --- filters and isolation ------------------------------------------------------------------------

FILTER_CASES = [
    ({"release": "v2"}, {"tasks": 3, "steps": 9, "findings": 1}),
    ({"environment": "staging"}, {"tasks": 3, "steps": 9, "findings": 1}),
    ({"name": "search"}, {"tasks": 2, "steps": 6, "findings": 1}),
    ({"kind": "llm"}, {"tasks": 6, "steps": 6, "findings": 4}),
    ({"model": "mixtral"}, {"tasks": 3, "steps": 3, "findings": 1}),
    ({"device": "groq-1"}, {"tasks": 2, "steps": 2, "findings": 1}),
    ({"finding": "slow_step"}, {"tasks": 1, "steps": 3, "findings": 1}),
    ({"since": (T0 + timedelta(minutes=2)).isoformat(), "until": (T0 + timedelta(minutes=4)).isoformat()},
     {"tasks": 2, "steps": 6, "findings": 1}),
    ({"status": "ok", "min_duration_ms": "1300"}, {"tasks": 3, "steps": 9, "findings": 1}),
    # the task list's step search: a search_orders call of 304 ms or more (t4, t5)
    ({"tool": "search_orders", "min_step_ms": "304"}, {"tasks": 2, "steps": 6, "findings": 1}),
]


@pytest.mark.parametrize("params,expected", FILTER_CASES, ids=["+".join(p) for p, _ in FILTER_CASES])
@pytest.mark.parametrize("entity", ["tasks", "steps", "findings"])
def test_every_filter_narrows_every_export(data, read_key, params, expected, entity):
    df = frame(read_key, entity, **params)
    assert len(df) == expected[entity]
    assert not any(str(t).startswith("other-") for t in df.get("task_id", []))


def test_samples_filter_by_device_and_time_and_refuse_task_filters(data, read_key):
    assert len(frame(read_key, "samples", device="groq-1")) == 4
    window = frame(read_key, "samples", since=(T0 + timedelta(minutes=2)).isoformat(),
                   until=(T0 + timedelta(minutes=6)).isoformat())
    assert len(window) == 4 and window["ts"].min() == pd.Timestamp(T0 + timedelta(minutes=2))
    status, body, _ = export(read_key, "samples", release="v1")
    assert status == 400 and json.loads(body)["error"].startswith("release: samples belong to devices")


@pytest.mark.parametrize("entity", exports.ENTITIES)
def test_one_projects_key_never_exports_anothers_rows(data, other_project, other_keys, read_key, entity):
    mine, theirs = frame(read_key, entity), frame(other_keys["read"], entity)
    assert len(mine) == len(theirs) > 0
    if entity != "samples":
        assert all(t.startswith("other-") for t in theirs["task_id"])
        assert not any(t.startswith("other-") for t in mine["task_id"])
    status, _, _ = export(other_keys["read"], entity, project="acme")
    assert status == 404


def test_an_ingest_only_key_gets_403_and_no_key_401(data, ingest_key):
    status, body, _ = export(ingest_key, "steps")
    assert status == 403 and "read" in json.loads(body)["error"]
    assert Client().get("/api/v1/export/steps").status_code == 401


def test_a_logged_in_member_exports_through_the_session(data, django_user_model):
    user = django_user_model.objects.create_user("ana", password="pw")
    data.members.add(user)
    client = Client()
    client.force_login(user)
    response = client.get("/api/v1/export/tasks", {"format": "csv"})
    assert response.status_code == 200
    assert len(pd.read_csv(io.BytesIO(b"".join(response.streaming_content)))) == 6


@pytest.mark.parametrize("entity,params,message", [
    ("steps", {"format": "xlsx"}, "format: must be one of parquet, csv, jsonl"),
    ("steps", {"fromat": "csv"}, "fromat: unknown parameter"),
    ("steps", {"kind": "banana"}, "kind: must be one of"),
    ("steps", {"since": "yesterday"}, "since: 'yesterday' is not an RFC 3339 timestamp"),
    ("tasks", {"min_duration_ms": "-3"}, "min_duration_ms: must be a non-negative number"),
    ("tasks", {"status": "weird"}, "status: must be one of"),
    ("tasks", {"range": "3y"}, "range: must be one of"),
    ("users", {}, "entity: must be one of tasks, steps, findings, samples"),
    ("steps", {"model": "m" * 201}, "model: at most 200 characters"),
])
def test_bad_parameters_answer_400_naming_the_parameter(data, read_key, entity, params, message):
    status, body, _ = export(read_key, entity, **params)
    assert status == 400
    assert json.loads(body)["error"].startswith(message), body


# --- manage.py export ----------------------------------------------------------------------------


def test_the_export_command_writes_the_same_rows_to_a_file_with_progress(data, tmp_path, capsys):
    out = tmp_path / "steps.parquet"
    call_command("export", "steps", "--project", "acme", "--format", "parquet", "--out", str(out),
                 "--filter", "release=v2", "--filter", "kind=llm")
    err = capsys.readouterr().err
    assert "3 rows" in err and str(out) in err
    df = pd.read_parquet(out)
    assert len(df) == 3 and set(df["release"]) == {"v2"} and set(df["kind"]) == {"llm"}
    csv = tmp_path / "tasks.csv"
    call_command("export", "tasks", "--project", "acme", "--format", "csv", "--out", str(csv))
    assert len(pd.read_csv(csv)) == 6


def test_the_export_command_names_a_bad_filter(data, tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="kind: must be one of"):
        call_command("export", "steps", "--project", "acme", "--out", str(tmp_path / "x.parquet"),
                     "--filter", "kind=banana")
    with pytest.raises(CommandError, match="no project 'nope'"):
        call_command("export", "steps", "--project", "nope", "--out", str(tmp_path / "x.parquet"))
    with pytest.raises(CommandError, match="--filter: expected KEY=VALUE"):
        call_command("export", "steps", "--project", "acme", "--out", str(tmp_path / "x.parquet"),
                     "--filter", "release")


def test_exported_times_are_utc_instants(data, read_key):
    df = frame(read_key, "tasks")
    first = df.set_index("task_id").loc["t0", "started_at"]
    assert first.tzinfo is not None and first.to_pydatetime() == datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def test_a_database_that_is_down_answers_503_before_anything_is_sent(data, read_key, monkeypatch):
    from django.db import OperationalError

    def down(export, **kwargs):
        raise OperationalError("connection refused")
        yield  # a generator, as the real one

    from analysis.dashboard import export_arrow

    monkeypatch.setattr(export_arrow, "batches", down)
    status, body, response = export(read_key, "steps")
    assert status == 503 and response["Retry-After"] and "retry later" in json.loads(body)["error"]


def test_the_file_name_is_safe_whatever_the_project_is_called(db, make_key):
    from ingest.models import IngestKey, Project

    odd = Project.objects.create(name='we"ird\\ná/..')
    status, _, response = export(make_key(odd, IngestKey.SCOPE_READ), "tasks", format="csv")
    assert status == 200 and response["Content-Disposition"] == 'attachment; filename="we_ird_n-tasks.csv"'



def test_exports_past_the_per_process_cap_answer_503_with_retry_after(data, read_key, settings, client,
                                                                       django_user_model):
    """Each streamed export holds a web thread until its client has read it all: past
    AGENTOPS_MAX_EXPORTS_PER_PROCESS the next is refused, API and dashboard CSV alike."""
    from analysis.dashboard import export_slots

    settings.AGENTOPS_MAX_EXPORTS_PER_PROCESS = 2
    user = django_user_model.objects.create_user("member", password="pw")
    data.members.add(user)
    client.force_login(user)
    # Two exports streaming on other threads of this process.
    others = [export_slots.take(), export_slots.take()]
    try:
        status, body, refused = export(read_key, "tasks", format="csv")
        page = client.get("/findings.csv", {"project": data.name})
    finally:
        for slot in others:
            slot.release()
    assert status == 503 and refused["Retry-After"] == "10" and "busy" in json.loads(body)["error"]
    assert page.status_code == 503 and page["Retry-After"] == "10"
    assert export(read_key, "tasks", format="csv")[0] == 200


@pytest.mark.parametrize("how", ["read to the end", "closed early", "dropped unread"])
def test_a_streamed_export_gives_its_slot_back_however_it_ends(data, read_key, settings, how):
    from analysis.dashboard import export_slots

    settings.AGENTOPS_MAX_EXPORTS_PER_PROCESS = 1
    response = Client().get("/api/v1/export/steps", {"format": "csv"}, HTTP_AUTHORIZATION=f"Bearer {read_key}")
    assert response.status_code == 200
    with pytest.raises(export_slots.Busy):
        export_slots.take()
    if how == "read to the end":
        b"".join(response.streaming_content)  # the test client then closes it, as gunicorn does
    elif how == "closed early":
        next(iter(response.streaming_content))
        response.close()  # a client that hung up mid-way
    del response
    gc.collect()  # the test client's response is in a reference cycle; a server's is not
    export_slots.take().release()
