"""Release comparison: statistics, the comparison selector, its API, charts and pages."""
