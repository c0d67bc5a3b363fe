from django.core.management.base import BaseCommand, CommandError

from ingest.models import IngestKey
from ingest.services import key_revoke


class Command(BaseCommand):
    help = "Revoke a key by its prefix (the part after 'ao_', as Settings lists it). Audited."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix, **options):
        key = IngestKey.objects.select_related("project").filter(prefix=prefix.removeprefix("ao_")).first()
        if key is None:
            raise CommandError(f"no key with prefix {prefix!r}")
        if not key_revoke(key=key):
            raise CommandError(f"key {prefix!r} of {key.project.name!r} was already revoked")
        self.stdout.write(f"Revoked key {key.prefix!r} of {key.project.name!r}.")
