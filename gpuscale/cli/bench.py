"""``gpuscale bench SPEC.yaml``: a sweep of cases, one cluster per backend / protocol /
workers, into a bench folder."""

from __future__ import annotations

import json
import pathlib
import sys

import click

from .. import errors
from ..records import report, results
from ..runs import bench
from .base import CONTEXT, Panelled, json_option


@click.command("bench", cls=Panelled, context_settings=CONTEXT)
@click.argument("spec", metavar="SPEC.yaml")
@click.option(
    "--out",
    "out",
    metavar="DIR",
    default=None,
    help="the bench folder: records, table, charts, report.html (default: bench-NAME, NAME from "
    "the spec); a re-run into it skips the finished cases",
)
@json_option("the cases and what was written")
def bench_cmd(spec, out, as_json):
    """Run the sweep SPEC.yaml describes (workloads x sizes x backends x protocols x workers),
    one cluster per backend / protocol / workers, every case validated; a failing case is
    recorded and the sweep goes on. Exit 3 when a case failed or did not validate."""
    spec_obj, _ = bench.load_spec(spec)  # a bad spec: one line, exit 2, before any cluster
    folder = pathlib.Path(out or f"bench-{spec_obj.name}")
    try:
        d = bench.run(spec, folder, progress=report.sweep_progress)
    except KeyboardInterrupt as e:  # the cases that finished keep their records
        done = len(results.find(folder / "records")) if (folder / "records").is_dir() else 0
        e.gpuscale_kept = (
            f"the {done} finished case(s) are kept in {folder} (a re-run skips them)"
            if done
            else "no case had finished"
        )
        raise
    bad = [c for c in d["cases"] if c.get("error")]
    summary = {
        "out": str(out or f"bench-{spec_obj.name}"),
        "ran": d["ran"],
        "skipped": d["skipped"],
        "failed": d["failed"],
        "not_here": d["not_here"],
        "with_error": len(bad),
        **d["outputs"],
        "cases": d["cases"],
    }
    if as_json:
        click.echo(json.dumps(summary, default=str))
    else:
        here = f", {d['not_here']} not run here (a machine that can runs them)" if d["not_here"] else ""
        click.echo(
            f"gpuscale bench: {d['ran']} case(s) ran, {d['skipped']} skipped (finished before){here}, "
            f"{len(bad)} with an error; report: {d['outputs']['report']}"
        )
    if bad:
        sys.exit(errors.EXIT_CHECK_FAILED)
