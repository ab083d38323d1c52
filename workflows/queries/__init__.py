"""Analytic queries written for Dask DataFrame as a user writes them, with the same question
in SQL for the engines a user would pick instead, and the pandas code that checks each answer.

A :class:`Query` holds one question in several formulations: ``dask`` (the user's code: it takes
Dask DataFrames read from Parquet and returns a Dask DataFrame; under a GPU session the same code
runs on cuDF), ``pandas`` (the reference, on pandas frames; the same function where the pandas
API is the same), ``sql`` (DuckDB, and Polars' SQL front end, CPU or GPU engine) and, where a
suite gives one, ``polars`` (the question as Polars LazyFrame code). A suite (:mod:`.h2o`,
:mod:`.tpch`) makes its data and lists its queries.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


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
    polars: Callable | None = None
    """``polars(tables) -> pl.LazyFrame``: tables maps a table name to a LazyFrame
    (``pl.scan_parquet``); columns named as ``dask``'s, a number as a one-row frame of column
    ``value``."""

    def reference(self, tables) -> pd.DataFrame:
        return (self.pandas or self.dask)(tables)


@dataclass(frozen=True)
class Suite:
    name: str
    tables: tuple[str, ...]
    queries: tuple[Query, ...]
    make: Callable
    """``make(folder, scale)``: writes ``folder/TABLE.parquet`` for every table."""
    reference_peak: float = 5.0
    """A process answering one of the suite's queries in pandas, at its peak, holds about this
    many times the size of the suite's tables in their Parquet footers: the tables, a query's
    intermediates and its answer (measured in docs/benchmarks/user-queries.md)."""


BIG = 200_000
"""Answers of more rows are compared column by column on their Arrow form, free of row order
(:func:`_kind`: each by the sum of its row hashes, numbers rounded to about ``rtol`` first and,
where those sums differ, as their values sorted, to ``rtol``), instead of row by row."""


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


def same_answer(got, want: pd.DataFrame | KeptAnswer, rtol: float = 1e-6) -> str | None:
    """None when ``got`` holds the rows of ``want`` (any row order, the same columns, floats to
    ``rtol``), else what differs, in one line."""
    rows = want.rows if isinstance(want, KeptAnswer) else len(want)
    if rows > BIG:
        if not isinstance(want, KeptAnswer):
            want = _HeldAnswer(pa.Table.from_pandas(want, preserve_index=False))
        return _same_fingerprints(to_arrow(got), want, rtol)
    if isinstance(want, KeptAnswer):
        want = want.frame()
    got = to_pandas(got)
    missing = [c for c in want.columns if c not in got.columns]
    if missing:
        return f"columns {missing} missing (got {list(got.columns)})"
    if len(got) != len(want):
        return f"{len(got)} rows, want {len(want)}"
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


class KeptAnswer:
    """pandas' answer kept in a Parquet file, read only where a check needs it: a small one whole,
    a large one column by column, each column's fingerprint (:func:`_fingerprint`) taken once
    and kept beside the file, so that every side after the first is checked against it without
    reading or hashing the answer again."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.schema = pq.read_schema(self.path)
        self.rows = pq.ParquetFile(self.path).metadata.num_rows
        self.column_names = [n for n in self.schema.names if not n.startswith("__index_level_")]

    def frame(self) -> pd.DataFrame:
        return pd.read_parquet(self.path)

    def type(self, column: str) -> pa.DataType:
        return self.schema.field(column).type

    def fingerprint(self, column: str, kind: str) -> int:
        kept = self.path.with_name(f"{self.path.stem}.{self.column_names.index(column)}-{kind}.npy")
        if kept.exists():
            return int(np.load(kept))
        fp = _fingerprint(self.column(column), kind)
        part = kept.with_suffix(".part")
        with open(part, "wb") as f:  # np.save would add .npy to a name that lacks it
            np.save(f, np.uint64(fp))
        os.replace(part, kept)  # a run cut short leaves no half-written fingerprint
        return fp

    def column(self, column: str) -> pa.ChunkedArray:
        return pq.read_table(self.path, columns=[column]).column(column)


class _HeldAnswer:
    """An answer in memory, with :class:`KeptAnswer`'s face."""

    def __init__(self, table: pa.Table):
        self.table, self.rows, self.column_names = table, table.num_rows, table.column_names

    def type(self, column: str) -> pa.DataType:
        return self.table.schema.field(column).type

    def fingerprint(self, column: str, kind: str) -> int:
        return _fingerprint(self.table.column(column), kind)

    def column(self, column: str) -> pa.ChunkedArray:
        return self.table.column(column)


def _text(s: pd.Series) -> pd.Series:
    """Values as text, every kind of missing value as one word."""
    s = s.astype(object)
    return s.where(s.notna(), "<NA>").astype(str)


