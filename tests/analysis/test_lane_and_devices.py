"""Two visible defects: the device lane clipped values outside a fixed-looking axis (each lane is
now scaled to its own data, both ends labelled), and devices first seen on a step kept empty
Vendor and Hardware columns when their resource samples arrived within the minute."""

from __future__ import annotations

import pytest
from django.test import Client

from analysis.dashboard.charts import SamplePoint, StepRow, waterfall_figure
from ingest.models import Device

ROWS = [StepRow("r", "", 0, "agent", "root", 0.0, 10_000.0), StepRow("a", "r", 1, "llm", "chat", 0.0, 6000.0,
                                                                    device="gpu-1")]


def lane(temps, *, xs=None):
    xs = xs or [i * 1000.0 for i in range(len(temps))]
    samples = [SamplePoint("gpu-1", x, {"queue_depth": 2.0, "utilization": 0.6, "temperature_c": t, "throttled": 0.0})
               for x, t in zip(xs, temps, strict=True)]
    return waterfall_figure(ROWS, samples=samples)["layout"]


def test_each_lane_is_scaled_to_its_data_with_its_top_labelled():
    layout = lane([42.0, 45.0, 90.0, 48.0])
    temp = layout["yaxis4"]  # queue, util, temperature, throttled
    assert temp["range"][0] == 0 and temp["range"][1] > 90
    assert temp["tickvals"] == [0.0, 90.0] and temp["ticktext"] == ["0", "90"]
    util = layout["yaxis3"]
    assert util["range"][1] > 0.6 and util["ticktext"] == ["0", "0.6"]
    assert layout["yaxis5"]["range"] == [0.0, 1.15]  # nothing throttled: a flat 0 still gets an axis


def test_a_lane_scales_to_the_readings_the_waterfall_shows():
    # A 200 °C reading 30 s before the task (off the x range) does not flatten the lane.
    layout = lane([200.0, 41.0, 60.0], xs=[-30_000.0, 1000.0, 2000.0])
    assert layout["yaxis4"]["tickvals"] == [0.0, 60.0]


def test_negative_readings_keep_zero_in_view():
    layout = lane([-5.0, 10.0])
    assert layout["yaxis4"]["tickvals"] == [-5.0, 0.0, 10.0] and layout["yaxis4"]["range"][0] < -5


@pytest.mark.django_db
def test_vendor_and_hardware_arrive_after_the_device_was_seen_on_a_step(project, ingest_key,
                                                                       django_capture_on_commit_callbacks):
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_key}"}

    def post(events):  # each batch commits (its on-commit hooks run), as over HTTP
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/api/v1/ingest", {"events": events}, content_type="application/json", **auth)

    step = {"type": "step", "task_id": "t1", "step_id": "s1", "kind": "llm", "name": "chat", "device": "gpu-h100-02",
            "started_at": "2026-11-01T10:00:00Z", "ended_at": "2026-11-01T10:00:01Z"}
    sample = {"type": "resource", "device": "gpu-h100-02", "vendor": "nvidia", "hardware": "H100",
              "ts": "2026-11-01T10:00:00.5Z", "metrics": {"utilization": 0.7}}
    # Two batches, as the simulator and real senders do: steps first, telemetry a moment later.
    assert post([step]).status_code == 200
    assert post([sample]).status_code == 200
    device = Device.objects.get(project=project, name="gpu-h100-02")
    assert (device.vendor, device.hardware) == ("nvidia", "H100")
    # and a later step-only batch does not blank them
    step2 = {**step, "step_id": "s2"}
    assert post([step2]).status_code == 200
    device.refresh_from_db()
    assert (device.vendor, device.hardware) == ("nvidia", "H100")
