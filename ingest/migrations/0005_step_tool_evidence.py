"""Steps keep the evidence dependencies are inferred from: the tool's result (truncated), the id
of the call a tool step answered, and the call ids an LLM response requested. The columns get
database defaults, so writers that name their columns (COPY loaders) need not know them."""

import django.contrib.postgres.fields
from django.db import migrations, models

ADD = """
ALTER TABLE ingest_step
    ADD COLUMN tool_result text NOT NULL DEFAULT '',
    ADD COLUMN tool_call_id varchar(128) NOT NULL DEFAULT '',
    ADD COLUMN tool_call_ids varchar(128)[] NOT NULL DEFAULT '{}';
"""
DROP = "ALTER TABLE ingest_step DROP COLUMN tool_result, DROP COLUMN tool_call_id, DROP COLUMN tool_call_ids;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0004_partition_steps_and_samples")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(ADD, DROP)],
            state_operations=[
                migrations.AddField("step", "tool_result", models.TextField(blank=True, default="")),
                migrations.AddField("step", "tool_call_id", models.CharField(blank=True, default="", max_length=128)),
                migrations.AddField("step", "tool_call_ids", django.contrib.postgres.fields.ArrayField(
                    base_field=models.CharField(max_length=128), blank=True, default=list, size=None)),
            ],
        ),
    ]