def _number(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def to_arrow(obj) -> pa.Table:
    """An engine's answer as an Arrow table of its columns, from the engine's own Arrow form
    where it has one (cuDF, Polars: no copy through Python objects), else through pandas."""
    lib = type(obj).__module__.partition(".")[0]
    try:
        if lib == "cudf":
            return (obj.to_frame() if obj.ndim == 1 else obj).to_arrow(preserve_index=False)
        if lib == "polars":
            return obj.to_arrow()
    except (AttributeError, TypeError):  # another version's API: the way through pandas
        pass
    return pa.Table.from_pandas(to_pandas(obj), preserve_index=False)


def _same_fingerprints(got: pa.Table, want: KeptAnswer | _HeldAnswer, rtol: float) -> str | None:
    missing = [c for c in want.column_names if c not in got.column_names]
    if missing:
        return f"columns {missing} missing (got {got.column_names})"
    if got.num_rows != want.rows:
        return f"{got.num_rows} rows, want {want.rows}"
    kinds = {c: _kind(got.column(c).type, want.type(c)) for c in want.column_names}
    # NumPy and Arrow let go of the GIL: the columns' fingerprints are taken side by side
    with concurrent.futures.ThreadPoolExecutor(max(1, min(2 * len(kinds), os.cpu_count() or 1))) as pool:
        mine = {c: pool.submit(_fingerprint, got.column(c), kind) for c, kind in kinds.items()}
        theirs = {c: pool.submit(want.fingerprint, c, kind) for c, kind in kinds.items()}
    for c in want.column_names:
        if mine[c].result() == theirs[c].result():
            continue
        if kinds[c] != "numbers":
            return f"column {c}: values differ (row hashes)"
        # equal sums prove the values equal to about 2**-20 of themselves; unequal ones can be
        # values that rounded apart (sums taken in another order): the values sorted decide
        a, b = _sorted_numbers(got.column(c)), _sorted_numbers(want.column(c))
        if not np.allclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True):
            i = int(np.argmax(~np.isclose(a, b, rtol=rtol, atol=1e-9, equal_nan=True)))
            return f"column {c}: {float(a[i])!r} != {float(b[i])!r} (the {i}th smallest)"
    return None


def _kind(got: pa.DataType, want: pa.DataType) -> str:
    """How a column is compared: ``integers`` (both sides whole numbers: exact row hashes),
    ``numbers`` (the reference's are numbers: row hashes of the values rounded, then where
    those differ the values sorted, to a tolerance), ``times`` (both
    sides times: row hashes of their nanoseconds), else ``text`` (row hashes of the values as
    text)."""
    got, want = (t.value_type if pa.types.is_dictionary(t) else t for t in (got, want))
    if pa.types.is_integer(got) and pa.types.is_integer(want):
        return "integers"
    if _number_type(want):
        return "numbers"
    if pa.types.is_temporal(got) and pa.types.is_temporal(want):
        return "times"
    return "text"


def _fingerprint(col: pa.ChunkedArray, kind: str) -> int:
    """A column's fingerprint as :func:`_kind` says: the sum (mod 2**64) of its row hashes."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if kind == "integers":
        return _int_hash_sum(col)
    if kind == "times":
        return _int_hash_sum(pc.cast(pc.cast(col, pa.timestamp("ns")), pa.int64()))
    if kind == "text":
        return _text_hash_sum(pc.cast(col, pa.large_string()))
    return _number_hash_sum(col)


def _floats(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Numbers as float64, a missing value (or one that is no number) as NaN."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if _number_type(col.type):
        return pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
    return pd.to_numeric(col.to_pandas(), errors="coerce").to_numpy("float64", na_value=np.nan)


def _sorted_numbers(col: pa.ChunkedArray) -> np.ndarray:
    return np.sort(_floats(col))


_DROPPED_BITS = 32
"""Low bits of a float64's 52-bit mantissa rounded off before it is hashed: values within about
2**-20 of each other hash alike, unless they fall either side of a rounding step."""


def _number_hash_sum(col: pa.ChunkedArray) -> int:
    total = np.uint64(0)
    half, keep = np.uint64(1 << (_DROPPED_BITS - 1)), ~np.uint64((1 << _DROPPED_BITS) - 1)
    for chunk in col.chunks:
        a = _floats(chunk) + 0.0  # -0.0 becomes 0.0
        with np.errstate(over="ignore"):
            h = _mix((a.view(np.uint64) + half) & keep)  # the magnitude rounded to nearest
            h[np.isnan(a)] = _MISSING
            total += h.sum(dtype=np.uint64)
    return int(total)


def _number_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


_MISSING = np.uint64(0x9E3779B97F4A7C15)
"""The hash of a missing value, whatever the column's kind."""


