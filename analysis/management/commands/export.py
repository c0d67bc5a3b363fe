"""`manage.py export ENTITY --project P --out FILE`: the bulk export of the API
(`GET /api/v1/export/<entity>`) written to a file, with its progress on stderr."""

from __future__ import annotations

import os
import sys

from django.core.management.base import BaseCommand, CommandError

from analysis.dashboard import export_arrow, exports
from analysis.filters import FilterError
from ingest.models import Project


class Command(BaseCommand):
    help = "Export a project's tasks, steps, findings or resource samples as Parquet, CSV or JSON Lines."

    def add_arguments(self, parser):
        parser.add_argument("entity", choices=exports.ENTITIES)
        parser.add_argument("--project", required=True, help="the project's name")
        parser.add_argument("--format", choices=list(exports.FORMATS), default=None,
                            help="default: from --out's extension, else parquet")
        parser.add_argument("--out", required=True, help="the file to write ('-' for stdout)")
        parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                            help="a filter of the API (release=v3, kind=llm, since=2026-11-01T00:00:00Z, ...);"
                                 " repeat for several")

    def handle(self, *args, entity, project, format, out, filter, **options):
        found = Project.objects.filter(name=project).first()
        if found is None:
            raise CommandError(f"--project: no project {project!r}")
        params = {}
        for item in filter:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CommandError(f"--filter: expected KEY=VALUE, got {item!r}")
            params[key.strip()] = value
        extension = os.path.splitext(out)[1].lstrip(".").lower()
        params["format"] = format or (extension if extension in exports.FORMATS else "parquet")
        try:
            export = exports.parse_export(project=found, entity=entity, params=params)
        except FilterError as exc:
            raise CommandError(str(exc)) from None
        err = sys.stderr

        def progress(rows: int, seconds: float) -> None:
            err.write(f"\rexport {entity}: {rows:,} rows, {rows / max(seconds, 1e-9):,.0f} rows/s")
            err.flush()

        target = sys.stdout.buffer if out == "-" else open(out, "wb")  # noqa: SIM115
        rows = 0

        def counted(r: int, s: float) -> None:
            nonlocal rows
            rows = r
            progress(r, s)

        try:
            for chunk in export_arrow.stream(export, progress=counted):
                target.write(chunk)
        finally:
            if target is not sys.stdout.buffer:
                target.close()
        err.write(f"\rexport {entity}: {rows:,} rows written to {out} ({export.format})\n")
