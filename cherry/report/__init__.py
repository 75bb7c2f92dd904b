"""Reporting: what the workflow shows from the records alone (never from a run in progress).

- `cherry.report.tables`: the records table with derived columns (``k``, case labels) and its views.
- `cherry.report.figures`: ``python -m cherry.report.figures NAME`` draws one figure (PNG and PDF).
- `cherry.report.summary`: ``python -m cherry.report.summary`` writes the Markdown summary.

Nothing is imported here, so ``import cherry.report`` stays cheap.
"""
