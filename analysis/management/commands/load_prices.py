"""`manage.py load_prices FILE`: the price table (analysis.models.ModelPrice) from a CSV or JSON
file: columns/fields model, input_per_million, output_per_million, effective_from (a date or an
RFC 3339 timestamp, UTC when no offset), optional note. A (model, effective_from) already in the
table takes the file's prices. All or nothing: a bad line names itself and nothing is stored."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from analysis.costs import PriceFileError, prices_load, read_price_file


class Command(BaseCommand):
    help = "Load model prices (US dollars per million input and output tokens) from a CSV or JSON file."

    def add_arguments(self, parser):
        parser.add_argument("file", help="a .csv (with a header row) or .json (a list of objects) file")

    def handle(self, *args, file, **options):
        try:
            rows = read_price_file(file)
        except PriceFileError as exc:
            raise CommandError(str(exc)) from None
        if not rows:
            raise CommandError(f"{file}: no prices in it")
        created, updated = prices_load(rows=rows)
        models = len({r.model for r in rows})
        self.stdout.write(f"{created} prices added, {updated} updated, for {models} model{'s' * (models != 1)}")
