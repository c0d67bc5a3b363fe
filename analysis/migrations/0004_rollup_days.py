"""Daily latency rollups: the same rows as the hourly tables, one per day (merged from the
hours), so "all time" reads about 24× fewer rows (analysis/rollups.py). Column `hour` holds the
day's start, so the queries are the same for both tiers."""

from django.db import migrations

SQL = """
CREATE TABLE analysis_task_rollup_day (LIKE analysis_task_rollup INCLUDING DEFAULTS);
CREATE INDEX analysis_task_rollup_day_hour ON analysis_task_rollup_day (project_id, hour);
CREATE TABLE analysis_step_rollup_day (LIKE analysis_step_rollup INCLUDING DEFAULTS);
CREATE INDEX analysis_step_rollup_day_hour ON analysis_step_rollup_day (project_id, hour);
"""

REVERSE = "DROP TABLE analysis_task_rollup_day; DROP TABLE analysis_step_rollup_day;"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0003_rollup_budget")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
