"""Latency budget sums in the task rollup (the overview's budget chart over long ranges) and an
index on analysis time, so the rollup job finds the hours whose analyses changed."""

from django.db import migrations

SQL = """
ALTER TABLE analysis_task_rollup
    ADD COLUMN analysed integer NOT NULL DEFAULT 0,
    ADD COLUMN budget_ms jsonb NOT NULL DEFAULT '{}';
CREATE INDEX analysis_taskanalysis_analyzed_at ON analysis_taskanalysis (analyzed_at);
"""

REVERSE = """
DROP INDEX analysis_taskanalysis_analyzed_at;
ALTER TABLE analysis_task_rollup DROP COLUMN analysed, DROP COLUMN budget_ms;
"""


class Migration(migrations.Migration):
    dependencies = [("analysis", "0002_rollups")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
