"""Device telemetry rollups: per device and hour, each metric's readings, sum, lowest and highest
value, the clock-event reasons seen and how many readings reported a slowdown. The Devices page's
small multiples over days and weeks read these rows, the edges of a range and the hour in
progress raw, like the latency rollups (docs/rollups.md, "Device telemetry").

Samples belong to devices, not tasks, so their hours are their own (`ts`), not a task's start:
the refresh rolls up the hours that completed since its last run and recomputes the recent hours
whose sample count no longer matches the raw rows (samples that arrived late)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from agentops.db import read_connection
from analysis.engine.verdicts import SLOWDOWN_BITS
from analysis.rollups.sql import HOUR, ORIGIN, SAMPLE_TABLE, hour_ceil, hour_floor
from ingest.limits import CLOCK_REASONS_BITS, MAX_READING

# Column prefix → the reading, from an ingest_resourcesample row aliased r. The power limit is
# not a column: dcgm-exporter's DCGM_FI_DEV_POWER_MGMT_LIMIT lands in the sample's extra.
_READINGS = {
    "util": "r.utilization", "queue": "r.queue_depth", "running": "r.batch_size", "kv": "r.kv_cache_usage",
    "clock": "r.sm_clock_mhz", "clock_max": "r.sm_clock_max_mhz", "power": "r.power_w",
    "power_limit": "CASE WHEN jsonb_typeof(r.extra -> 'power_limit_w') = 'number'"
                   " THEN (r.extra ->> 'power_limit_w')::float8 END",
    "temp": "r.temperature_c",
}
# Readings outside what ingest accepts now (ingest.limits, docs/otlp.md "Numeric ranges") that an
# earlier version stored read as missing: a clock-reasons value of 1e30 cast to bigint, or two
# readings near the float8 maximum summed, would fail every read and refresh of the project.
_LIMIT = f"{MAX_READING:.0f}"
SAMPLE_METRICS = {name: f"(CASE WHEN {expr} BETWEEN -{_LIMIT} AND {_LIMIT} THEN {expr} END)"
                  for name, expr in _READINGS.items()}
_REASONS = (f"(CASE WHEN r.clock_reasons >= 0 AND r.clock_reasons < {2 ** CLOCK_REASONS_BITS}"
            " THEN r.clock_reasons::bigint END)")
# A reading reports a slowdown when its clock-event reasons carry a thermal, power-brake or HW
# slowdown bit (the bits the verdict counts whatever the load), or the native throttled flag.
_SLOWED = (f"(coalesce({_REASONS} & {SLOWDOWN_BITS}, 0) <> 0"
           " OR coalesce(r.throttled, 0) >= 0.5)")
# Samples this late (a collector replaying its queue) are recounted by the refresh; older ones
# need `manage.py rollups_rebuild`.
RECONCILE_HOURS = 48

_COLUMNS = ["samples"] + [f"{m}_{s}" for m in SAMPLE_METRICS for s in ("n", "sum", "min", "max")] + ["reasons", "slowed"]


def _per_group(expr: str) -> list[str]:
    return [f"count({expr})", f"sum({expr})", f"min({expr})", f"max({expr})"]


def _per_row(expr: str) -> list[str]:
    """One raw reading in the shape of a rollup row (merged by the same outer aggregate)."""
    return [f"({expr} IS NOT NULL)::int", expr, expr, expr]


_GROUPED = ", ".join(["count(*)"] + [e for x in SAMPLE_METRICS.values() for e in _per_group(x)]
                     + [f"coalesce(bit_or({_REASONS}), 0)", f"count(*) FILTER (WHERE {_SLOWED})"])
_RAW_ROW = ", ".join(f"{e} AS {name}" for e, name in zip(
    ["1"] + [e for x in SAMPLE_METRICS.values() for e in _per_row(x)]
    + [f"coalesce({_REASONS}, 0)", f"({_SLOWED})::int"], _COLUMNS, strict=True))
_MERGED = ", ".join(["sum(samples)"] + [f"{'sum' if s in ('n', 'sum') else s}({m}_{s})"
                                        for m in SAMPLE_METRICS for s in ("n", "sum", "min", "max")]
                    + ["bit_or(reasons)", "sum(slowed)"])


def hours_recompute(cursor, *, project_id: int, lo: datetime | None = None, hi: datetime | None = None) -> None:
    """Replace the rows of the hours [lo, hi) (all of the project's when both are None)."""
    rows, raw, params = ["project_id = %s"], ["r.project_id = %s"], [project_id]
    for value, op in ((lo, ">="), (hi, "<")):
        if value is not None:
            rows.append(f"hour {op} %s")
            raw.append(f"r.ts {op} %s")
            params.append(value)
    cursor.execute(f"DELETE FROM {SAMPLE_TABLE} WHERE {' AND '.join(rows)}", params)
    cursor.execute(f"INSERT INTO {SAMPLE_TABLE} (project_id, hour, device, {', '.join(_COLUMNS)})"
                   f" SELECT r.project_id, date_bin(INTERVAL '1 hour', r.ts, {ORIGIN}), r.device, {_GROUPED}"
                   f" FROM ingest_resourcesample r WHERE {' AND '.join(raw)} GROUP BY 1, 2, 3", params)


def late_hours(cursor, *, project_id: int, before: datetime) -> list[datetime]:
    """Complete hours of the last RECONCILE_HOURS before `before` whose rolled-up sample count
    differs from the raw rows' (samples that arrived after their hour was rolled up)."""
    hi = hour_floor(before)
    lo = hi - timedelta(hours=RECONCILE_HOURS)
    cursor.execute(f"""
        SELECT coalesce(a.hour, b.hour) FROM
            (SELECT date_bin(INTERVAL '1 hour', ts, {ORIGIN}) AS hour, device, count(*) AS n
             FROM ingest_resourcesample WHERE project_id = %s AND ts >= %s AND ts < %s GROUP BY 1, 2) a
        FULL JOIN
            (SELECT hour, device, samples AS n FROM {SAMPLE_TABLE} WHERE project_id = %s AND hour >= %s AND hour < %s) b
            ON a.hour = b.hour AND a.device = b.device
        WHERE a.n IS DISTINCT FROM b.n GROUP BY 1 ORDER BY 1""", [project_id, lo, hi, project_id, lo, hi])
    return [row[0] for row in cursor.fetchall()]


def refresh(cursor, *, project_id: int, prev_hi: datetime, hi: datetime) -> int:
    """The periodic refresh's part: hours completed in [prev_hi, hi) and late hours before it.
    Returns the hours recomputed."""
    done = 0
    if prev_hi < hi:
        hours_recompute(cursor, project_id=project_id, lo=prev_hi, hi=hi)
        done += int((hi - prev_hi) / HOUR)
    for hour in late_hours(cursor, project_id=project_id, before=min(prev_hi, hi)):
        hours_recompute(cursor, project_id=project_id, lo=hour, hi=hour + HOUR)
        done += 1
    return done


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleBucket:
    """One device's readings over one time bucket: per metric (readings, sum, lowest, highest)."""
    device: str
    start: datetime
    samples: int
    metrics: dict[str, tuple[int, float | None, float | None, float | None]]
    reasons: int
    slowed: int

    def mean(self, metric: str) -> float | None:
        n, total, _, _ = self.metrics[metric]
        return total / n if n and total is not None else None

    def low(self, metric: str) -> float | None:
        return self.metrics[metric][2]

    def high(self, metric: str) -> float | None:
        return self.metrics[metric][3]


def sample_buckets(*, project_id: int, devices: Sequence[str], since: datetime, until: datetime,
                   bucket_seconds: int, rolled_up_until: datetime | None) -> list[SampleBucket]:
    """Per device and `bucket_seconds` bucket of [since, until): the readings merged. Whole hours
    before `rolled_up_until` (the rollups' watermark) come from the rollup rows when buckets are
    whole hours; the rest (the range's partial edge hours, the hour in progress, short buckets)
    from raw samples, through the (project, device, ts) index."""
    if not devices or since >= until:
        return []
    bucket = f"INTERVAL '{int(bucket_seconds)} seconds'"
    names = list(devices)
    parts, params = [], []
    lo = hi = None
    if rolled_up_until is not None and bucket_seconds % 3600 == 0:
        lo, hi = hour_ceil(since), min(hour_floor(until), hour_floor(rolled_up_until))
        if lo >= hi:
            lo = hi = None
    raw_spans = [(since, until)] if lo is None else [(since, lo), (hi, until)]
    if lo is not None:
        parts.append(f"SELECT device, date_bin({bucket}, hour, {ORIGIN}) AS b, {', '.join(_COLUMNS)}"
                     f" FROM {SAMPLE_TABLE} WHERE project_id = %s AND device = ANY(%s) AND hour >= %s AND hour < %s")
        params += [project_id, names, lo, hi]
    for a, b in raw_spans:
        if a < b:
            parts.append(f"SELECT r.device, date_bin({bucket}, r.ts, {ORIGIN}) AS b, {_RAW_ROW}"
                         f" FROM ingest_resourcesample r WHERE r.project_id = %s AND r.device = ANY(%s)"
                         f" AND r.ts >= %s AND r.ts < %s")
            params += [project_id, names, a, b]
    if not parts:
        return []
    union = " UNION ALL ".join(parts)
    with read_connection().cursor() as cursor:
        cursor.execute(f"SELECT device, b, {_MERGED} FROM ({union}) x GROUP BY 1, 2 ORDER BY 1, 2", params)
        rows = cursor.fetchall()
    out = []
    for row in rows:
        device, start, samples, *values = row
        metrics = {m: tuple(values[4 * i: 4 * i + 4]) for i, m in enumerate(SAMPLE_METRICS)}
        out.append(SampleBucket(device, start, int(samples), metrics, int(values[-2] or 0), int(values[-1] or 0)))
    return out
