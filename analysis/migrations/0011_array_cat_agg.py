"""An aggregate that concatenates arrays across rows (as PostgreSQL's documentation's
`array_accum` example): the rollups merge a day's hourly histograms within each row with it
(analysis/rollups/sql.py, _days_sql) instead of sorting every (row, bucket) pair."""

from django.db import migrations

SQL = """
CREATE AGGREGATE agentops_array_cat_agg(anycompatiblearray) (
    SFUNC = array_cat, STYPE = anycompatiblearray, INITCOND = '{}'
)"""
REVERSE = "DROP AGGREGATE IF EXISTS agentops_array_cat_agg(anycompatiblearray)"


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0010_prices"),
    ]

    operations = [migrations.RunSQL(SQL, REVERSE)]
