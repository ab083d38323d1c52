"""``gpuscale workloads``: the registered workloads, their parameters and defaults."""

from __future__ import annotations

import click

from .. import workloads
from ..records import report
from .base import CONTEXT, Panelled, emit, json_option


@click.command("workloads", cls=Panelled, context_settings=CONTEXT)
@json_option("the workloads")
def workloads_cmd(as_json):
    """The registered workloads with their parameters and defaults."""
    items = [workloads.describe(workloads.get(n)) for n in workloads.names()]
    emit(items, as_json, lambda: report.workloads_table(items))
