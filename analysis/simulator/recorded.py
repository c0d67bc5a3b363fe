"""Traces recorded from real agent frameworks (tests/fixtures/agents/): replay their OTLP
request bodies through the ingest path a live exporter reaches, and read their labels.

A recorded family is a folder of `NNNN.pb` bodies (ExportTraceServiceRequest, protobuf, exactly
as the framework's OTLP exporter posted them; `NNNN.json` for an exporter that posts OTLP/JSON,
as Node's does), where the family recorded its inference server's telemetry too `metrics/NNNN.pb`
(ExportMetricsServiceRequest: the server's and its GPUs' scrapes), `labels.jsonl` (what really happened, in the
format of the simulator's labels) and `runs.jsonl` (what each run did). See
tests/fixtures/agents/README.md for how they are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.simulator.evaluation import read_labels
from ingest import otlp
from ingest.services import batch_store


@dataclass(frozen=True)
class Replayed:
    family: str
    requests: int
    spans: int
    rejected: int
    problems: tuple[str, ...]


MEDIA = {".pb": otlp.PROTOBUF, ".json": otlp.JSON}
METRICS = "metrics"


def bodies(directory: Path) -> list[Path]:
    """A family's request bodies in the order they were sent (protobuf or OTLP/JSON)."""
    return sorted(p for p in Path(directory).iterdir() if p.suffix in MEDIA and p.stem.isdigit())


def metric_bodies(directory: Path) -> list[Path]:
    """A family's metrics bodies (its server's and GPUs' scrapes) in the order they were sent."""
    folder = Path(directory) / METRICS
    return sorted(p for p in folder.glob("*.pb") if p.stem.isdigit()) if folder.is_dir() else []


def families(directory: Path) -> list[Path]:
    """The family folders under `directory` (or `directory` itself if it is one)."""
    directory = Path(directory)
    if bodies(directory):
        return [directory]
    return sorted(p for p in directory.iterdir() if p.is_dir() and bodies(p))


def replay(*, project, directory: Path) -> Replayed:
    """Store every recorded request of one family in `project`, in the order it was sent: its
    telemetry first (samples are read by their own timestamps), then its traces."""
    directory = Path(directory)
    spans = rejected = 0
    problems: list[str] = []
    for path in metric_bodies(directory):
        decoded = otlp.decode_metrics(path.read_bytes(), media=otlp.PROTOBUF)
        batch_store(project=project, batch=decoded.batch)
        rejected += decoded.rejected
        problems.extend(f"{METRICS}/{path.name}: {p}" for p in decoded.problems)
    sent = bodies(directory)
    for path in sent:
        decoded = otlp.decode_traces(path.read_bytes(), media=MEDIA[path.suffix])
        batch_store(project=project, batch=decoded.batch)
        spans += len(decoded.batch.steps)
        rejected += decoded.rejected
        problems.extend(f"{path.name}: {p}" for p in decoded.problems)
    return Replayed(directory.name, len(sent), spans, rejected, tuple(problems))


def labels(directory: Path) -> list[dict]:
    path = Path(directory) / "labels.jsonl"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return read_labels(fh)
