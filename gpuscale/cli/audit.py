"""``gpuscale audit report``: the backend audit of a run, as a table."""

from __future__ import annotations

import click

from .. import audit
from ..records import report
from .base import CONTEXT, Group, emit, reader
from .latest import latest


@click.group("audit", cls=Group, context_settings=CONTEXT)
def audit_group():
    """Read the backend audit of a run: which chunk library every task's output was."""


@reader(audit_group, "report", "path", "[DIR_OR_RECORD]", "the audit")
def audit_report(path, as_json):
    """The audit of a result record (JSON) or a trace folder (its summary.json) as a table:
    task outputs by prefix with their type and bytes, chunks of another family than the
    backend's with their likely fix, and family changes (host <-> device). Without a path:
    the latest run's record (under the results dir)."""
    if path is None:
        path = latest("the backend audit", with_audit=True).path
    a, label = audit.load(path)
    emit({**a, "source": label}, as_json, lambda: report.audit_table(a, label))
