"""The tidy table of a bench folder: one row per case, from the ledger's cases and the records.

Columns (:data:`COLUMNS`): ``case`` (the case id), ``workload``, ``size`` (the label of the
case's size, e.g. ``n=400``), ``params`` (every parameter the record holds, as JSON),
``backend``, ``family``, ``protocol``, ``workers`` (as the cluster ran, else as asked),
``repeats``, ``median_s``, ``stdev_s``, ``iqr_s``, ``min_s``, ``estimate_bytes`` (the
workload's memory estimate: the case's data size), ``valid``, ``record`` (path, relative to the
bench folder) and ``error`` (one line; empty when the case ran and validated).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import TYPE_CHECKING, Any, Iterable

from .. import atomic, workloads
from ..errors import UserError

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "case",
    "workload",
    "size",
    "params",
    "backend",
    "family",
    "protocol",
    "workers",
    "repeats",
    "median_s",
    "stdev_s",
    "iqr_s",
    "min_s",
    "estimate_bytes",
    "valid",
    "record",
    "error",
]


def size_label(size: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in size.items()) or "default"


def shown_params(params: dict[str, Any]) -> dict[str, Any]:
    """A record's parameters as a label shows them: no seed, no unset (None) ones."""
    return {k: v for k, v in params.items() if k != "seed" and v is not None}


def brief_params(workload: str, params: dict[str, Any], keep: Iterable[str] = ()) -> str:
    """The parameters a terminal table shows: those in ``keep`` (:func:`varying`: the ones that
    tell its rows apart) and those not at the workload's default (all shown ones when the
    workload is not installed here), ``k=v`` separated so they wrap between parameters;
    ``defaults`` when there is none to show."""
    try:
        fields = workloads.get(workload).Params.model_fields
    except UserError:  # a record of a workload this install lacks
        fields = {}
    keep = set(keep)
    shown = {
        k: v
        for k, v in shown_params(params).items()
        if k in keep or k not in fields or fields[k].default != v
    }
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "defaults"


def varying(all_params: Iterable[dict[str, Any]]) -> set[str]:
    """The parameters whose value differs between these records (rows of one table)."""
    rows = list(all_params)
    keys = set().union(*rows)
    return {k for k in keys if len({repr(params.get(k)) for params in rows}) > 1}


def workers_of(r) -> int | None:
    """The record's workers: as the cluster ran, else as asked."""
    return (r.cluster.get("running") or {}).get("workers") or r.cluster.get("workers")


def record_row(r, case: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row from a record (and the ledger's case, when there is one)."""
    case = case or {}
    failed = [c["name"] for c in r.validation.get("checks", []) if not c.get("ok")]
    error = case.get("error") or (
        None if r.valid is not False else "failed validation: " + (", ".join(failed) or "see the record")
    )
    return {
        "case": case.get("id", r.id),
        "workload": r.workload,
        "size": case.get("size") or size_label(shown_params(r.params)),
        "params": json.dumps(r.params, sort_keys=True, default=str),
        "backend": r.backend,
        "family": r.family,
        "protocol": r.protocol,
        "workers": workers_of(r),
        "repeats": len(r.times_s),
        "median_s": r.median_s,
        "stdev_s": r.stdev_s,
        "iqr_s": r.iqr_s,
        "min_s": r.min_s,
        "estimate_bytes": (r.memory or {}).get("estimate_bytes"),
        "valid": r.valid,
        "record": r.path,
        "error": error,
    }


def case_row(case: dict[str, Any]) -> dict[str, Any]:
    """A row for a case that left no record (it failed, or has not run yet)."""
    return {
        **dict.fromkeys(COLUMNS),
        "case": case["id"],
        "workload": case["workload"],
        "size": case.get("size"),
        "params": json.dumps(case["params"], sort_keys=True, default=str),
        "backend": case["backend"],
        "family": case.get("family"),
        "protocol": case["protocol"],
        "workers": case.get("workers"),
        "repeats": 0,
        "error": case.get("error")
        or ("not run yet" if case.get("status") is None else None)
        or (f"not run here: {case.get('why')}" if case.get("status") == "not here" else None),
    }


def build(
    records: list, cases: list[dict[str, Any]] | None = None, base: str | os.PathLike | None = None
) -> pd.DataFrame:
    """The table: one row per ledger case (in the spec's order) or, without a ledger, one row
    per record (oldest first). ``record`` holds paths relative to ``base`` (the bench
    folder), as the ledger does; records are matched by file name (it holds the record's id)."""
    import pandas as pd  # here: the commands that only read records import no pandas

    by_name = {pathlib.Path(r.path).name: r for r in records if r.path}
    rows = []
    if cases is not None:
        for c in cases:
            r = by_name.get(pathlib.Path(c["record"]).name) if c.get("record") else None
            rows.append({**record_row(r, c), "record": c["record"]} if r is not None else case_row(c))
    else:
        rows = [record_row(r) for r in sorted(records, key=lambda r: r.timestamp)]
        if base is not None:
            for row in rows:
                row["record"] = os.path.relpath(row["record"], base)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["workers"] = frame["workers"].astype("Int64")
    frame["estimate_bytes"] = frame["estimate_bytes"].astype("Int64")
    frame["valid"] = frame["valid"].astype("boolean")
    for col in ("median_s", "stdev_s", "iqr_s", "min_s"):
        frame[col] = frame[col].astype("float64")
    return frame


def write(frame: pd.DataFrame, out: str | os.PathLike) -> list[pathlib.Path]:
    """``table.parquet`` and ``table.csv`` under ``out``."""
    d = pathlib.Path(out)
    pq, csv = d / "table.parquet", d / "table.csv"
    with atomic.written(pq, replace=True, what="table") as (f, _):
        frame.to_parquet(f, index=False)
    with atomic.written(csv, replace=True, text=True, what="table") as (f, _):
        frame.to_csv(f, index=False)
    return [pq, csv]
