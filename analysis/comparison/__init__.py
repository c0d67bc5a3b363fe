"""Why was this one slow (docs/analysis.md): a task against its typical run or another task, turn
by turn; diff.py is the maths (pure), explain.py reads the runs and builds the answer."""
