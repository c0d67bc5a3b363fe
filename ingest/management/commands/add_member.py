from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ingest.models import Project, ProjectMembership
from ingest.services import member_add


class Command(BaseCommand):
    help = ("Make an existing user a member of a project (role 'member': sees its pages; 'admin': also "
            "manages its keys and members in Settings). Audited like the settings pages.")

    def add_arguments(self, parser):
        parser.add_argument("project")
        parser.add_argument("username")
        parser.add_argument("--role", choices=ProjectMembership.ROLES, default=ProjectMembership.ROLE_MEMBER)

    def handle(self, *args, project, username, role, **options):
        project_obj = Project.objects.filter(name=project).first()
        if project_obj is None:
            raise CommandError(f"no project named {project!r}")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r} (create it first, e.g. manage.py createsuperuser)")
        try:
            member_add(project=project_obj, user=user, role=role)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username!r} is now a {role} of {project!r}.")
