"""Search by step duration ("a task with a step over N ms") and a session list that reads no
table rows: a B-tree on steps (project, duration), and the session index made covering
(duration and status included, so the list's GROUP BY runs on an index-only scan).

Without the first, a rare threshold (no step over 2 s) made Postgres probe every task's steps
in turn: 11.7 s at 10M steps; with it, the range of long steps is read from the index (docs/ui.md,
"Search"). Created on the partitioned parent: every weekly partition gets it."""

from django.db import migrations, models

CREATE = "CREATE INDEX step_project_duration ON ingest_step (project_id, duration_ms);"
DROP = "DROP INDEX IF EXISTS step_project_duration;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0007_search_and_session_indexes")]

    operations = [
        migrations.RunSQL(CREATE, DROP),
        migrations.RemoveIndex(model_name="task", name="task_project_session"),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(condition=models.Q(("session_id", ""), _negated=True),
                               fields=["project", "session_id", "started_at"], include=("duration_ms", "status"),
                               name="task_session_covering"),
        ),
    ]
