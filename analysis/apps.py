from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    name = "analysis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from analysis.signals import on_tasks_ended
        from ingest.services import tasks_ended

        tasks_ended.connect(on_tasks_ended, dispatch_uid="analysis.on_tasks_ended")
