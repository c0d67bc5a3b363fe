"""Tasks remember whether their name was given or derived: a derived name (a framework's
generic root span) is derived again from the task's agent steps as they arrive."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ingest", "0005_step_tool_evidence")]

    operations = [
        migrations.AddField("task", "name_given", models.BooleanField(default=False, db_default=False)),
        # Names stored before this came from task events or root spans: keep them as they are.
        migrations.RunSQL("UPDATE ingest_task SET name_given = true WHERE name <> ''", migrations.RunSQL.noop),
    ]
