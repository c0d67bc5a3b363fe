from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from ingest.models import Project
from ingest.services import data_delete


class Command(BaseCommand):
    help = ("Delete a project's data (--project NAME [--delete-project]) or data older than "
            "N days (--older-than N, all projects unless --project).")

    def add_arguments(self, parser):
        parser.add_argument("--project")
        parser.add_argument("--older-than", type=int, metavar="DAYS")
        parser.add_argument("--delete-project", action="store_true",
                            help="also delete the project itself, its keys and its members' access")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def handle(self, *args, project, older_than, delete_project, yes, **options):
        if not project and older_than is None:
            raise CommandError("give --project NAME, --older-than DAYS, or both")
        if older_than is not None and older_than < 1:
            raise CommandError("--older-than must be at least 1 day")
        target = None
        if project:
            target = Project.objects.filter(name=project).first()
            if target is None:
                raise CommandError(f"no project named {project!r}")
        before = timezone.now() - timedelta(days=older_than) if older_than is not None else None
        what = (f"project {project!r}" if project else "all projects") + (
            f", data older than {older_than} days" if before else ", all of its data")
        if not yes and input(f"Delete {what}? Type 'yes': ").strip() != "yes":
            raise CommandError("nothing deleted")
        deleted = data_delete(project=target, before=before,
                              progress=lambda n: self.stderr.write(f"\r{n} tasks deleted", ending=""))
        self.stderr.write("")
        if delete_project and target is not None and before is None:
            target.delete()
            deleted["project"] = 1
        self.stdout.write(", ".join(f"{v} {k}" for k, v in deleted.items()) + " deleted.")
