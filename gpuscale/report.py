"""Rich tables and HTML for records, importable as ``gpuscale.report`` (``audit_table(summary)``
renders a session's audit); ``gpuscale/records/report.py`` holds them."""

from __future__ import annotations

from .records.report import (
    audit_table,
    compare_table,
    explain_table,
    memory_table,
    records_table,
    result_html,
    result_table,
)

__all__ = [
    "audit_table",
    "result_table",
    "result_html",
    "records_table",
    "compare_table",
    "explain_table",
    "memory_table",
]
