"""``gpuscale trace summarize / compare``: trace folders read back, one or two side by side."""

from __future__ import annotations

import click

from ..trace import compare, load, render
from .base import CONTEXT, Group, emit, json_option, reader
from .latest import latest


@click.group("trace", cls=Group, context_settings=CONTEXT)
def trace_group():
    """Read trace folders written by `run --trace DIR` or Session.trace(DIR)."""


@reader(trace_group, "summarize", "directory", "[DIR]", "the summary")
def trace_summarize(directory, as_json):
    """Where the time went: wall split, top task groups, bytes moved, bandwidth, memory peaks.
    Without DIR: the trace of the latest run that has one (records under the results dir)."""
    if directory is None:
        directory = latest("the trace", with_trace=True).trace
    s = load(directory)
    emit(s.model_dump(mode="json", by_alias=True), as_json, lambda: render.summary_table(s, directory))


@trace_group.command("compare", context_settings=CONTEXT)
@click.argument("dir_a", metavar="DIR_A")
@click.argument("dir_b", metavar="DIR_B")
@json_option("the comparison")
def trace_compare(dir_a, dir_b, as_json):
    """Two traces side by side (e.g. tcp vs ucx), with ratios B / A."""
    c = compare(dir_a, dir_b)
    emit(c, as_json, lambda: render.compare_table(c))
