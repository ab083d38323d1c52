"""A bench folder (``gpuscale bench SPEC --out DIR``): what it holds and how it is read back.

::

    DIR/bench.json      the ledger: the spec and every case (its id, workload, parameters,
                        backend, family, protocol, workers), with its status (ok / failed),
                        record path and one-line error; rewritten atomically after each case
    DIR/records/        the normal result records (schema gpuscale.result), one per finished case
    DIR/table.parquet   the tidy table, one row per case (:mod:`gpuscale.records.table`)
    DIR/table.csv       the same table
    DIR/*.png           the charts (:mod:`gpuscale.records.charts`)
    DIR/report.html     the table and the charts on one page

:func:`redraw` writes the table, the charts and report.html from the ledger and the records
(``gpuscale results chart DIR``); a folder of records without a ledger works too (one row per
record).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from .. import atomic
from ..errors import UserError
from . import charts, report, results, table

LEDGER = "bench.json"
LEDGER_SCHEMA = "gpuscale.bench"
LEDGER_VERSION = 1
RECORDS = "records"


def records_dir(out: str | os.PathLike) -> pathlib.Path:
    return pathlib.Path(out) / RECORDS


def read_ledger(out: str | os.PathLike) -> dict[str, Any] | None:
    """The ledger of a bench folder, or None when there is none."""
    p = pathlib.Path(out) / LEDGER
    if not p.is_file():
        return None
    data = json.loads(p.read_text())
    if data.get("schema") != LEDGER_SCHEMA or data.get("schema_version") != LEDGER_VERSION:
        raise UserError(
            f"{p} is not a gpuscale bench ledger of version {LEDGER_VERSION}",
            "give a folder written by `gpuscale bench` of this version, or another --out",
        )
    return data


def write_ledger(out: str | os.PathLike, spec: dict[str, Any], cases: list[dict[str, Any]]) -> pathlib.Path:
    """Write the ledger atomically (a run cut short keeps every case it finished)."""
    d = atomic.own_folder(out, "bench folder")
    ledger = {"schema": LEDGER_SCHEMA, "schema_version": LEDGER_VERSION, "spec": spec, "cases": cases}
    with atomic.written(d / LEDGER, replace=True, text=True) as (f, _):
        json.dump(ledger, f, indent=1, default=str)
    return d / LEDGER


def finished(case: dict[str, Any], out: str | os.PathLike) -> bool:
    """A case that needs no new run: it ran to a record (valid or not) that is still there
    (``record``: its path relative to the bench folder, so the folder can move). Failed
    cases (no record) run again."""
    return (
        case.get("status") == "ok"
        and bool(case.get("record"))
        and (pathlib.Path(out) / case["record"]).is_file()
    )


def redraw(out: str | os.PathLike) -> dict[str, Any]:
    """Table (Parquet + CSV), charts (PNG) and report.html of a bench folder, from its ledger
    and records. Returns ``{"table": [paths], "charts": {name: path}, "report": path, "rows": n}``."""
    d = pathlib.Path(out)
    if not d.is_dir():
        raise UserError(f"'{d}' is not a folder", "give the --out folder of `gpuscale bench`")
    ledger = read_ledger(d)
    recs = results.find(d)
    frame = table.build(recs, ledger["cases"] if ledger else None, base=d)
    if frame.empty:
        raise UserError(
            f"'{d}' holds no bench cases and no result records", "run `gpuscale bench SPEC --out DIR` first"
        )
    paths = table.write(frame, d)
    drawn = charts.draw_all(frame, recs, d)
    title = (
        f"gpuscale bench: {ledger['spec'].get('name', d.name)}" if ledger else f"gpuscale results: {d.name}"
    )
    page = d / "report.html"
    with atomic.written(page, replace=True, text=True, what="report") as (f, _):
        f.write(report.bench_html(title, frame, {k: p.name for k, p in drawn.items()}))
    return {
        "table": [str(p) for p in paths],
        "charts": {k: str(p) for k, p in drawn.items()},
        "report": str(page),
        "rows": len(frame),
    }
