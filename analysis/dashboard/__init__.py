"""The read side (docs/ui.md, docs/api.md): selectors and the dashboard's reads, chart builders,
the pages, the read API and its serializers, sessions, the pipeline's status, the task-diff
pages, and the exports."""
