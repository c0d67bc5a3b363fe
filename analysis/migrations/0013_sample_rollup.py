"""Device telemetry per device and hour (analysis/rollups/samples.py): the Devices page's small
multiples over days and weeks read these rows instead of every resource sample (a GPU scraped
every 15 s sends 5,760 a day). Plain SQL like the other rollup tables (0002): no model, no
foreign key. Per metric: readings, their sum (for the mean), lowest and highest. The watermark
is cleared so the next refresh rebuilds every rollup, this table included."""

from django.db import migrations

# The metric column prefixes of analysis.rollups.samples.SAMPLE_METRICS as of this migration.
METRICS = ("util", "queue", "running", "kv", "clock", "clock_max", "power", "power_limit", "temp")
COLUMNS = ",\n".join(f"    {m}_n integer NOT NULL, {m}_sum double precision, {m}_min double precision,"
                     f" {m}_max double precision" for m in METRICS)

SQL = f"""
CREATE TABLE analysis_sample_rollup (
    project_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    device varchar(200) NOT NULL,
    samples integer NOT NULL,
{COLUMNS},
    reasons bigint NOT NULL,
    slowed integer NOT NULL
);
CREATE INDEX analysis_sample_rollup_device_hour ON analysis_sample_rollup (project_id, device, hour);
DELETE FROM analysis_rollup_state WHERE name = 'rollups';
"""

REVERSE = "DROP TABLE analysis_sample_rollup;"


class Migration(migrations.Migration):
    dependencies = [("analysis", "0012_learned_dependencies")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
