"""``--output PATH``: a run's result written to a file, whole or not at all, never over a file
unasked.

:func:`check` runs before any work (type known, not a folder, free unless ``overwrite``, its
folder writable); :func:`write` writes through :func:`gpuscale.atomic.written`.

Formats: ``.parquet`` / ``.csv`` for DataFrame results (the group keys become columns and
``(column, aggregation)`` pairs are flattened to ``column_aggregation``), ``.npy`` (the singular
values) / ``.npz`` (``s``, and ``u``, ``vt`` when they were computed) for SVD.
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any

from .. import atomic
from ..errors import UserError

WRITERS = {".parquet": "Parquet", ".csv": "CSV", ".npy": ".npy", ".npz": ".npz"}


def check(path, overwrite: bool, suffixes: tuple[str, ...], workload: str = "this workload") -> pathlib.Path:
    """The absolute output path, after every check that needs no result (a link or another
    user's file at ``path`` is refused: :func:`gpuscale.atomic.check_target`)."""
    p = pathlib.Path(path).expanduser()
    suffix = p.suffix.lower()
    if not suffixes:
        raise UserError(f"workload '{workload}' writes no --output", "leave --output out")
    if suffix not in suffixes:
        raise UserError(
            f"--output {path}: {workload} writes {' or '.join(suffixes)} files, not '{p.suffix or p.name}'",
            f"name the output e.g. result{suffixes[0]}",
        )
    atomic.check_target(p, "--output")
    if p.is_dir():
        raise UserError(f"--output {path} is a folder", "give a file path (folders are never replaced)")
    if p.exists() and not overwrite:
        raise UserError(
            f"--output {path} already exists", "pass --overwrite to replace it, or choose another path"
        )
    parent = p.parent if str(p.parent) else pathlib.Path(".")
    if not parent.is_dir():
        raise UserError(f"--output {path}: the folder {parent} does not exist", "create it first")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".gpuscale-probe-"):
            pass
    except OSError as e:
        raise UserError(
            f"--output {path}: the folder {parent} is not writable ({e.strerror or e})",
            "choose a writable folder",
        ) from None
    return p.absolute().parent.resolve() / p.name  # a link there is refused above, never followed


def write(value: Any, path: pathlib.Path, overwrite: bool = False) -> dict[str, Any]:
    """Write ``value`` (a pandas DataFrame, or a dict of NumPy arrays for .npy / .npz) to
    ``path``, whole or not at all (:mod:`gpuscale.atomic`). Returns what the record
    says about it."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    try:
        with atomic.written(path, replace=overwrite, what="--output") as (f, tmp):
            what = _write(value, suffix, f, tmp)
    except FileExistsError:
        raise UserError(
            f"--output {path} appeared while the work ran", "pass --overwrite, or choose another path"
        ) from None
    except OSError as e:
        raise UserError(
            f"could not write --output {path}: {e.strerror or e}",
            "check the disk space and permissions of its folder",
        ) from None
    return {"path": str(path), "format": WRITERS[suffix], "bytes": path.stat().st_size, "holds": what}


def _write(value, suffix: str, f, tmp: str) -> str:
    import numpy as np

    if suffix == ".npy":
        np.save(f, value["s"])
        return "s"
    if suffix == ".npz":
        np.savez(f, **value)
        return ", ".join(value)
    frame = flat_frame(value)
    f.flush()
    if suffix == ".parquet":
        frame.to_parquet(tmp, index=False)
    else:
        frame.to_csv(tmp, index=False)
    return ", ".join(map(str, frame.columns))


def flat_frame(df):
    """A pandas frame with its index as columns and ``(column, agg)`` names as ``column_agg``."""
    import pandas as pd

    df = df.copy()
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = ["_".join(str(p) for p in c if str(p)) for c in df.columns]
    return df.reset_index()
