"""`manage.py rollups_rebuild [--project NAME]`: recompute the latency rollups from the raw rows
(all history). Without --project every project is rebuilt and the refresh job's watermark moves
to the start of the rebuild; the periodic job does the same on its first run."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from analysis import rollups
from ingest.models import Project


class Command(BaseCommand):
    help = "Recompute the latency rollups (docs/rollups.md) from the raw tasks and steps."

    def add_arguments(self, parser):
        parser.add_argument("--project", help="project name (default: every project)")

    def handle(self, *args, **opts):
        project = None
        if opts["project"]:
            project = Project.objects.filter(name=opts["project"]).first()
            if project is None:
                raise CommandError(f"no project named {opts['project']!r}")
        started = time.monotonic()
        progress = (lambda text: self.stderr.write(text)) if opts["verbosity"] > 1 else None
        hours = rollups.rollups_rebuild(project=project, progress=progress)
        for name, n in hours.items():
            self.stdout.write(f"{name}: {n} hours rolled up")
        self.stdout.write(f"done in {time.monotonic() - started:.1f} s")
