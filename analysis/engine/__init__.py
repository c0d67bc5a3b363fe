"""Per-task analysis (docs/analysis.md): the detectors, baselines, hardware verdicts, critical path,
time budget and what-if of one task; the claims that keep two workers off one task, the batch
path and the sweep; the Celery tasks and the ingest signal that drive them."""
