"""Search by tool (`tool=`, `attr=gen_ai.tool.name:…`) and the list of known tools: a partial
B-tree on steps (project, tool_name, started_at) for the steps that call a tool.

Without it a rare tool made Postgres probe every task's steps in turn, as a rare step duration did
before 0008; the tool suggestions read the distinct names from it one index probe per name
(analysis.filters.step_values). Partial, so the steps that call no tool cost it nothing. Created
on the partitioned parent: every weekly partition gets it."""

from django.db import migrations

CREATE = "CREATE INDEX step_tool_time ON ingest_step (project_id, tool_name, started_at) WHERE tool_name <> '';"
DROP = "DROP INDEX IF EXISTS step_tool_time;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0010_instrumentation_counts")]

    operations = [migrations.RunSQL(CREATE, DROP)]
