"""What ``gpuscale run WORKLOAD`` does with its parsed flags: :func:`gpuscale.api.run` with a
progress line, the result as a table or one JSON object, and ``--dashboard``'s cluster held
up after the work."""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import api, errors
from ..records import report
from ..runs import progress, serve
from .base import STOPPED_BY, emit
from .options import workload_keywords
from .run import pop_data_options


def run_workload(cls, as_json, **kwargs) -> None:
    """Run the workload class ``cls`` with the flags of ``gpuscale run NAME``; exit 3 when its
    result failed validation."""
    trace_dir = kwargs.pop("trace_dir", None)
    data_kw = pop_data_options(kwargs)
    shown = []  # --dashboard shows the result before holding the cluster

    def show(r):
        shown.append(r)
        emit(r.to_dict(), as_json, lambda: report.result_table(r))
        sys.stdout.flush()

    hooks = _dashboard_hooks(show) if kwargs.pop("dashboard", False) else {}
    keywords = workload_keywords(kwargs)
    try:
        with errors.phase("the run"), progress.shown() as tracker:
            r = api.run(cls.name, trace=trace_dir, progress=tracker, **data_kw, **hooks, **keywords)
    except errors.RecordNotWritten as e:  # the measured result goes to stdout, not lost
        click.echo(e.record_json)
        sys.stdout.flush()
        raise
    except errors.OutputNotWritten as e:  # the record is written: shown as on success
        show(e.result)
        raise
    if not shown:
        show(r)
    if r.valid is False:
        unwritten = " --output was not written;" if data_kw.get("output") else ""
        click.echo(
            f"gpuscale: {cls.name} result FAILED validation;{unwritten} see the checks above / in {r.path}",
            err=True,
        )
        sys.exit(errors.EXIT_CHECK_FAILED)


def _dashboard_hooks(show) -> dict[str, Any]:
    """``api.run`` callbacks for ``run --dashboard``: the link on stderr before the work; after
    it, the result shown and the cluster held (:func:`gpuscale.runs.serve.hold`) until Ctrl-C,
    SIGTERM or ``cluster down``. stdout keeps only what ``show`` prints."""

    def on_ready(s):
        link = s.dashboard_link
        click.echo(
            f"gpuscale: dashboard: {link}"
            if link
            else "gpuscale: this cluster has no dashboard (--dashboard-address is unset)",
            err=True,
        )

    def hold(s, r):
        if s.spec.kind == "existing":
            how = "Ctrl-C leaves it (the running cluster stays)"
        else:
            how = f"Ctrl-C or `gpuscale cluster down {s.client.scheduler.address}` closes it"

        def announce():  # inside the hold: a Ctrl-C from here on is the normal stop
            show(r)
            click.echo(
                f"gpuscale: the cluster stays up for the dashboard at {s.dashboard_link}; {how}", err=True
            )

        why = serve.hold(s, before=announce)
        click.echo(f"gpuscale: {STOPPED_BY.get(why, why)}; closing the cluster", err=True)

    return {"on_ready": on_ready, "hold": hold}
