"""The first-run setup `make demo` does: the migrations, user demo/demo, project demo with an
ingest key, the example model prices when none are entered, and (once) a simulated week of
traffic. Safe to run on every start.

Run as `manage.py demo_setup`, it stops the embedded PostgreSQL and Redis that it started when it
ends, normally, by an error, Ctrl-C or SIGTERM (runstack starts them again for itself); those it
found running stay."""

import signal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand

from analysis.models import ModelPrice
from ingest.models import IngestKey, Project, ProjectMembership
from ingest.services import key_create, member_add

EXAMPLE_PRICES = settings.BASE_DIR / "docs" / "prices.example.csv"


class Command(BaseCommand):
    help = "Create the demo user, project and key, and seed demo data on first start."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="the port runstack will serve on")

    def handle(self, *args, **options):
        if not getattr(self, "_called_from_command_line", False):
            # From another program (call_command, as the suite does): the services this process
            # started are that program's.
            return self._setup(**options)
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            return self._setup(**options)
        finally:
            from django.db import connections

            from agentops import embedded

            connections.close_all()
            embedded.stop_started(settings.DATA_DIR)

    def _setup(self, **options):
        call_command("migrate", interactive=False, verbosity=0)
        User = get_user_model()
        user, created = User.objects.get_or_create(username="demo", defaults={"is_staff": True})
        if created:
            user.set_password("demo")
            user.save()
        project, _ = Project.objects.get_or_create(name="demo")
        if not ProjectMembership.objects.filter(project=project, user=user).exists():
            member_add(project=project, user=user, role=ProjectMembership.ROLE_ADMIN)
        # The demo user enters model prices in the admin (token cost; none is built in). A fresh demo
        # starts with the illustrative prices of docs/prices.example.csv, so its cost tiles show
        # dollars rather than "no price"; prices already entered are left as they are.
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label="analysis",
                                                             content_type__model="modelprice"))
        if not ModelPrice.objects.exists() and EXAMPLE_PRICES.exists():
            call_command("load_prices", str(EXAMPLE_PRICES), stdout=self.stdout)
        key_file = settings.DATA_DIR / "demo-ingest-key"
        if not key_file.exists() or not IngestKey.objects.filter(project=project, revoked_at=None).exists():
            _, plaintext = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST, IngestKey.SCOPE_READ],
                                      name="demo")
            key_file.write_text(plaintext)
            key_file.chmod(0o600)
        seeded = settings.DATA_DIR / "demo-seeded"
        if not seeded.exists() and "simulate" in _commands():
            self.stdout.write("Seeding the demo project with a simulated week of agent traffic…")
            call_command("simulate", project="demo", tasks=3000, since="7d", seed=7,
                         labels=str(settings.DATA_DIR / "demo-labels.jsonl"))
            if "analyze" in _commands():
                call_command("analyze", all=True)
            seeded.write_text("ok\n")
        self.stdout.write(f"Log in at http://127.0.0.1:{options['port']} as demo / demo.")
        self.stdout.write(f"Ingest key of project 'demo' (also in {key_file}):")
        self.stdout.write(key_file.read_text().strip())


def _interrupt(signum, frame):
    """SIGTERM ends the setup as Ctrl-C does, through the `finally` that stops the services."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt("SIGTERM")


def _commands():
    from django.core.management import get_commands

    return get_commands()
