"""Search by a provider or tool-call id the OTLP mapper moved into the step's columns
(`attr=gen_ai.system:openai` matches `provider`, `attr=gen_ai.tool.call.id:call_…` matches
`tool_call_id`; filters.py `_attr_conditions`): partial B-trees on steps for the steps that have one.

Without them the attributes' GIN index could not serve the search alone (the column is OR'ed in)
and Postgres probed every task's steps in turn: on the 10M-step query bench 2.2 s for the provider
and 2.2 s for a call id, 47 ms and ~0.1 s with them. Partial, so steps without the value cost them
nothing. Created on the partitioned parent: every weekly partition gets them."""

from django.db import migrations

CREATE = ("CREATE INDEX step_provider_time ON ingest_step (project_id, provider, started_at) WHERE provider <> '';"
          "CREATE INDEX step_tool_call_id ON ingest_step (project_id, tool_call_id) WHERE tool_call_id <> '';")
DROP = "DROP INDEX IF EXISTS step_provider_time; DROP INDEX IF EXISTS step_tool_call_id;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0013_device_host_by_hand")]

    operations = [migrations.RunSQL(CREATE, DROP)]
