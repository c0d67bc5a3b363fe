"""Pre-aggregated latency rollups (docs/rollups.md): the dashboard's, the alerts' and the release
comparison's percentiles over days and months without scanning millions of raw rows.

This is the room's public face; other rooms use these names only:
- histograms.py: the log-bucket histogram and its percentile maths (pure);
- sql.py: the tables, their dimensions and the SQL that computes rollup rows from raw rows;
- refresh.py: the periodic refresh, the rebuild, retention, the watermark;
- reads.py: task and step summaries over a filter, whole hours rolled up, the edges raw;
- samples.py: device telemetry per device and hour, and its reads (the Devices page)."""

from analysis.rollups.histograms import (
    APPROXIMATE_BOUND,
    APPROXIMATE_NOTE,
    NBINS,
    RELATIVE_ERROR,
    Summary,
    bin_sql,
)
from analysis.rollups.reads import (
    STEP_FILTERS,
    TASK_FILTERS,
    binned_summaries,
    budget_sums,
    covered_hours,
    edge,
    rollup_where,
    sources,
    step_summaries,
    task_summaries,
    turn_summary,
)
from analysis.rollups.refresh import (
    REBUILD_WORKERS,
    hours_recompute,
    project_rebuild,
    rollups_rebuild,
    rollups_refresh,
    watermark,
    watermark_set,
)
from analysis.rollups.samples import SampleBucket, sample_buckets
from analysis.rollups.sql import (
    DAY,
    GROUP_COLUMNS,
    GROUP_SUMS,
    HOUR,
    HOURLY_TABLES,
    RELEASE_TABLE,
    STEP_GROUPS,
    TABLES,
    day_floor,
    group_rows_sql,
    hour_floor,
)

__all__ = [
    "APPROXIMATE_BOUND", "APPROXIMATE_NOTE", "DAY", "SampleBucket", "sample_buckets", "GROUP_COLUMNS", "GROUP_SUMS", "HOUR", "HOURLY_TABLES", "NBINS", "REBUILD_WORKERS", "RELATIVE_ERROR", "RELEASE_TABLE", "STEP_FILTERS",
    "STEP_GROUPS", "TABLES", "TASK_FILTERS", "Summary", "bin_sql", "binned_summaries", "budget_sums", "covered_hours",
    "day_floor", "edge", "group_rows_sql", "hour_floor", "hours_recompute", "project_rebuild", "rollup_where",
    "rollups_rebuild", "rollups_refresh", "sources", "step_summaries", "task_summaries", "turn_summary", "watermark",
    "watermark_set",
]
