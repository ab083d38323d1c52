"""A translated collection's last step: one Polars plan whose result becomes Dask's answer.

:func:`plan` turns what :mod:`.from_dask` lowered into a :class:`Plan` (the LazyFrame with its
index levels and columns in Dask's order, and the collection's metadata); :func:`build` makes
the engine's result into what ``compute()`` returns: a frame, series or NumPy scalar of the
metadata's library (pandas, or cuDF under the GPU family) with Dask's columns, dtypes and index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

from .from_dask import Column, Frame, Lowered, Value


@dataclass
class Plan:
    """One collection's plan and what its answer looks like."""

    lf: pl.LazyFrame
    shape: str
    """``frame``, ``series`` or ``scalar``."""
    index_levels: int
    """How many of ``lf``'s first columns are the index (0: a fresh 0..n-1 index)."""
    meta: Any
    """The collection's metadata: a pandas or cuDF frame or series with no rows, or a NumPy
    scalar."""
    ordered: bool
    pytype: type | None = None
    """A scalar answer's Python type where Dask's is not its metadata's (int for ``len``)."""


def plan(lowered: Lowered, meta: Any) -> Plan:
    """The final plan of a lowered collection whose Dask metadata is ``meta``."""
    if isinstance(lowered, Value):
        lf = lowered.lf if lowered.lf is not None else pl.LazyFrame({"__one": [0]})
        return Plan(lf.select(lowered.expr.alias("__v")), "scalar", 0, meta, True, lowered.pytype)
    index = lowered.index or []
    cols = lowered.columns if isinstance(lowered, Frame) else [(lowered.label, lowered.expr)]
    exprs = [e.alias(f"__i{i}") for i, (_, e) in enumerate(index)]
    exprs += [e.alias(f"__c{i}") for i, (_, e) in enumerate(cols)]
    shape = "series" if isinstance(lowered, Column) else "frame"
    return Plan(lowered.rows.lf.select(exprs), shape, len(index), meta, lowered.ordered)


def build(result: pl.DataFrame, p: Plan):
    """The answer Dask would give, from the engine's ``result`` of ``p.lf``: pandas, or cuDF
    where the metadata is cuDF's."""
    if p.shape == "scalar":
        value = result.item(0, 0) if result.height else None
        return p.pytype(value) if p.pytype is not None and value is not None else _scalar(value, p.meta)
    if type(p.meta).__module__.partition(".")[0] == "cudf":
        return _cudf(result, p)
    df = result.to_pandas()
    meta = p.meta
    n = p.index_levels
    data = df.iloc[:, n:]
    if n:
        levels = [_cast(df.iloc[:, i], _index_dtype(meta.index, i)) for i in range(n)]
        names = list(meta.index.names)
        index = pd.MultiIndex.from_arrays(levels) if n > 1 else pd.Index(levels[0])
        index.names = names  # a name of None stays None, not the level's column name
    else:
        index = pd.RangeIndex(len(df))
    if p.shape == "series":
        s = _cast(data.iloc[:, 0], meta.dtype)
        s.index = index
        s.name = meta.name
        return s
    if not len(meta.columns):
        return pd.DataFrame(index=index, columns=meta.columns)
    out = pd.concat([_cast(data.iloc[:, i], dt) for i, dt in enumerate(meta.dtypes)], axis=1)
    out.columns = meta.columns
    out.index = index
    return out


def _index_dtype(index: pd.Index, i: int):
    return index.get_level_values(i).dtype if isinstance(index, pd.MultiIndex) else index.dtype


def _cast(s: pd.Series, dtype) -> pd.Series:
    """``s`` as ``dtype`` where its values allow it: pandas keeps integers with missing values
    (and booleans) as float64 (object), as Dask's partitions would hold them."""
    s = s.reset_index(drop=True)
    if str(s.dtype) == str(dtype) or _fractions_into_integers(s.dtype, dtype):
        return s
    try:
        if (
            s.isna().any()
            and pd.api.types.is_integer_dtype(dtype)
            and not isinstance(dtype, pd.api.extensions.ExtensionDtype)
        ):
            return s.astype("float64")
        if (
            s.isna().any()
            and pd.api.types.is_bool_dtype(dtype)
            and not isinstance(dtype, pd.api.extensions.ExtensionDtype)
        ):
            return s.astype(object)
        return s.astype(dtype)
    except (TypeError, ValueError):
        return s


def _fractions_into_integers(have, want) -> bool:
    """Whether ``have`` is a float dtype and ``want`` an integer one: the engine computed
    fractions (a mean) that Dask's partitions hold as floats too, whatever the metadata says
    (dask-cudf's names an integer for some means); cast, they would be cut."""
    nullable = isinstance(want, pd.api.extensions.ExtensionDtype)  # a float here: its missing values
    return pd.api.types.is_float_dtype(have) and pd.api.types.is_integer_dtype(want) and not nullable


def _scalar(value, meta):
    """A NumPy scalar of ``meta``'s type (a missing value: NaN, or NaT for times)."""
    if isinstance(meta, pd.Timestamp) or isinstance(value, (pd.Timestamp, np.datetime64)):
        return pd.Timestamp(value) if value is not None else pd.NaT
    dtype = getattr(meta, "dtype", None)
    if dtype is None:
        return value
    if value is None:
        return np.float64("nan") if dtype.kind in "iub" else np.asarray(np.nan).astype(dtype)[()]
    return np.asarray(value).astype(dtype)[()]


def _cudf_cast(col, dtype):
    """A cuDF column as ``dtype``; text keeps cuDF's own string type, as its partitions hold it
    (the metadata may name another missing-value flavour of it)."""
    if pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype):
        return col
    if _fractions_into_integers(col.dtype, dtype):
        return col
    return col.astype(dtype)


def _cudf(result: pl.DataFrame, p: Plan):
    """cuDF's answer from Polars' result through Arrow (cuDF keeps integers with missing values
    as integers), columns cast to the metadata's dtypes and the index levels set."""
    import cudf

    table = result.to_arrow(compat_level=pl.CompatLevel.oldest())
    df = cudf.DataFrame.from_arrow(table)
    meta, n = p.meta, p.index_levels
    index = None
    if n:
        levels = [df.iloc[:, i] for i in range(n)]
        names = list(meta.index.names)
        index = cudf.MultiIndex.from_arrays(levels) if n > 1 else cudf.Index(levels[0])
        index.names = names
    data = df.iloc[:, n:]
    if p.shape == "series":
        s = _cudf_cast(data.iloc[:, 0], meta.dtype)
        s.index = index if index is not None else cudf.RangeIndex(len(s))
        s.name = meta.name
        return s
    out = cudf.DataFrame({i: _cudf_cast(data.iloc[:, i], dt) for i, dt in enumerate(meta.dtypes)})
    out.columns = meta.columns
    out.index = index if index is not None else cudf.RangeIndex(len(out))
    return out
