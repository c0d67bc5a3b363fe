from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    name = "analysis"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from analysis.engine.signals import on_tasks_ended
        from analysis.rollups.refresh import on_project_deleted
        from ingest.models import Project
        from ingest.services import tasks_ended

        tasks_ended.connect(on_tasks_ended, dispatch_uid="analysis.on_tasks_ended")
        post_delete.connect(on_project_deleted, sender=Project, dispatch_uid="analysis.on_project_deleted")
