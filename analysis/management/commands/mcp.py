"""`manage.py mcp --project P`: the MCP server over stdio, for an assistant on this machine
(docs/mcp.md). It sees project P only, as a read key of P would over `/mcp`."""

from __future__ import annotations

import logging
import sys

from django.core.management.base import BaseCommand, CommandError

from ingest.models import Project


class Command(BaseCommand):
    help = "Serve the MCP tools of one project over stdin/stdout."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="the project's name")

    def handle(self, *args, project, **options):
        found = Project.objects.filter(name=project).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        # stdout carries the protocol: every log line goes to stderr.
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is sys.stdout:
                handler.setStream(sys.stderr)
        from analysis.mcp import server

        server.serve_stdio(project=found)
