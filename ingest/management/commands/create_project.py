from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from ingest.services import project_create


class Command(BaseCommand):
    help = "Create a project and print one new ingest key on the last line of stdout."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        try:
            project, plaintext = project_create(name=name)
        except IntegrityError:
            raise CommandError(f"a project named {name!r} already exists") from None
        self.stdout.write(f"Created project {project.name!r}. Its ingest key (shown once):")
        self.stdout.write(plaintext)
