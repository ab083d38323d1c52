"""Where the commands that read records look when given no path: the results dir and its
latest run's record."""

from __future__ import annotations

import click

from .. import config
from ..records import results


def results_dir() -> str:
    """The results dir of the settings (``--results-dir``'s default: ./gpuscale-results)."""
    return config.resolve(None, {}).settings.results_dir


def latest(what: str, **need: bool) -> results.Result:
    """The latest run's record under the results dir (``results.latest``), named in one line on
    stderr (stdout keeps only the result)."""
    r = results.latest(results_dir(), **need)
    click.echo(
        f"gpuscale: {what} of the latest run: {r.workload} on {r.family} at {r.timestamp[:19]} "
        f"(record {r.path}{f', trace {r.trace}' if need.get('with_trace') else ''})",
        err=True,
    )
    return r
