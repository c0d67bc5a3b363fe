"""The time per user turn in the task rollups: the timed tasks with a session (turns), their sum,
longest and histogram, per row, so that the Latency page's charts of the time per turn and the
overview's turn percentiles over months read rollup rows, not every turn (500,000 turns of
all time took 400–560 ms to bin at 10M steps). Existing rows have none of these figures yet, so
the watermark is cleared: readers use the raw rows until the next refresh rebuilds every hour."""

from django.db import migrations

COLUMNS = ("ADD COLUMN turns integer NOT NULL DEFAULT 0, ADD COLUMN turn_sum_ms double precision NOT NULL DEFAULT 0,"
           " ADD COLUMN turn_max_ms double precision,"
           " ADD COLUMN turn_bins smallint[] NOT NULL DEFAULT '{}', ADD COLUMN turn_counts integer[] NOT NULL DEFAULT '{}'")
DROP = ("DROP COLUMN turns, DROP COLUMN turn_sum_ms, DROP COLUMN turn_max_ms, DROP COLUMN turn_bins,"
        " DROP COLUMN turn_counts")

SQL = f"""
ALTER TABLE analysis_task_rollup {COLUMNS};
ALTER TABLE analysis_task_rollup_day {COLUMNS};
DELETE FROM analysis_rollup_state WHERE name = 'rollups';
"""

REVERSE = f"ALTER TABLE analysis_task_rollup {DROP}; ALTER TABLE analysis_task_rollup_day {DROP};"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0013_sample_rollup")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
