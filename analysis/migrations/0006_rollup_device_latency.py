"""Time to first token and time per output token histograms in the step rollups, so the Devices
page's percentiles and ECDFs over long ranges read rollups instead of every LLM step
(analysis/rollups.py). Existing rollup rows have none of these figures yet, so the watermark is
cleared: readers use the raw rows until the next refresh rebuilds every hour."""

from django.db import migrations

COLUMNS = ("ADD COLUMN ttft_bins smallint[] NOT NULL DEFAULT '{}', ADD COLUMN ttft_counts integer[] NOT NULL DEFAULT '{}',"
           " ADD COLUMN tpot_bins smallint[] NOT NULL DEFAULT '{}', ADD COLUMN tpot_counts integer[] NOT NULL DEFAULT '{}'")
DROP = "DROP COLUMN ttft_bins, DROP COLUMN ttft_counts, DROP COLUMN tpot_bins, DROP COLUMN tpot_counts"

SQL = f"""
ALTER TABLE analysis_step_rollup {COLUMNS};
ALTER TABLE analysis_step_rollup_day {COLUMNS};
DELETE FROM analysis_rollup_state WHERE name = 'rollups';
"""

REVERSE = f"ALTER TABLE analysis_step_rollup {DROP}; ALTER TABLE analysis_step_rollup_day {DROP};"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0005_rollups_no_project_fk")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
