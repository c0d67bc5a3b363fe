"""Per-group rollups for the release comparison's "where it changed" (analysis/rollups.py,
`group_rows_sql`): per hour of the task's start, release, environment and task name, and per
step group (step kind + name, kind, tool, model) the per-task moments of self time and calls and a
histogram of the self time per call; per task name the time outside steps, and the finding,
budget and what-if figures. Existing rollups have none of these rows, so the watermark is
cleared: the next refresh rebuilds every hour."""

from django.db import migrations

SQL = """
CREATE TABLE analysis_group_rollup (
    project_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    release varchar(200) NOT NULL,
    environment varchar(100) NOT NULL,
    task_name varchar(200) NOT NULL,
    dimension varchar(8) NOT NULL,
    kind varchar(40) NOT NULL,
    key varchar(200) NOT NULL,
    tasks integer NOT NULL,
    calls bigint NOT NULL,
    calls_sq double precision NOT NULL,
    sum_ms double precision NOT NULL,
    sum_sq double precision NOT NULL,
    call_sq double precision NOT NULL,
    errors bigint NOT NULL,
    tokens bigint NOT NULL,
    other_ms double precision NOT NULL,
    analysed integer NOT NULL,
    max_ms double precision,
    bins smallint[] NOT NULL,
    counts integer[] NOT NULL
);
CREATE INDEX analysis_group_rollup_hour ON analysis_group_rollup (project_id, hour);
CREATE TABLE analysis_group_rollup_day (LIKE analysis_group_rollup INCLUDING DEFAULTS);
CREATE INDEX analysis_group_rollup_day_hour ON analysis_group_rollup_day (project_id, hour);
DELETE FROM analysis_rollup_state WHERE name = 'rollups';
"""

REVERSE = "DROP TABLE analysis_group_rollup; DROP TABLE analysis_group_rollup_day;"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0006_rollup_device_latency")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
