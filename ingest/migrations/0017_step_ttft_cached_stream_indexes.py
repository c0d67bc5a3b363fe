"""Search by the other values the OTLP mapper moves into the step's columns: TTFT
(`attr=gen_ai.response.time_to_first_chunk:0.18`, sent in seconds, stored in ms), the cached-token
count and the stream flag (filters.py `_column_match`). Partial B-trees on the steps that carry
one, as 0016 did for the token counts.

Without them the column OR'ed into the attributes' GIN condition made Postgres probe every task's
steps for a value few steps have: on the 10M-step query bench (quiet machine) a TTFT no step has
took 1,287 ms, a cached-token count 1,392 ms, `stream:true` 1,188 ms and `stream:false` 6,502 ms.
The stream flag gets an index per value, of the project alone (a few MB for 5M LLM steps); TTFT's
values are distinct (~100 MB there); the steps without a value are in none."""

from django.db import migrations

CREATE = ("CREATE INDEX step_ttft ON ingest_step (project_id, ttft_ms) WHERE ttft_ms IS NOT NULL;"
          "CREATE INDEX step_cached_tokens ON ingest_step (project_id, cached_tokens) WHERE cached_tokens IS NOT NULL;"
          # One per value, each the predicate the filter says (`streamed IS TRUE` / `IS FALSE`): the
          # planner estimates an IS test with the steps that have no flag left out, and `NOT
          # streamed` with them counted in (every non-model step), which made it probe every task.
          "CREATE INDEX step_streamed ON ingest_step (project_id) WHERE streamed IS TRUE;"
          "CREATE INDEX step_not_streamed ON ingest_step (project_id) WHERE streamed IS FALSE;")
DROP = ("DROP INDEX IF EXISTS step_ttft; DROP INDEX IF EXISTS step_cached_tokens; DROP INDEX IF EXISTS step_streamed;"
        " DROP INDEX IF EXISTS step_not_streamed;")


class Migration(migrations.Migration):
    dependencies = [("ingest", "0016_step_token_indexes")]

    operations = [migrations.RunSQL(CREATE, DROP)]
