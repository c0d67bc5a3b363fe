"""Why was this one slow (docs/analysis.md): a task against its typical run or another task, turn
by turn. The maths is pure: runs.py cuts a run into turns, alignment.py aligns two sequences,
typical_run.py builds the typical run, explanation.py the items that add up to the difference;
diff.py reads the runs and builds the diff the API and pages serve."""
