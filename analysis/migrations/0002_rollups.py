"""Tables of the latency rollups (analysis/rollups.py). Plain SQL: only rollups.py reads and
writes them, with SQL (unnest of the sparse histograms), so they need no Django model. No foreign
key to ingest_project: Django's flush truncates its own tables together, and a table outside that
set referencing one of them would block it. A deleted project's rows are removed by the
receiver in analysis/rollups/refresh.py (`on_project_deleted`)."""

from django.db import migrations

SQL = """
CREATE TABLE analysis_task_rollup (
    project_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    release varchar(200) NOT NULL,
    environment varchar(100) NOT NULL,
    name varchar(200) NOT NULL,
    tasks integer NOT NULL,
    errors integer NOT NULL,
    sum_ms double precision NOT NULL,
    max_ms double precision,
    first_at timestamptz NOT NULL,
    last_at timestamptz NOT NULL,
    bins smallint[] NOT NULL,
    counts integer[] NOT NULL
);
CREATE INDEX analysis_task_rollup_hour ON analysis_task_rollup (project_id, hour);
CREATE TABLE analysis_step_rollup (
    project_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    release varchar(200) NOT NULL,
    environment varchar(100) NOT NULL,
    kind varchar(16) NOT NULL,
    name varchar(200) NOT NULL,
    tool_name varchar(200) NOT NULL,
    model varchar(200) NOT NULL,
    device varchar(200) NOT NULL,
    steps integer NOT NULL,
    errors integer NOT NULL,
    sum_ms double precision NOT NULL,
    max_ms double precision,
    bins smallint[] NOT NULL,
    counts integer[] NOT NULL
);
CREATE INDEX analysis_step_rollup_hour ON analysis_step_rollup (project_id, hour);
CREATE TABLE analysis_rollup_state (
    name varchar(50) PRIMARY KEY,
    watermark timestamptz
);
"""

REVERSE = "DROP TABLE analysis_task_rollup; DROP TABLE analysis_step_rollup; DROP TABLE analysis_rollup_state;"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0001_initial"), ("ingest", "0001_initial")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
