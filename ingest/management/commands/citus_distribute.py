"""`manage.py citus_distribute`: distribute a database that was migrated on plain PostgreSQL and
has since become a Citus coordinator (docs/scaling.md, step 6, "From one PostgreSQL to Citus").

The migrations distribute the tables only where Citus is installed when they run; a database
that grew on one PostgreSQL already has the schema Citus needs (the same keys on both engines),
so this applies the one step left, the migrations' own `distribute`: projects, keys and prices
become reference tables, the data tables are distributed by project co-located with tasks, and
the coordinator's copies of their rows are emptied. Every row is copied to the workers once, in
one transaction: nothing changes if it fails. Tables Citus already holds are left as they are.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from agentops import citus
from ingest import distribution as d


class Command(BaseCommand):
    help = ("Distribute the tables of a database migrated on plain PostgreSQL that is now a Citus "
            "coordinator with its workers added (CREATE EXTENSION citus; SELECT citus_add_node(...)).")

    def handle(self, *args, **options):
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("this database has migrations to apply: run `manage.py migrate` first "
                               "(on a Citus coordinator the migrations distribute the tables themselves)")
        with connection.cursor() as cursor:
            if not d.citus_present(cursor):
                raise CommandError(f"Citus is not installed in database {connection.settings_dict['NAME']!r}: "
                                   "run CREATE EXTENSION citus there (and on every worker), then "
                                   "SELECT citus_add_node('<host>', <port>) for each worker")
            if not citus.workers_of(connection):
                raise CommandError("no worker is registered on this coordinator: "
                                   "SELECT citus_add_node('<host>', <port>) for each worker first")
            reference, distributed = d.undistributed(cursor)
        if not reference and not distributed:
            self.stdout.write("nothing to do: every table is distributed already")
            return
        self.stdout.write(f"distributing {len(reference)} reference and {len(distributed)} distributed "
                          "tables; every row is copied to the workers once, in one transaction ...")
        started = time.monotonic()
        with transaction.atomic(using=DEFAULT_DB_ALIAS), connection.cursor() as cursor:
            d.distribute(cursor, reference=reference, distributed=distributed)
        self.stdout.write(f"done in {time.monotonic() - started:.1f}s: "
                          f"{', '.join(reference + distributed)}")
