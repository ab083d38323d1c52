"""Analytic queries written for Dask DataFrame as a user writes them, with the same question
in SQL for the engines a user would pick instead, and the pandas code that checks each answer.

A :class:`Query` holds one question three ways: ``dask`` (the user's code: it takes Dask
DataFrames read from Parquet and returns a Dask DataFrame; under a GPU session the same code
runs on cuDF), ``pandas`` (the reference, on pandas frames; the same function where the pandas
API is the same) and ``sql`` (DuckDB, and Polars' SQL front end, CPU or GPU engine). A suite
(:mod:`.h2o`, :mod:`.tpch`) makes its data and lists its queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    dask: Callable
    """``dask(tables) -> DataFrame``: tables maps a table name to a DataFrame (Dask or pandas)."""
    sql: str
    """The same question in SQL over tables named as in ``tables``; columns named as ``dask``'s."""
    pandas: Callable | None = None
    """The pandas reference where its code differs from ``dask``'s."""

    def reference(self, tables) -> pd.DataFrame:
        return (self.pandas or self.dask)(tables)


@dataclass(frozen=True)
class Suite:
    name: str
    tables: tuple[str, ...]
    queries: tuple[Query, ...]
    make: Callable
    """``make(folder, scale)``: writes ``folder/TABLE.parquet`` for every table."""


BIG = 200_000
"""Answers of more rows are compared by order-free fingerprints of each column (sums for
numbers, the sum of row hashes for the rest) instead of row by row."""


def to_pandas(obj) -> pd.DataFrame:
    """Any engine's answer as a pandas frame with plain column names and a fresh index (a
    number becomes a one-row frame of column ``value``)."""
    if isinstance(obj, (int, float, np.number)) or (hasattr(obj, "item") and getattr(obj, "ndim", 1) == 0):
        return pd.DataFrame({"value": [float(obj)]})
    if hasattr(obj, "to_pandas") and not isinstance(obj, pd.DataFrame):
        obj = obj.to_pandas()
    elif hasattr(obj, "df") and callable(obj.df):  # a DuckDB relation
        obj = obj.df()
    if isinstance(obj, pd.Series):
        obj = obj.to_frame()
    return obj.reset_index(drop=True)


def same_answer(got, want: pd.DataFrame, rtol: float = 1e-6) -> str | None:
    """None when ``got`` holds the rows of ``want`` (any row order, the same columns, floats to
    ``rtol``), else what differs, in one line."""
    got = to_pandas(got)
    missing = [c for c in want.columns if c not in got.columns]
    if missing:
        return f"columns {missing} missing (got {list(got.columns)})"
    if len(got) != len(want):
        return f"{len(got)} rows, want {len(want)}"
    if len(want) > BIG:
        return _same_fingerprints(got[list(want.columns)], want, rtol)
    got, want = _sorted(got[list(want.columns)]), _sorted(want)
    for c in want.columns:
        a, b = got[c], want[c]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            a = pd.to_numeric(a, errors="coerce").to_numpy("float64", na_value=np.nan)
            b = b.to_numpy("float64", na_value=np.nan)
            if not np.allclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True):
                i = int(np.argmax(~np.isclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True)))
                return f"column {c}: {a[i]!r} != {b[i]!r} (row {i} sorted)"
        elif pd.api.types.is_datetime64_any_dtype(b):
            if not (
                pd.to_datetime(a).astype("datetime64[ns]").to_numpy() == b.astype("datetime64[ns]").to_numpy()
            ).all():
                return f"column {c}: timestamps differ"
        elif not (_text(a).to_numpy() == _text(b).to_numpy()).all():
            return f"column {c}: values differ"
    return None


def _text(s: pd.Series) -> pd.Series:
    """Values as text, every kind of missing value as one word."""
    s = s.astype(object)
    return s.where(s.notna(), "<NA>").astype(str)


def _number(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _same_fingerprints(got: pd.DataFrame, want: pd.DataFrame, rtol: float) -> str | None:
    theirs = _WANT_PRINTS.get(id(want), (None, None))[1]
    if theirs is None:  # pandas' answer is the same for every side and run: fingerprinted once
        theirs = {c: _fingerprint(want[c]) for c in want.columns}
        _WANT_PRINTS[id(want)] = (want, theirs)
    for c in want.columns:
        mine = _fingerprint(got[c], like=want[c])
        if isinstance(theirs[c], int):
            if mine != theirs[c]:
                return f"column {c}: values differ (row hashes)"
            continue
        for what, x, y in zip(("sum", "sum of squares", "missing"), mine, theirs[c]):
            if not np.isclose(x, y, rtol=rtol, atol=1e-6):
                return f"column {c}: {what} {x!r} != {y!r}"
    return None


_WANT_PRINTS: dict[int, tuple[pd.DataFrame, dict]] = {}
"""Fingerprints of the reference answers, by the answer's identity (the answer kept alive)."""


def _fingerprint(s: pd.Series, like: pd.Series | None = None):
    """Sums of a number column (as ``like``'s kind decides); the sum of row hashes of the rest.
    Text is hashed as Arrow strings, every missing value as one word, with no copy to Python
    objects."""
    if _number(s if like is None else like):
        a = pd.to_numeric(s, errors="coerce").astype("float64")
        return (a.sum(), (a * a).sum(), a.isna().sum())
    if pd.api.types.is_string_dtype(s) or isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype("string[pyarrow]").fillna("<NA>")
    else:
        s = _text(s)
    return int(pd.util.hash_pandas_object(s, index=False).sum())


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    keys = pd.DataFrame(
        {c: (_text(df[c]) if not _number(df[c]) else df[c].astype("float64").round(6)) for c in df.columns}
    )
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return df.loc[order].reset_index(drop=True)


def suites() -> dict[str, Suite]:
    from . import h2o, tpch

    return {s.name: s for s in (h2o.GROUPBY, h2o.JOIN, tpch.SUITE)}
