"""Every finding carries a confidence and the one line it rests on; findings stored before this
were all counted as sure, so they stay `high`."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("analysis", "0008_group_rollup_release")]

    operations = [
        migrations.AddField("finding", "confidence",
                            models.CharField(default="high", max_length=8, db_default="high")),
        migrations.AddField("finding", "confidence_reason",
                            models.TextField(blank=True, default="", db_default="")),
    ]
