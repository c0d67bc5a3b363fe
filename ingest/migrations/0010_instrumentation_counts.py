# Per hour, service, instrumentation scope and step kind: spans and the fields they carried (ingest/instrumentation.py).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0009_device_host_and_serving_metrics'),
    ]

    operations = [
        migrations.CreateModel(
            name='InstrumentationCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField()),
                ('service', models.CharField(blank=True, default='', max_length=200)),
                ('scope_name', models.CharField(blank=True, default='', max_length=200)),
                ('scope_version', models.CharField(blank=True, default='', max_length=200)),
                ('sdk_name', models.CharField(blank=True, default='', max_length=200)),
                ('sdk_language', models.CharField(blank=True, default='', max_length=200)),
                ('sdk_version', models.CharField(blank=True, default='', max_length=200)),
                ('release', models.CharField(blank=True, default='', max_length=200)),
                ('environment', models.CharField(blank=True, default='', max_length=100)),
                ('kind', models.CharField(max_length=16)),
                ('spans', models.BigIntegerField(default=0)),
                ('model', models.BigIntegerField(default=0)),
                ('tokens', models.BigIntegerField(default=0)),
                ('ttft', models.BigIntegerField(default=0)),
                ('responses', models.BigIntegerField(default=0)),
                ('call_ids', models.BigIntegerField(default=0)),
                ('server_address', models.BigIntegerField(default=0)),
                ('device', models.BigIntegerField(default=0)),
                ('serving', models.BigIntegerField(default=0)),
                ('tool_name', models.BigIntegerField(default=0)),
                ('tool_args', models.BigIntegerField(default=0)),
                ('args_redacted', models.BigIntegerField(default=0)),
                ('tool_result', models.BigIntegerField(default=0)),
                ('result_redacted', models.BigIntegerField(default=0)),
                ('tool_call_id', models.BigIntegerField(default=0)),
                ('session', models.BigIntegerField(default=0)),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ingest.project')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('project', 'hour', 'service', 'scope_name', 'scope_version', 'sdk_name', 'sdk_language', 'sdk_version', 'release', 'environment', 'kind'), name='instrumentation_count_key')],
            },
        ),
    ]
