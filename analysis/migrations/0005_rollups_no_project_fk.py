"""Rollup tables without a foreign key to the project (for databases that applied the first
version of 0002/0004): Django's test flush truncates its tables without CASCADE and a foreign
key from a table it does not know makes that fail. Rows of deleted projects are removed by the
refresh job (analysis/rollups.py)."""

from django.db import migrations

SQL = """
ALTER TABLE analysis_task_rollup DROP CONSTRAINT IF EXISTS analysis_task_rollup_project_id_fkey;
ALTER TABLE analysis_step_rollup DROP CONSTRAINT IF EXISTS analysis_step_rollup_project_id_fkey;
ALTER TABLE analysis_task_rollup_day DROP CONSTRAINT IF EXISTS analysis_task_rollup_day_project_id_fkey;
ALTER TABLE analysis_step_rollup_day DROP CONSTRAINT IF EXISTS analysis_step_rollup_day_project_id_fkey;
"""


class Migration(migrations.Migration):
    dependencies = [("analysis", "0004_rollup_days")]

    operations = [migrations.RunSQL(SQL, migrations.RunSQL.noop)]
