"""TaskAnalysis.limited: what the analysis of a task too large to analyse fully covered (analysis/engine/batch.py, HUGE_TASK_STEPS)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('analysis', '0017_citus_local_copies'),
    ]

    operations = [
        migrations.AddField(
            model_name='taskanalysis',
            name='limited',
            field=models.JSONField(blank=True, default=None, null=True),
        ),
    ]
