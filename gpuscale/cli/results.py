"""``gpuscale results list / show / chart / compare``: result records and bench folders read
back, one at a time or two side by side."""

from __future__ import annotations

import pathlib
import sys

import click
from rich.markup import escape

from ..errors import UserError
from ..records import compare, folder, report, results
from .base import CONTEXT, Group, emit, json_option, reader
from .latest import results_dir as default_results_dir
from .options import setting_option


@click.group("results", cls=Group, context_settings=CONTEXT)
def results_group():
    """Read result records and bench folders: list, show, chart, compare."""


@reader(results_group, "list", "directory", "[DIR]", "the records")
def results_list(directory, as_json):
    """The records under DIR (default: the results dir, ./gpuscale-results), newest first, each
    named by its id (`results show ID`, `results compare ID ID`)."""
    d = directory or default_results_dir()
    recs = results.find(d)
    emit(
        [
            {
                "id": r.id,
                "path": r.path,
                "timestamp": r.timestamp,
                "workload": r.workload,
                "backend": r.backend,
                "family": r.family,
                "protocol": r.protocol,
                "median_s": r.median_s,
                "stdev_s": r.stdev_s,
                "iqr_s": r.iqr_s,
                "repeats": len(r.times_s),
                "valid": r.valid,
                "dashboard_link": r.dashboard_link,
                "dashboard_link_live": r.dashboard_link_live,
            }
            for r in recs
        ],
        as_json,
        lambda: (
            report.records_table(recs, f"{len(recs)} record(s) in {d}, newest first", d)
            if recs
            else escape(f"no records in {d} yet (`gpuscale run WORKLOAD` writes one there)")
        ),
    )


@results_group.command("show", context_settings=CONTEXT)
@click.argument("ref", metavar="ID|RECORD")
@setting_option("results_dir", "where an ID is looked up (default ./gpuscale-results)")
@json_option("the record")
def results_show(ref, results_dir, as_json):
    """One record's run summary, as `gpuscale run` showed it, with its full path: by the id
    `results list` shows (any unique start of it) or by the record file."""
    path = results.locate(ref, results_dir or default_results_dir())
    if pathlib.Path(path).is_dir():
        raise UserError(
            f"'{ref}' is a folder",
            f"give a record id or a record file (gpuscale results list {ref}: its records)",
        )
    r = results.load(path)
    r.path = str(path)
    emit(r.to_dict(), as_json, lambda: report.result_table(r))


@results_group.command("chart", context_settings=CONTEXT)
@click.argument("directory", metavar="DIR")
@json_option("the files written")
def results_chart(directory, as_json):
    """Redraw a bench folder's table, charts (PNG) and report.html from its records."""
    d = folder.redraw(directory)
    emit(
        d,
        as_json,
        lambda: (
            f"{d['rows']} case(s); charts: {', '.join(d['charts'].values()) or 'none'}; report: {d['report']}"
        ),
    )


@results_group.command("compare", context_settings=CONTEXT)
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@setting_option("results_dir", "where a record ID given as A or B is looked up (default ./gpuscale-results)")
@click.option(
    "--fail-if-slower",
    "fail_if_slower",
    metavar="PCT",
    default=None,
    help="exit 3 when a case of B is slower than A by more than PCT (e.g. 5%) with confidence",
)
@click.option(
    "--fail-if-inconclusive",
    "fail_if_inconclusive",
    is_flag=True,
    help="with --fail-if-slower: exit 3 also when a case is not shown to be within PCT",
)
@click.option(
    "--margin",
    metavar="PCT",
    default="5%",
    help="differences within this are 'same' when the interval shows it (default 5%)",
)
@click.option(
    "--between-run",
    "between_run",
    metavar="PCT",
    default=None,
    help="the spread between two runs of the same code, assumed where each side holds one run "
    "(default 10%; several runs a side measure it)",
)
@click.option("--confidence", default="0.95", help="confidence of the interval (default 0.95)")
@json_option("the comparison")
def results_compare(
    a, b, results_dir, fail_if_slower, fail_if_inconclusive, margin, between_run, confidence, as_json
):
    """B / A per case (two bench folders, results folders, records or record ids) with a distribution-free
    interval and a verdict: faster / slower / same / inconclusive (with the repeats or runs
    that would resolve it), and the minimum detectable effect. Exit 3 with --fail-if-slower PCT
    when some case is slower by more than PCT with confidence."""
    a, b = (results.locate(x, results_dir or default_results_dir()) for x in (a, b))
    try:
        conf = float(confidence)
    except ValueError:
        raise UserError(
            f"--confidence must be a number, got {confidence!r}", "e.g. --confidence 0.95"
        ) from None
    if fail_if_inconclusive and fail_if_slower is None:
        raise UserError(
            "--fail-if-inconclusive needs --fail-if-slower PCT",
            "e.g. --fail-if-slower 5% --fail-if-inconclusive",
        )
    limit = compare.parse_pct(fail_if_slower, "--fail-if-slower") if fail_if_slower is not None else None
    spread = (
        compare.ASSUMED_BETWEEN_RUN
        if between_run is None
        else compare.parse_pct(between_run, "--between-run")
    )
    c = compare.compare(
        a,
        b,
        confidence=conf,
        margin=compare.parse_pct(margin, "--margin"),
        fail_if_slower=limit,
        fail_if_inconclusive=fail_if_inconclusive,
        between_run=spread,
    )
    emit(c, as_json, lambda: report.compare_table(c))
    if c["failed"]:
        click.echo(
            f"gpuscale: {len(c['failed'])} case(s) failed --fail-if-slower {fail_if_slower}: "
            + "; ".join(report.gate_failure(x) for x in c["failed"]),
            err=True,
        )
        sys.exit(compare.SLOWER_EXIT)
