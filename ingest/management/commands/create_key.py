from django.core.management.base import BaseCommand, CommandError

from ingest.models import IngestKey, Project
from ingest.services import key_create


class Command(BaseCommand):
    help = "Create a key for a project and print it on the last line of stdout."

    def add_arguments(self, parser):
        parser.add_argument("project")
        parser.add_argument("--scope", action="append", choices=IngestKey.SCOPES,
                            help="ingest (default), read or admin; repeat for several")
        parser.add_argument("--name", default="")

    def handle(self, *args, project, scope, name, **options):
        try:
            project_obj = Project.objects.get(name=project)
        except Project.DoesNotExist:
            raise CommandError(f"no project named {project!r}") from None
        _, plaintext = key_create(project=project_obj, scopes=scope or [IngestKey.SCOPE_INGEST], name=name)
        self.stdout.write(f"New {'+'.join(scope or ['ingest'])} key for {project!r} (shown once):")
        self.stdout.write(plaintext)
