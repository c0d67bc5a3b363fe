"""Search and sessions: a GIN index on the words of a step's error and tool arguments (the
task list's `q=` and `error=`, STEP_SEARCH_TSVECTOR), a GIN jsonb_path_ops index on step
attributes (`attr=key:value`), and tasks by (project, session id).

Full-text (tsvector) rather than trigrams: pg_trgm is a contrib extension that the embedded
Postgres of the zero-setup default (pgserver) does not ship, and the same code must run there
and in production; docs/ui.md ("Search") has the EXPLAIN at 10M steps. Created on the
partitioned parent, so every weekly partition, present and future, gets them."""

from django.db import migrations, models

# Must stay equal to ingest.models.STEP_SEARCH_TSVECTOR (a test checks the planner uses it).
SEARCH = "to_tsvector('simple'::regconfig, translate(error || ' ' || coalesce(tool_args::text, ''), '<>', '  '))"

CREATE = f"""
CREATE INDEX step_search_text ON ingest_step USING gin (({SEARCH}));
CREATE INDEX step_attributes ON ingest_step USING gin (attributes jsonb_path_ops);
"""
DROP = "DROP INDEX IF EXISTS step_search_text; DROP INDEX IF EXISTS step_attributes;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0006_task_name_given")]

    operations = [
        migrations.RunSQL(CREATE, DROP),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(condition=models.Q(("session_id", ""), _negated=True),
                               fields=["project", "session_id", "started_at"], name="task_project_session"),
        ),
    ]
