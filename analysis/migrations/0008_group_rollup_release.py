"""Release totals of the group rollups (analysis/rollups.py, `release_totals_recompute`): per
release, environment, task name and group, the merge of every rolled-up hour, so a comparison of
two releases over all their time reads one row per group instead of one per group and day. The
histogram rows of the group rollups get their own dimension names (h_step, …), so the watermark
is cleared: the next refresh rebuilds every hour."""

from django.db import migrations

SQL = """
CREATE TABLE analysis_group_rollup_release (LIKE analysis_group_rollup INCLUDING DEFAULTS);
CREATE INDEX analysis_group_rollup_release_key ON analysis_group_rollup_release (project_id, release);
DELETE FROM analysis_rollup_state WHERE name = 'rollups';
"""

REVERSE = "DROP TABLE analysis_group_rollup_release;"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0007_group_rollup")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
