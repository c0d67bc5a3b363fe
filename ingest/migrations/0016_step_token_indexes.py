"""Search by a token count the OTLP mapper moved into the step's columns
(`attr=gen_ai.usage.input_tokens:1234` matches `input_tokens`, likewise output tokens; filters.py
`_attr_conditions`): partial B-trees on the steps that carry one, as 0014 did for the provider.

Without them the column OR'ed into the attributes' GIN condition made Postgres probe every task's
steps: on the 10M-step query bench (load 3.4-3.8) a count no step has took 2,215 ms and one only
the 50,000-step task has 3,324 ms; 281 and 434 ms with them. The token counts repeat a great deal,
so B-tree deduplication keeps each to ~34 MB for 5M LLM steps (+7 bytes a step on disk). TTFT, the
cached-token count and the stream flag stay unindexed: an exact-float or a yes/no search is rare,
and each index is paid for by every ingested LLM step."""

from django.db import migrations

CREATE = ("CREATE INDEX step_input_tokens ON ingest_step (project_id, input_tokens) WHERE input_tokens IS NOT NULL;"
          "CREATE INDEX step_output_tokens ON ingest_step (project_id, output_tokens) WHERE output_tokens IS NOT NULL;")
DROP = "DROP INDEX IF EXISTS step_input_tokens; DROP INDEX IF EXISTS step_output_tokens;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0015_membership_roles_and_audit")]

    operations = [migrations.RunSQL(CREATE, DROP)]
