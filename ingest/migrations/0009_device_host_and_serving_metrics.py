"""Devices learn where they sit (host, gpu|server) so a call finds its server's GPUs without
hw.id; samples get the DCGM clock fields and the inference servers' KV-cache and preemption
series. Adding nullable columns to the partitioned ingest_resourcesample reaches every partition."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ingest", "0008_step_duration_and_covering_session_index")]

    operations = [
        migrations.AddField("device", "host", models.CharField(blank=True, default="", db_default="", max_length=200)),
        migrations.AddField("device", "role", models.CharField(blank=True, default="", db_default="", max_length=16)),
        *(migrations.AddField("resourcesample", name, models.FloatField(null=True))
          for name in ("sm_clock_mhz", "sm_clock_max_mhz", "clock_reasons", "kv_cache_usage", "preemptions")),
    ]
