"""Project members get a role (ProjectMembership) and changes to keys, members and prices an audit
trail (AuditEntry). Every existing membership becomes an admin: before roles, every member could
do everything the product offered (and the command line created the memberships as the admins'),
so nobody loses a right they had."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def memberships_from_members(apps, schema_editor):
    Project = apps.get_model("ingest", "Project")
    Membership = apps.get_model("ingest", "ProjectMembership")
    old = Project.members.through.objects.values_list("project_id", "user_id")
    Membership.objects.bulk_create(
        [Membership(project_id=p, user_id=u, role="admin") for p, u in old.iterator()], batch_size=1000)


def members_from_memberships(apps, schema_editor):
    Project = apps.get_model("ingest", "Project")
    Membership = apps.get_model("ingest", "ProjectMembership")
    Old = Project.members.through
    Old.objects.bulk_create(
        [Old(project_id=p, user_id=u) for p, u in Membership.objects.values_list("project_id", "user_id")],
        batch_size=1000)


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0014_step_search_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ProjectMembership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('admin', 'admin'), ('member', 'member')], default='member', max_length=16)),
                ('added_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='ingest.project')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('project', 'user'), name='membership_unique_user')],
            },
        ),
        migrations.RunPython(memberships_from_members, members_from_memberships),
        migrations.RemoveField(model_name='project', name='members'),
        migrations.AddField(
            model_name='project',
            name='members',
            field=models.ManyToManyField(blank=True, related_name='projects', through='ingest.ProjectMembership', to=settings.AUTH_USER_MODEL),
        ),
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_name', models.CharField(max_length=150)),
                ('action', models.CharField(max_length=32)),
                ('target', models.CharField(blank=True, default='', max_length=300)),
                ('details', models.JSONField(blank=True, default=dict)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ingest.project')),
            ],
            options={
                'ordering': ['-at', '-id'],
                'indexes': [models.Index(fields=['project', '-at', '-id'], name='audit_project_time')],
            },
        ),
    ]