def _mix(h: np.ndarray) -> np.ndarray:
    """A 64-bit finalizer (splitmix64's): nearby inputs get unrelated hashes."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def _int_hash_sum(col: pa.ChunkedArray) -> int:
    total = np.uint64(0)
    for chunk in col.chunks:
        h = _mix(pc.cast(chunk.fill_null(0), pa.int64()).to_numpy().astype(np.uint64))
        h[~chunk.is_valid().to_numpy(zero_copy_only=False)] = _MISSING
        with np.errstate(over="ignore"):
            total += h.sum(dtype=np.uint64)
    return int(total)


_LENGTH = np.uint64(0xD6E8FEB86659FD93)
"""The weight of a value's length in its hash (an empty text differs from a missing one)."""

_ROWS_AT_ONCE = 1 << 20
"""Rows of a text column hashed at a time, on one of :data:`_SLICES`' threads (the byte arrays
of a slice are a few times its size)."""

_SLICES = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="text-hash")
"""The threads that hash text slices: one per core, whatever the number of columns hashed at once
(a column's thread only waits on them)."""

_PROBE_ROWS = 1 << 16
"""Rows of a slice whose distinct values decide how it is hashed (:func:`_slice_hashes`)."""

_REPEATS = 8
"""A slice whose first rows repeat each value this many times on average is hashed through its
distinct values."""


def _text_hash_sum(col: pa.ChunkedArray) -> int:
    """The sum (mod 2**64) of each value's hash, from the Arrow buffers: a polynomial over its
    UTF-8 bytes, mixed with its length; a missing value hashes to :data:`_MISSING`."""
    step = _ROWS_AT_ONCE
    parts = [chunk.slice(at, step) for chunk in col.chunks for at in range(0, len(chunk), step)]
    total = np.uint64(0)
    for part_sum in _SLICES.map(lambda part: _slice_hashes(part).sum(dtype=np.uint64), parts):
        with np.errstate(over="ignore"):
            total += part_sum
    return int(total)


def _slice_hashes(arr: pa.LargeStringArray) -> np.ndarray:
    """Each row's hash (:func:`_text_hashes`); where the first rows repeat their values (keys
    such as ``id42``), each distinct value is hashed once and its rows take its hash, which pays
    only where values repeat (docs/benchmarks/user-queries.md)."""
    probe = arr.slice(0, _PROBE_ROWS)
    if pc.count_distinct(probe, mode="all").as_py() * _REPEATS > len(probe):
        return _text_hashes(arr)
    coded = pc.dictionary_encode(arr)
    h = _text_hashes(coded.dictionary)[coded.indices.fill_null(0).to_numpy()]
    h[~arr.is_valid().to_numpy(zero_copy_only=False)] = _MISSING
    return h


def _text_hashes(arr: pa.LargeStringArray) -> np.ndarray:
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    data = arr.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    raw = raw[offsets[0] : offsets[-1]]
    starts, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
    row = np.repeat(np.arange(n), lengths)
    pos = np.arange(len(raw), dtype=np.int64) - starts[row]
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(int(lengths.max(initial=0)) + 1, 1099511628211, np.uint64))
        every = np.zeros(len(raw) + 1, np.uint64)
        np.cumsum((raw.astype(np.uint64) + np.uint64(1)) * powers[pos], out=every[1:])
        h = every[starts + lengths] - every[starts] + lengths.astype(np.uint64) * _LENGTH
    h = _mix(h)
    h[~arr.is_valid().to_numpy(zero_copy_only=False)] = _MISSING
    return h


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    keys = pd.DataFrame(
        {c: (_text(df[c]) if not _number(df[c]) else df[c].astype("float64").round(6)) for c in df.columns}
    )
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return df.loc[order].reset_index(drop=True)


def table_path(folder: str | os.PathLike, table: str) -> str:
    """What a user passes to ``dd.read_parquet`` for ``table``: its directory where the tables
    were made with several files each, else its file."""
    directory = pathlib.Path(folder) / table
    return str(directory) if directory.is_dir() else str(directory.with_name(f"{table}.parquet"))


def table_glob(folder: str | os.PathLike, table: str) -> str:
    """:func:`table_path` as ``pl.scan_parquet`` and DuckDB's ``read_parquet`` take it: a glob
    of the directory's files, or the one file."""
    path = table_path(folder, table)
    return os.path.join(path, "*.parquet") if os.path.isdir(path) else path


def suites() -> dict[str, Suite]:
    from . import h2o, tpch

    return {s.name: s for s in (h2o.GROUPBY, h2o.JOIN, tpch.SUITE)}
