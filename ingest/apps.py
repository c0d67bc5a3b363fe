from django.apps import AppConfig


def _group_by_whole_keys() -> None:
    """Django shortens a GROUP BY that holds a model's primary key to that key alone, which
    Postgres accepts only for a whole primary key. The data tables' database keys are wider than
    Django's `id` (ingest 0018, analysis 0015 and 0016: project_id is in them, for Citus; steps
    and samples since 0004), so for them the GROUP BY keeps every column it names. Set on the
    backend's features class, so that every connection of every thread has it before its first
    query."""
    from django.db.backends.postgresql.features import DatabaseFeatures

    from ingest import distribution

    if getattr(DatabaseFeatures, "_whole_keys", False):
        return
    wide = frozenset(distribution.DISTRIBUTED)
    shortened = DatabaseFeatures.allows_group_by_selected_pks_on_model

    def allows_group_by_selected_pks_on_model(self, model):
        return model._meta.db_table not in wide and shortened(self, model)

    DatabaseFeatures.allows_group_by_selected_pks_on_model = allows_group_by_selected_pks_on_model
    DatabaseFeatures._whole_keys = True


class IngestConfig(AppConfig):
    name = "ingest"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        _group_by_whole_keys()
