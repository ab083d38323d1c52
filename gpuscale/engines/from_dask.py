"""A Dask DataFrame expression translated, node by node, into one Polars LazyFrame.

The second module of gpuscale that reads Dask's internals (beside :mod:`gpuscale._dask_compat`):
it walks the logical expression a collection holds (``collection.expr``, before Dask optimizes
it) and lowers each node with the function :data:`RULES` names for its class. A node it does not
cover, or one whose meaning in Polars could differ from Dask's, raises :class:`Untranslatable`
naming the operation, and the caller runs the collection on Dask. Checked against Dask
``DASK_CHECKED``; a class Dask renames or moves is simply not translated.

What a translated plan returns is Dask's answer (:mod:`gpuscale.engines.answer` builds it from
the collection's own metadata): the same columns, dtypes and index, and the row order where Dask
defines one (after ``sort_values``, ``nlargest``, ``set_index``, ``groupby(sort=True)``, or
straight from the files). An index Dask derives from its partitions (each partition's 0..n-1, as
``read_parquet`` and ``merge`` leave it) is no part of the answer: the translated result numbers
its rows 0..n-1. docs/guide/engines.md lists what is translated and the differences.
"""

from __future__ import annotations

import ast
import datetime as _dt
import functools
import importlib
import itertools
import numbers
import operator
import os
import pathlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import polars as pl

DASK_CHECKED = "2026.8.0"


class Untranslatable(Exception):
    """A node of the plan that has no Polars translation here: ``operation`` is what the user
    wrote (``groupby(...).apply``), ``why`` the reason in a few words."""

    def __init__(self, operation: str, why: str = ""):
        self.operation, self.why = operation, why
        super().__init__(f"{operation}: {why}" if why else operation)


# ---------------------------------------------------------------------------------------
# What a node lowers to
# ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class Rows:
    """A set of rows: ``lf``'s. A child adds columns to its parent's rows and keeps them (a
    scalar joined to every row), so expressions over the parent are valid on the child."""

    lf: pl.LazyFrame
    token: int
    parent: Rows | None = None

    def chain(self):
        r = self
        while r is not None:
            yield r
            r = r.parent


@dataclass(eq=False)
class Frame:
    """A DataFrame: its columns as (label, expression over ``rows.lf``), its index the same
    (None: Dask's positional index), and whether Dask defines the row order."""

    rows: Rows
    columns: list[tuple[Any, pl.Expr]]
    index: list[tuple[Any, pl.Expr]] | None
    ordered: bool

    def expr_of(self, label) -> pl.Expr:
        for lab, e in self.columns:
            if _same_label(lab, label):
                return e
        raise Untranslatable("column selection", f"no column {label!r}")


@dataclass(eq=False)
class Column:
    """A Series: one expression over ``rows.lf`` with its index and order."""

    rows: Rows
    expr: pl.Expr
    label: Any
    index: list[tuple[Any, pl.Expr]] | None
    ordered: bool


@dataclass(eq=False)
class Value:
    """A scalar: ``expr`` evaluated over ``lf`` gives one row (an aggregation), or a constant
    (``lf`` None, ``const`` the Python value)."""

    lf: pl.LazyFrame | None
    expr: pl.Expr
    const: Any = None
    pytype: type | None = None
    """The Python type Dask's answer has where it is not its metadata's (``len``, ``size``:
    int)."""


Lowered = Frame | Column | Value


def _same_label(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b) or (a == b and not isinstance(a, (tuple, str)))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------
# The translator
# ---------------------------------------------------------------------------------------
@dataclass
class Translator:
    """Lowers Dask expressions; one per compute call, so that a node shared by several
    collections (or several times in one) becomes one sub-plan, which Polars computes once."""

    memo: dict[str, Lowered] = field(default_factory=dict)
    reads: list[dict[str, Any]] = field(default_factory=list)
    """What each Parquet read scans: files and the columns Dask's metadata lists."""
    _tokens: itertools.count = field(default_factory=itertools.count)
    _names: itertools.count = field(default_factory=itertools.count)

    def lower(self, node) -> Lowered:
        key = node._name
        if key in self.memo:
            return self.memo[key]
        rule = _rule_for(node)
        if rule is None:
            raise Untranslatable(_operation(node))
        out = rule(self, node)
        self.memo[key] = out
        return out

    def operand(self, node, name: str) -> Lowered | Any:
        """An operand: lowered when it is an expression, else as it is."""
        v = node.operand(name)
        return self.lower(v) if _is_expr(v) else v

    def rows(self, lf: pl.LazyFrame, parent: Rows | None = None) -> Rows:
        return Rows(lf, parent.token if parent is not None else next(self._tokens), parent)

    def fresh(self) -> str:
        return f"__gs{next(self._names)}"


def _dask_name(node) -> str:
    """The name of Dask's class that ``node``'s class is, stands for (:data:`STANDS_FOR`), or
    derives from (dask-cudf's own expressions derive from Dask's: ``CudfGroupbyAgg`` is a
    ``GroupbyAggregation``)."""
    for cls in type(node).__mro__:
        if cls.__name__ in STANDS_FOR:
            return STANDS_FOR[cls.__name__][1]
        if cls.__module__.split(".")[0] == "dask":
            return cls.__name__
    return type(node).__name__


def _is_expr(v) -> bool:
    return hasattr(v, "_name") and hasattr(v, "operands")


def _operation(node) -> str:
    name = _dask_name(node)
    return OPERATIONS.get(name, name)


OPERATIONS = {
    "MapPartitions": "map_partitions (your function runs on each partition)",
    "GroupByApply": "groupby(...).apply (your function runs on each group)",
    "GroupByTransform": "groupby(...).transform",
    "Apply": "apply (your function runs on each row)",
    "Map": "map",
    "Loc": ".loc",
    "ILoc": ".iloc",
    "Index": ".index",
    "ToParquet": "to_parquet",
    "FromMapProjectable": "read_csv / from_map",
    "FromMap": "from_map",
    "FromDelayed": "from_delayed",
    "FromGraph": "a persisted collection",
    "Repartition": "repartition",
    "MapOverlap": "map_overlap / rolling",
    "Categorize": "categorize",
}
"""A node's class name as the user wrote the operation, for reasons that name it."""


# ---------------------------------------------------------------------------------------
# Helpers shared by the rules
# ---------------------------------------------------------------------------------------
def materialize(t: Translator, x: Frame | Column, names: list[str] | None = None) -> Frame:
    """``x`` as a Frame whose columns are plain columns of its own LazyFrame (before an
    operation that changes the rows): data columns named ``names`` (fresh where None), index
    levels fresh."""
    cols = x.columns if isinstance(x, Frame) else [(x.label, x.expr)]
    names = names or [t.fresh() for _ in cols]
    index = x.index or []
    index_names = [t.fresh() for _ in index]
    lf = x.rows.lf.select(
        [e.alias(n) for (_, e), n in zip(index, index_names)] + [e.alias(n) for (_, e), n in zip(cols, names)]
    )
    return Frame(
        t.rows(lf),
        [(lab, pl.col(n)) for (lab, _), n in zip(cols, names)],
        [(lab, pl.col(n)) for (lab, _), n in zip(index, index_names)] if x.index is not None else None,
        x.ordered,
    )


def align(a: Rows, b: Rows) -> Rows:
    """The rows where expressions over ``a`` and over ``b`` are both valid; Untranslatable when
    they are different rows (Dask would align them by index)."""
    if a is b:
        return a
    if a.token == b.token:
        if any(r is b for r in a.chain()):
            return a
        if any(r is a for r in b.chain()):
            return b
    raise Untranslatable(
        "an operation between two frames", "their rows are not the same (Dask aligns on index)"
    )


def broadcast(t: Translator, rows: Rows, v: Value) -> tuple[Rows, pl.Expr]:
    """A scalar computed by another plan, joined to every row of ``rows``: the rows that
    carry it, and its expression there."""
    if v.lf is None:
        return rows, v.expr
    name = t.fresh()
    lf = rows.lf.join(v.lf.select(v.expr.alias(name)), how="cross")
    return t.rows(lf, rows), pl.col(name)


def literal(x) -> pl.Expr:
    """A Python, NumPy or pandas scalar as a Polars literal; Untranslatable for others."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return pl.lit(None)
    if isinstance(x, pd.Timestamp):
        if x.tz is not None:
            raise Untranslatable("a timezone-aware timestamp", "time zones are not translated")
        return pl.lit(x.to_pydatetime())
    if isinstance(x, pd.Timedelta):
        return pl.lit(x.to_pytimedelta())
    if isinstance(x, np.datetime64):
        return literal(pd.Timestamp(x))
    if isinstance(x, np.timedelta64):
        return literal(pd.Timedelta(x))
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, _dt.datetime) and x.tzinfo is not None:
        raise Untranslatable("a timezone-aware timestamp", "time zones are not translated")
    if isinstance(x, (bool, numbers.Number, str, _dt.date, _dt.timedelta)):
        return pl.lit(x)
    raise Untranslatable("an operand", f"a {type(x).__name__} value is not translated")


def as_operand(t: Translator, x) -> Lowered:
    if isinstance(x, (Frame, Column, Value)):
        return x
    return Value(None, literal(x), x)


def _meta(node):
    """A node's metadata as pandas: cuDF's as Arrow-typed pandas (its strings are not objects,
    and its missing values stay missing, as :func:`_nullable` reads them), converted once per
    node (:data:`_AS_PANDAS`)."""
    if not _on_cudf(node):
        return node._meta
    key = node._name
    if key not in _AS_PANDAS:
        if len(_AS_PANDAS) > 4096:
            _AS_PANDAS.clear()
        _AS_PANDAS[key] = node._meta.to_pandas(arrow_type=True)
    return _AS_PANDAS[key]


def _on_cudf(node) -> bool:
    """Whether ``node``'s partitions are cuDF's (where its semantics differ from pandas')."""
    return type(node._meta).__module__.partition(".")[0] == "cudf"


_AS_PANDAS: dict[str, Any] = {}
"""cuDF metadata as pandas, by the expression's name (a name is the node's token: the same
name, the same metadata)."""


def _is_series_meta(meta) -> bool:
    return hasattr(meta, "name") and getattr(meta, "ndim", None) == 1 and not hasattr(meta, "levels")


def _is_frame_meta(meta) -> bool:
    return getattr(meta, "ndim", None) == 2


def _dtype_kind(dtype) -> str:
    """``f`` floats, ``i`` / ``u`` integers, ``b`` booleans, ``M`` / ``m`` times, ``s`` text, ``o``
    anything else (objects, categories, decimals)."""
    if isinstance(dtype, pd.CategoricalDtype) or getattr(dtype, "tz", None) is not None:
        return "o"
    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        at = dtype.pyarrow_dtype
        for test, kind in (
            (pa.types.is_floating, "f"),
            (pa.types.is_integer, "i"),
            (pa.types.is_boolean, "b"),
            (pa.types.is_timestamp, "M"),
            (
                lambda a: pa.types.is_string(a) or pa.types.is_large_string(a) or pa.types.is_string_view(a),
                "s",
            ),
        ):
            if test(at):
                return "o" if kind == "M" and at.tz is not None else kind
        return "o"
    if pd.api.types.is_bool_dtype(dtype):
        return "b"
    if pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype):
        return "s"
    if pd.api.types.is_object_dtype(dtype):
        return "o"
    kind = getattr(dtype, "kind", "O")
    return kind if kind in "fiubMm" else "o"


def _kind_of(node) -> str:
    meta = _meta(node)
    if _is_series_meta(meta):
        return _dtype_kind(meta.dtype)
    if _is_frame_meta(meta):
        return "o"
    return _dtype_kind(np.asarray(meta).dtype) if np.asarray(meta).dtype != object else "o"


def _nullable(*nodes) -> bool:
    """Whether a Series operand holds a dtype whose missing value is ``pd.NA`` (pyarrow
    strings, nullable integers and booleans): pandas' comparisons and string tests keep it
    missing there, and answer False for NumPy's dtypes."""
    for node in nodes:
        if _is_expr(node):
            meta = _meta(node)
            if _is_series_meta(meta) and getattr(meta.dtype, "na_value", None) is pd.NA:
                return True
    return False


def missing(expr: pl.Expr, kind: str) -> pl.Expr:
    """pandas' ``isna``: null, and NaN for floats."""
    # not ~(x <= inf), which Polars writes as x > inf: true for NaN in Polars' order, false on cuDF
    return ~_not_nan(expr).fill_null(False) if kind == "f" else expr.is_null()


def _not_nan(expr: pl.Expr) -> pl.Expr:
    """True where a float is not NaN (null where it is null), as no greater than infinity (NaN
    is not, in IEEE's order and in Polars' alike): Polars' ``is_nan``, ``is_not_nan`` and
    ``fill_nan`` give wrong answers on cudf-polars' streaming executor (docs/decisions.md,
    ``engine.streaming``)."""
    return expr <= float("inf")


def nan_to_null(expr: pl.Expr) -> pl.Expr:
    """A float's NaN as null, as pandas skips both (:func:`_not_nan`)."""
    return pl.when(_not_nan(expr)).then(expr)


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------
def read_parquet(t: Translator, node) -> Lowered:
    meta = _meta(node)
    if node.operand("filesystem") not in ("fsspec", "arrow", None) or node.operand("storage_options"):
        raise Untranslatable("read_parquet", "files on a remote file system")
    files = _parquet_files(node)
    if not files:
        raise Untranslatable("read_parquet", "no local files")
    if node.operand("categories") or node.operand("calculate_divisions"):
        raise Untranslatable("read_parquet", "categories / calculate_divisions")
    metas = meta.to_frame() if _is_series_meta(meta) else meta
    for label, dtype in metas.dtypes.items():
        if _dtype_kind(dtype) == "o":
            raise Untranslatable("read_parquet", f"column {label!r} is {dtype} in pandas (not translated)")
    schema = pl.scan_parquet(files[0]).collect_schema()
    index_cols: list[str] = []
    index_names = list(meta.index.names)
    if not (isinstance(meta.index, pd.RangeIndex) and meta.index.name is None):
        for i, name in enumerate(index_names):
            col = name if name in schema else f"__index_level_{i}__"
            if col not in schema:
                raise Untranslatable("read_parquet", "an index that is not a stored column")
            index_cols.append(col)
    labels = list(metas.columns)
    for label in labels:
        if not isinstance(label, str) or label not in schema:
            raise Untranslatable("read_parquet", f"column {label!r} is not a column of the files")
    filters = node.operand("filters")
    lf = pl.scan_parquet(files, hive_partitioning=False)
    if filters:
        lf = lf.filter(_dnf(filters))
    t.reads.append({"files": files, "columns": labels + index_cols})
    rows = t.rows(lf)
    index = [(n, pl.col(c)) for n, c in zip(index_names, index_cols)] if index_cols else None
    cols = [(lab, pl.col(lab)) for lab in labels]
    if _is_series_meta(meta):
        return Column(rows, cols[0][1], meta.name, index, True)
    return Frame(rows, cols, index, True)


CSV_KEYWORDS = frozenset({"header", "sep", "delimiter", "usecols", "dtype", "parse_dates"})
"""pandas' ``read_csv`` keywords a translated read honours; a call with any other keyword (its
missing-value strings, its own names, skipped rows...) stays on Dask."""

PANDAS_NA = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
"""The fields pandas' ``read_csv`` reads as missing by default (its ``na_values`` docs)."""

COMPRESSED = (".gz", ".bz2", ".zip", ".xz", ".zst", ".tar")


def read_csv(t: Translator, node) -> Lowered:
    """Dask's ``read_csv`` (a ``from_map`` of its CSV reader over blocks of local files) as one
    Polars scan of the files, each column parsed as the type of Dask's metadata."""
    func = node.operand("func")
    kw = getattr(func, "keywords", None) or {}
    if (
        getattr(getattr(func, "func", None), "__qualname__", "") != "_read_csv"
        or kw.get("reader") is not pd.read_csv
    ):
        raise Untranslatable(_operation(node))
    if kw.get("colname") is not None:
        raise Untranslatable("read_csv", "include_path_column")
    labels = _labels(_meta(node))
    share = len(labels) / max(len(kw.get("full_columns") or labels), 1)
    return _scan_csv(t, node, dict(kw.get("kwargs") or {}), _csv_files(node), kw.get("dtypes") or {}, share)


def read_csv_cudf(t: Translator, node) -> Lowered:
    """dask-cudf's ``read_csv`` (a ``from_map`` of ``cudf.read_csv`` over byte ranges of local
    files) of numbers, booleans and dates as the same Polars scan; any other ``from_map`` is the
    user's function."""
    func = node.operand("func")
    if (getattr(func, "__module__", ""), getattr(func, "__name__", "")) != ("dask_cudf.io.csv", "_read_csv"):
        raise Untranslatable(_operation(node), "Dask runs your function")
    try:
        paths, blocks = node.operand("iterables")
        files = list(dict.fromkeys(str(p) for p in paths))
        user = {k: v for k, v in blocks[0].items() if k != "byte_range"}
    except Exception:  # noqa: BLE001 - another dask-cudf's layout: not translated
        raise Untranslatable("read_csv", "its files could not be listed") from None
    if not all(os.path.isfile(f) for f in files) or any(f.endswith(COMPRESSED) for f in files):
        raise Untranslatable("read_csv", "no local uncompressed files")
    meta = _meta(node)
    named = dict(meta.dtypes.items()) if _is_frame_meta(meta) else {meta.name: meta.dtype}
    # cuDF's reader gives text another missing-value flavour than the engine's answer
    return _scan_csv(t, node, user, files, named, 1.0, text="under cuDF's reader")


def _labels(meta) -> list:
    return list(meta.columns) if _is_frame_meta(meta) else [meta.name]


def _scan_csv(
    t: Translator, node, user: dict, files: list[str], dtypes: dict, share: float, text=None
) -> Lowered:
    """One Polars scan of ``files`` read as ``user``'s keywords ask, columns typed as ``dtypes``;
    ``text``: why a text column is not translated (None: it is)."""
    extra = sorted(k for k in set(user) - CSV_KEYWORDS if not (k == "storage_options" and not user[k]))
    if extra:
        raise Untranslatable("read_csv", f"keyword {extra[0]!r}")
    if user.get("header", "infer") not in ("infer", 0):
        raise Untranslatable("read_csv", "a header that is not the first line")
    sep = user.get("sep", user.get("delimiter", ","))
    if not isinstance(sep, str) or len(sep) != 1:
        raise Untranslatable("read_csv", f"separator {sep!r}")
    meta = _meta(node)
    labels = _labels(meta)
    schema = {}
    for label in labels:
        if not isinstance(label, str) or label not in dtypes:
            raise Untranslatable("read_csv", f"column {label!r}")
        if text and _dtype_kind(dtypes[label]) not in "fiubM":
            raise Untranslatable("read_csv", f"text column {label!r} {text}")
        schema[label] = _csv_type(label, dtypes[label])
    lf = pl.scan_csv(
        files,
        separator=sep,
        has_header=True,
        infer_schema=False,  # columns left unread stay text; those read are parsed as Dask's
        schema_overrides=schema,
        null_values=list(PANDAS_NA),
        try_parse_dates=False,
    )
    lf = lf.select([pl.col(c) for c in labels])
    t.reads.append(
        {"files": files, "columns": labels, "bytes": int(sum(os.path.getsize(f) for f in files) * share)}
    )
    rows = t.rows(lf)
    cols = [(lab, pl.col(lab)) for lab in labels]
    if _is_series_meta(meta):
        return Column(rows, cols[0][1], meta.name, None, True)
    return Frame(rows, cols, None, True)


def _csv_files(node) -> list[str]:
    """The local files of a read_csv, in Dask's order (each file's first block names it)."""
    files: list[str] = []
    try:
        blocks = node.operand("iterables")[0]
        for task in blocks:
            opened = task.args[0]
            if getattr(opened.fs, "protocol", None) not in ("file", ("file", "local")):
                raise Untranslatable("read_csv", "files on a remote file system")
            if getattr(opened, "compression", None):
                raise Untranslatable("read_csv", "compressed files")
            if not files or files[-1] != opened.path:
                files.append(opened.path)
    except Untranslatable:
        raise
    except Exception:  # noqa: BLE001 - another Dask's layout: not translated
        raise Untranslatable("read_csv", "its files could not be listed") from None
    if not files or any(f.endswith(COMPRESSED) for f in files):
        raise Untranslatable("read_csv", "no local uncompressed files")
    return files


def _csv_type(label: str, dtype) -> pl.DataType:
    kind = _dtype_kind(dtype)
    if isinstance(dtype, pd.ArrowDtype):  # timestamp[ns][pyarrow]: cuDF's metadata of a parsed date
        unit = getattr(dtype.pyarrow_dtype, "unit", None)
    else:
        unit = str(dtype)[len("datetime64[") : -1] if str(dtype).startswith("datetime64[") else None
    if kind == "M" and unit in ("ms", "us", "ns"):
        return pl.Datetime(unit)
    types = {"f": pl.Float64, "i": pl.Int64, "b": pl.Boolean, "s": pl.String}
    if kind not in types or (kind in "fi" and getattr(dtype, "itemsize", 8) != 8):
        raise Untranslatable("read_csv", f"column {label!r} is {dtype}")
    return types[kind]


def _parquet_files(node) -> list[str]:
    """The files of a read, in Dask's order: its fsspec reader's dataset, or the file list of
    its pyarrow reader (``filesystem="arrow"``)."""
    try:
        info = node._dataset_info
        if "ds" in info:
            files = [str(f) for f in info["ds"].files]
            partitioned = bool(info.get("partition_names") or info.get("partitions"))
        else:
            files = [f.path for f in info["all_files"]]
            partitioned = any("=" in pathlib.Path(f).parent.name for f in files)
    except Exception:  # noqa: BLE001 - another Dask's layout: not translated
        raise Untranslatable("read_parquet", "its files could not be listed") from None
    if partitioned:
        raise Untranslatable("read_parquet", "a hive-partitioned data set")
    return [str(pathlib.Path(f)) for f in files]


def _dnf(filters) -> pl.Expr:
    """Dask / pyarrow's filters (a list of conditions, or a list of such lists: OR of ANDs)."""
    if filters and not isinstance(filters[0], list):
        filters = [filters]
    ops = {
        "==": operator.eq,
        "=": operator.eq,
        "!=": operator.ne,
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
    }
    out = None
    for conj in filters:
        term = None
        for col, op, val in conj:
            if op in ops:
                e = ops[op](pl.col(col), literal(val))
            elif op in ("in", "not in"):
                e = pl.col(col).is_in(list(val))
                e = ~e if op == "not in" else e
            else:
                raise Untranslatable("read_parquet", f"filter operator {op!r}")
            term = e if term is None else term & e
        out = term if out is None else out | term
    return out


def from_pandas(t: Translator, node) -> Lowered:
    data = node.operand("frame")
    meta = _meta(node)
    if node.operand("columns") is not None and _is_frame_meta(data):
        data = data[list(node.operand("columns"))]
    if node.operand("sort"):
        data = data.sort_index()
    if type(data).__module__.partition(".")[0] == "cudf":
        data = data.to_pandas(arrow_type=True)
    frame = data.to_frame() if _is_series_meta(data) else data
    if isinstance(frame.columns, pd.MultiIndex) or not all(isinstance(c, str) for c in frame.columns):
        raise Untranslatable("from_pandas", "column labels that are not all text")
    for label, dtype in frame.dtypes.items():
        if _dtype_kind(dtype) == "o":
            raise Untranslatable("from_pandas", f"column {label!r} is {dtype}")
    levels = [t.fresh() for _ in frame.index.names]
    flat = frame.copy()
    flat.index = (
        pd.MultiIndex.from_arrays(
            [frame.index.get_level_values(i) for i in range(frame.index.nlevels)], names=levels
        )
        if frame.index.nlevels > 1
        else frame.index.rename(levels[0])
    )
    try:
        lf = pl.from_pandas(flat.reset_index()).lazy()
    except Exception as e:  # noqa: BLE001 - what Polars cannot hold stays on Dask
        raise Untranslatable("from_pandas", f"Polars cannot hold this frame ({type(e).__name__})") from None
    rows = t.rows(lf)
    index = [(n, pl.col(c)) for n, c in zip(frame.index.names, levels)]
    cols = [(c, pl.col(c)) for c in frame.columns]
    if _is_series_meta(meta):
        return Column(rows, cols[0][1], meta.name, index, True)
    return Frame(rows, cols, index, True)


def passthrough(t: Translator, node) -> Lowered:
    return t.lower(node.operand("frame"))


# ---------------------------------------------------------------------------------------
# Columns: selection, assignment, renaming
# ---------------------------------------------------------------------------------------
def projection(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Frame):
        raise Untranslatable("selecting from a Series", "not translated")
    meta = _meta(node)
    if _is_series_meta(meta):
        return Column(x.rows, x.expr_of(node.operand("columns")), meta.name, x.index, x.ordered)
    return Frame(x.rows, [(lab, x.expr_of(lab)) for lab in meta.columns], x.index, x.ordered)


def assign(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Frame):
        raise Untranslatable("assign", "on a Series")
    pairs = node.operands[len(node._parameters) :]
    rows, cols = x.rows, list(x.columns)
    for label, value in zip(pairs[::2], pairs[1::2]):
        v = as_operand(t, t.lower(value) if _is_expr(value) else value)
        if isinstance(v, Frame):
            raise Untranslatable("assign", "a DataFrame as a column")
        if isinstance(v, Column):
            rows = align(rows, v.rows)
            e = v.expr
        else:
            rows, e = broadcast(t, rows, v)
        for i, (lab, _) in enumerate(cols):
            if _same_label(lab, label):
                cols[i] = (lab, e)
                break
        else:
            cols.append((label, e))
    meta = _meta(node)
    if [lab for lab, _ in cols] != list(meta.columns):
        raise Untranslatable("assign", "its columns differ from Dask's")
    return Frame(rows, cols, x.index, x.ordered)


def relabel(t: Translator, node) -> Lowered:
    """rename(columns=...), ``df.columns = [...]``: the same columns under Dask's labels."""
    x = t.lower(node.operand("frame"))
    meta = _meta(node)
    if isinstance(x, Column):
        if not _is_series_meta(meta):
            raise Untranslatable("rename", "not translated")
        return replace(x, label=meta.name)
    labels = list(meta.columns)
    if len(labels) != len(x.columns):
        raise Untranslatable("rename", "its columns differ from Dask's")
    return Frame(x.rows, [(lab, e) for lab, (_, e) in zip(labels, x.columns)], x.index, x.ordered)


def rename_series(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    idx = node.operand("index")
    if not isinstance(x, Column) or not (
        idx is None or pd.api.types.is_scalar(idx) or isinstance(idx, tuple)
    ):
        raise Untranslatable("Series.rename", "renaming index values is not translated")
    return replace(x, label=_meta(node).name)


def drop(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Frame):
        raise Untranslatable("drop", "on a Series")
    return Frame(x.rows, [(lab, x.expr_of(lab)) for lab in _meta(node).columns], x.index, x.ordered)


def to_frame(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Column):
        raise Untranslatable("to_frame", "not a Series")
    (label,) = list(_meta(node).columns)
    return Frame(x.rows, [(label, x.expr)], x.index, x.ordered)


def reset_index(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    meta = _meta(node)
    if node.operand("drop"):
        if isinstance(x, Column):
            return replace(x, index=None)
        return Frame(x.rows, x.columns, None, x.ordered)
    if x.index is None:
        raise Untranslatable(
            "reset_index", "Dask's positional index becomes a column, and its values depend on the partitions"
        )
    cols = [e for _, e in x.index] + ([x.expr] if isinstance(x, Column) else [e for _, e in x.columns])
    labels = list(meta.columns)
    if len(labels) != len(cols):
        raise Untranslatable("reset_index", "its columns differ from Dask's")
    return Frame(x.rows, list(zip(labels, cols)), None, x.ordered)


def set_index(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    other = node.operand("_other")
    if not isinstance(x, Frame) or node.operand("append") or node.operand("user_divisions") is not None:
        raise Untranslatable("set_index", "append / divisions are not translated")
    meta = _meta(node)
    if _is_expr(other):
        col = t.lower(other)
        if not isinstance(col, Column):
            raise Untranslatable("set_index", "a frame as index")
        rows, key = align(x.rows, col.rows), col.expr
    else:
        rows, key = x.rows, x.expr_of(other)
    m = materialize(
        t, Frame(rows, [(lab, x.expr_of(lab)) for lab in meta.columns], [(meta.index.name, key)], True)
    )
    return _sorted(t, m, [m.index[0][1]], [not node.operand("ascending")])


# ---------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------
BINARY = {
    "Add": operator.add,
    "Sub": operator.sub,
    "Mul": operator.mul,
    "Div": operator.truediv,
    "FloorDiv": operator.floordiv,
    "Mod": operator.mod,
    "Pow": operator.pow,
    "And": operator.and_,
    "Or": operator.or_,
    "XOr": operator.xor,
}
COMPARE = {
    "EQ": (operator.eq, False),
    "NE": (operator.ne, True),
    "LT": (operator.lt, False),
    "LE": (operator.le, False),
    "GT": (operator.gt, False),
    "GE": (operator.ge, False),
}
"""A comparison and the answer pandas gives where a side is missing (NaN)."""


def binop(t: Translator, node) -> Lowered:
    name = _dask_name(node)
    a = as_operand(t, t.operand(node, "left"))
    b = as_operand(t, t.operand(node, "right"))
    if isinstance(a, Frame) or isinstance(b, Frame):
        raise Untranslatable(f"a DataFrame operator ({name})", "not translated")
    if name in COMPARE:
        op, when_missing = COMPARE[name]
        kinds = {_kind_of(x) for x in (node.operand("left"), node.operand("right")) if _is_expr(x)}
        if "o" in kinds:
            raise Untranslatable(f"comparison ({name})", "of object columns")

        a, b = (_as_time(u, w) for u, w in ((a, node.operand("right")), (b, node.operand("left"))))

        nullable = _nullable(node.operand("left"), node.operand("right"))
        # Polars' order puts NaN above every number and equal to itself; pandas', cuDF's and
        # cudf-polars' (IEEE's) compare it with nothing
        operands = (node.operand("left"), node.operand("right"))
        floats = [_is_expr(o) and _kind_of(o) == "f" and not _on_cudf(node) for o in operands]

        def fn(x, y):
            r = op(x, y)
            if any(floats):
                nan_free = [_not_nan(e).fill_null(True) for e, f in zip((x, y), floats) if f]
                r = pl.when(functools.reduce(operator.and_, nan_free)).then(r).otherwise(when_missing)
            return r if nullable else r.fill_null(when_missing)
    else:
        fn = BINARY[name]
        if name == "Add" and "s" in {_kind_of(x) for x in node.operands if _is_expr(x)}:
            fn = _concat_text
    return combine(t, a, b, fn)


def _as_time(v: Lowered, other) -> Lowered:
    """A text constant compared with a time column, read as pandas reads it (a timestamp)."""
    if isinstance(v, Value) and isinstance(v.const, str) and _is_expr(other) and _kind_of(other) == "M":
        try:
            return Value(None, literal(pd.Timestamp(v.const)), pd.Timestamp(v.const))
        except ValueError:
            raise Untranslatable("a comparison", f"{v.const!r} is not a time") from None
    return v


def _concat_text(x: pl.Expr, y: pl.Expr) -> pl.Expr:
    return pl.concat_str([x, y])


def combine(t: Translator, a: Lowered, b: Lowered, fn: Callable) -> Lowered:
    """``fn`` of two operands: Series with Series on the same rows, a Series with a scalar, or
    two scalars."""
    if isinstance(a, Column) or isinstance(b, Column):
        col = a if isinstance(a, Column) else b
        rows = col.rows
        exprs = []
        for x in (a, b):
            if isinstance(x, Column):
                rows = align(rows, x.rows)
                exprs.append(x.expr)
            else:
                rows, e = broadcast(t, rows, x)
                exprs.append(e)
        label = col.label if not (isinstance(a, Column) and isinstance(b, Column)) else _series_name(a, b)
        return Column(rows, fn(*exprs), label, col.index, col.ordered)
    if a.lf is None and b.lf is None:
        return Value(None, fn(a.expr, b.expr))
    if a.lf is None or b.lf is None or a.lf is b.lf:
        return Value(a.lf if a.lf is not None else b.lf, fn(a.expr, b.expr))
    na, nb = t.fresh(), t.fresh()
    lf = a.lf.select(a.expr.alias(na)).join(b.lf.select(b.expr.alias(nb)), how="cross")  # one row each
    return Value(lf, fn(pl.col(na), pl.col(nb)))


def _series_name(a: Column, b: Column):
    return a.label if _same_label(a.label, b.label) else None


def unary(fn: Callable[[pl.Expr], pl.Expr], what: str):
    def rule(t: Translator, node) -> Lowered:
        x = as_operand(t, t.operand(node, "frame"))
        if isinstance(x, Frame):
            raise Untranslatable(what, "on a DataFrame")
        if isinstance(x, Column):
            return replace(x, expr=fn(x.expr))
        return Value(x.lf, fn(x.expr))

    return rule


def invert(e: pl.Expr) -> pl.Expr:
    return ~e


def is_na(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Column):
        raise Untranslatable("isna", "on a DataFrame")
    e = missing(x.expr, _kind_of(node.operand("frame")))
    return replace(x, expr=e if _dask_name(node) == "IsNa" else ~e)


def fillna(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    value = node.operand("value")
    if not isinstance(x, Column) or _is_expr(value) or isinstance(value, dict):
        raise Untranslatable("fillna", "only a Series filled with one value is translated")
    e = x.expr
    if _kind_of(node.operand("frame")) == "f":
        e = nan_to_null(e)
    return replace(x, expr=e.fill_null(literal(value)))


def isin(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Column):
        raise Untranslatable("isin", "on a DataFrame")
    values = _delayed_value(node.operand("values"))
    values = list(values.to_pandas() if hasattr(values, "to_pandas") else values)
    if any(isinstance(v, (pd.Timestamp, np.datetime64, _dt.datetime)) for v in values):
        raise Untranslatable("isin", "of timestamps")
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    kind = _kind_of(node.operand("frame"))
    text = [isinstance(v, str) for v in values if v is not None]
    if (kind == "s" and not all(text)) or (kind != "s" and any(text)) or kind in "oM":
        raise Untranslatable("isin", "values of another type than the column's")
    series = pl.Series(values) if values else pl.Series([], dtype=pl.Null)
    return replace(
        x, expr=x.expr.is_in(series.implode() if hasattr(series, "implode") else series).fill_null(False)
    )


def _delayed_value(v):
    obj = getattr(v, "obj", v)
    if hasattr(obj, "__dask_graph__"):
        return obj.compute(scheduler="sync")
    return obj


def between(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    lo, hi = node.operand("left"), node.operand("right")
    if not isinstance(x, Column) or _is_expr(lo) or _is_expr(hi):
        raise Untranslatable("between", "bounds that are not values")
    closed = {"both": "both", "neither": "none", "left": "left", "right": "right"}[node.operand("inclusive")]
    e = x.expr.is_between(literal(lo), literal(hi), closed=closed)
    return replace(x, expr=e if _nullable(node.operand("frame")) else e.fill_null(False))


def where(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    cond = as_operand(t, t.operand(node, "cond"))
    other = as_operand(t, t.operand(node, "other"))
    if not isinstance(x, Column) or not isinstance(cond, Column) or isinstance(other, Frame):
        raise Untranslatable(_dask_name(node).lower(), "only a Series with a Series condition is translated")
    rows = align(x.rows, cond.rows)
    if isinstance(other, Column):
        rows = align(rows, other.rows)
        o = other.expr
    else:
        rows, o = broadcast(t, rows, other)
    keep = cond.expr if _dask_name(node) == "Where" else ~cond.expr
    return Column(rows, pl.when(keep).then(x.expr).otherwise(o), x.label, x.index, x.ordered)


def round_(t: Translator, node) -> Lowered:
    d = node.operand("decimals")
    if not isinstance(d, int):
        raise Untranslatable("round", "per-column decimals")
    x = as_operand(t, t.operand(node, "frame"))
    if isinstance(x, Frame):
        return Frame(x.rows, [(lab, e.round(d)) for lab, e in x.columns], x.index, x.ordered)
    if isinstance(x, Column):
        return replace(x, expr=x.expr.round(d))
    return Value(x.lf, x.expr.round(d))


def astype(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    meta = _meta(node)
    if isinstance(x, Column):
        return replace(x, expr=x.expr.cast(polars_type(meta.dtype)))
    if isinstance(x, Frame):
        return Frame(
            x.rows,
            [(lab, e.cast(polars_type(meta.dtypes[lab]))) for lab, e in x.columns],
            x.index,
            x.ordered,
        )
    raise Untranslatable("astype", "of a scalar")


def polars_type(dtype) -> pl.DataType:
    """The Polars type of a pandas dtype; Untranslatable for objects, categories and others."""
    kind = _dtype_kind(dtype)
    if kind == "s":
        return pl.String
    if kind == "b":
        return pl.Boolean
    if kind == "M":
        unit = (
            np.datetime_data(np.dtype(dtype))[0]
            if not isinstance(dtype, pd.ArrowDtype)
            else dtype.pyarrow_dtype.unit
        )
        if getattr(dtype, "tz", None) is not None:
            raise Untranslatable("astype", "to a timezone")
        return pl.Datetime(unit if unit in ("ms", "us", "ns") else "ns")
    if kind in "iuf":
        name = np.dtype(dtype.numpy_dtype if hasattr(dtype, "numpy_dtype") else dtype).name
        return {
            "int8": pl.Int8,
            "int16": pl.Int16,
            "int32": pl.Int32,
            "int64": pl.Int64,
            "uint8": pl.UInt8,
            "uint16": pl.UInt16,
            "uint32": pl.UInt32,
            "uint64": pl.UInt64,
            "float32": pl.Float32,
            "float64": pl.Float64,
        }[name]
    raise Untranslatable("astype", f"to {dtype}")


# ---------------------------------------------------------------------------------------
# String and datetime accessors
# ---------------------------------------------------------------------------------------
def accessor(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Column):
        raise Untranslatable("an accessor", "on a DataFrame")
    acc, attr = node.operand("accessor"), node.operand("attr")
    params = _parameters(node)
    args = list(params.get("args", ()))
    kwargs = dict(params.get("kwargs", {}))
    fn = (STR if acc == "str" else DT if acc == "dt" else {}).get(attr)
    if fn is None:
        raise Untranslatable(f".{acc}.{attr}", "not translated")
    e = fn(x.expr, *args, **kwargs)
    if attr in STR_TESTS and (_on_cudf(node) or not _nullable(node.operand("frame"))):
        e = e.fill_null(False)  # cuDF's string tests answer False for a missing value too
    return replace(x, expr=e)


def _parameters(node) -> dict[str, Any]:
    return {p: node.operand(p) for p in node._parameters if p != "frame"}


def _no(*names):
    def check(kwargs, what):
        for n in names:
            if kwargs.get(n) not in (None, 0, True if n == "case" else None):
                raise Untranslatable(what, f"{n}= is not translated")

    return check


def _str_prefix(method: str):
    def fn(e, pat, na=None):
        if na is not None and not (isinstance(na, float) and np.isnan(na)):
            raise Untranslatable(f".str.{method}", "na= is not translated")
        pats = [pat] if isinstance(pat, str) else list(pat)
        f = e.str.starts_with if method == "startswith" else e.str.ends_with
        out = None
        for p in pats:
            out = f(p) if out is None else out | f(p)
        return out

    return fn


def _contains(e, pat, case=True, flags=0, na=None, regex=True):
    if flags or (na is not None and not (isinstance(na, float) and np.isnan(na))):
        raise Untranslatable(".str.contains", "flags= / na= are not translated")
    if regex:
        _regex_ok(pat, ".str.contains")
        return e.str.contains(pat if case else f"(?i){pat}")
    if not case:
        return e.str.to_lowercase().str.contains(pat.lower(), literal=True)
    return e.str.contains(pat, literal=True)


def _regex_ok(pat: str, what: str) -> None:
    import re

    try:
        re.compile(pat)
    except re.error:
        raise Untranslatable(what, "a pattern Python's re rejects") from None
    if "(?<" in pat.replace("(?<P", "") or "(?=" in pat or "(?!" in pat or "\\1" in pat:
        raise Untranslatable(what, "look-around and back-references are not translated")


def _match(anchor_end: bool):
    def fn(e, pat, case=True, flags=0, na=None):
        if flags or na is not None:
            raise Untranslatable(".str.match", "flags= / na= are not translated")
        _regex_ok(pat, ".str.match")
        p = f"^(?:{pat})" + ("$" if anchor_end else "")
        return e.str.contains(p if case else f"(?i){p}")

    return fn


def _slice(e, start=None, stop=None, step=None):
    if isinstance(start, slice):
        start, stop, step = start.start, start.stop, start.step
    if step not in (None, 1) or (start or 0) < 0 or (stop is not None and stop < 0):
        raise Untranslatable(".str.slice", "negative bounds / steps are not translated")
    start = start or 0
    return e.str.slice(start, None if stop is None else max(stop - start, 0))


def _replace(e, pat, repl, n=-1, case=None, flags=0, regex=False):
    if n != -1 or flags or case is False or not isinstance(repl, str):
        raise Untranslatable(".str.replace", "n= / flags= / case= / callables are not translated")
    if regex:
        _regex_ok(pat, ".str.replace")
        if "\\" in repl or "$" in repl:
            raise Untranslatable(".str.replace", "group references in the replacement")
        return e.str.replace_all(pat, repl)
    return e.str.replace_all(pat, repl, literal=True)


def _strip(which):
    def fn(e, to_strip=None):
        return {
            "strip": e.str.strip_chars,
            "lstrip": e.str.strip_chars_start,
            "rstrip": e.str.strip_chars_end,
        }[which](to_strip)

    return fn


STR_TESTS = ("startswith", "endswith", "contains", "match", "fullmatch")
"""String methods that answer True or False: False for a missing value of a NumPy-semantics
dtype, missing for a nullable one (:func:`_nullable`)."""
STR: dict[str, Callable] = {
    "startswith": _str_prefix("startswith"),
    "endswith": _str_prefix("endswith"),
    "contains": _contains,
    "match": _match(False),
    "fullmatch": _match(True),
    "len": lambda e: e.str.len_chars(),
    "lower": lambda e: e.str.to_lowercase(),
    "upper": lambda e: e.str.to_uppercase(),
    "slice": _slice,
    "__getitem__": _slice,
    "replace": _replace,
    "strip": _strip("strip"),
    "lstrip": _strip("lstrip"),
    "rstrip": _strip("rstrip"),
}
DT: dict[str, Callable] = {
    "year": lambda e: e.dt.year(),
    "month": lambda e: e.dt.month(),
    "day": lambda e: e.dt.day(),
    "hour": lambda e: e.dt.hour(),
    "minute": lambda e: e.dt.minute(),
    "second": lambda e: e.dt.second(),
    "quarter": lambda e: e.dt.quarter(),
    "dayofweek": lambda e: e.dt.weekday() - 1,
    "weekday": lambda e: e.dt.weekday() - 1,
    "day_of_week": lambda e: e.dt.weekday() - 1,
    "dayofyear": lambda e: e.dt.ordinal_day(),
    "day_of_year": lambda e: e.dt.ordinal_day(),
    "strftime": lambda e, fmt: e.dt.to_string(fmt),
}


# ---------------------------------------------------------------------------------------
# Rows: filters, sorting, heads, duplicates, concatenation
# ---------------------------------------------------------------------------------------
def filter_(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    pred = as_operand(t, t.operand(node, "predicate"))
    if isinstance(x, Value) or not isinstance(pred, Column):
        raise Untranslatable("a boolean filter", "its condition is not a Series of the same rows")
    rows = align(x.rows, pred.rows)
    lf = rows.lf.filter(pred.expr)
    new = t.rows(lf)
    if isinstance(x, Column):
        return Column(new, x.expr, x.label, x.index, x.ordered)
    return Frame(new, x.columns, x.index, x.ordered)


def query(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    kwargs = node.operand("expr_kwargs") or {}
    if not isinstance(x, Frame) or set(kwargs) - {"local_dict", "global_dict"}:
        raise Untranslatable("query", "only a DataFrame query with no engine options is translated")
    pred = _query_expr(
        x, node.operand("_expr"), {**(kwargs.get("global_dict") or {}), **(kwargs.get("local_dict") or {})}
    )
    return Frame(t.rows(x.rows.lf.filter(pred.fill_null(False))), x.columns, x.index, x.ordered)


def _query_expr(frame: Frame, text: str, names: dict[str, Any]) -> pl.Expr:
    """The subset of pandas' ``query`` grammar that reads the same in Python: comparisons
    (chained too), and / or / not / & / | / ~, arithmetic, ``in`` / ``not in`` lists, column
    names and ``@name`` values."""
    if "`" in text:
        raise Untranslatable("query", "backticked names are not translated")
    src = text.replace("@", "__at_")
    try:
        tree = ast.parse(src, mode="eval").body
    except SyntaxError:
        raise Untranslatable("query", "an expression Python does not parse") from None
    ops = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
        ast.Pow: operator.pow,
        ast.BitAnd: operator.and_,
        ast.BitOr: operator.or_,
    }
    cmps = {
        ast.Eq: operator.eq,
        ast.NotEq: operator.ne,
        ast.Lt: operator.lt,
        ast.LtE: operator.le,
        ast.Gt: operator.gt,
        ast.GtE: operator.ge,
    }

    def value(n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, (ast.List, ast.Tuple)):
            return [value(v) for v in n.elts]
        if isinstance(n, ast.Name) and n.id.startswith("__at_") and n.id[5:] in names:
            return names[n.id[5:]]
        raise Untranslatable("query", "a list of values that are not constants")

    def walk(n) -> pl.Expr:
        if isinstance(n, ast.BoolOp):
            parts = [walk(v) for v in n.values]
            return pl.all_horizontal(parts) if isinstance(n.op, ast.And) else pl.any_horizontal(parts)
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, (ast.Not, ast.Invert)):
                return ~walk(n.operand)
            if isinstance(n.op, ast.USub):
                return -walk(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return ops[type(n.op)](walk(n.left), walk(n.right))
        if isinstance(n, ast.Compare):
            out, left = None, n.left
            for op, right in zip(n.ops, n.comparators):
                if isinstance(op, (ast.In, ast.NotIn)):
                    e = walk(left).is_in(list(value(right)))
                    e = ~e if isinstance(op, ast.NotIn) else e
                elif type(op) in cmps:
                    e = cmps[type(op)](walk(left), walk(right))
                else:
                    raise Untranslatable("query", "an operator that is not translated")
                out = e if out is None else out & e
                left = right
            return out
        if isinstance(n, ast.Name):
            if n.id.startswith("__at_"):
                if n.id[5:] not in names:
                    raise Untranslatable("query", f"@{n.id[5:]} is not known here")
                return literal(names[n.id[5:]])
            return frame.expr_of(n.id)
        if isinstance(n, ast.Constant):
            return literal(n.value)
        raise Untranslatable("query", f"{type(n).__name__} is not translated")

    return walk(tree)


def sort_values(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    p = _parameters(node)
    if p.get("sort_function") is not None or p.get("sort_function_kwargs"):
        raise Untranslatable("sort_values", "a custom sort function")
    if not isinstance(x, (Frame, Column)):
        raise Untranslatable("sort_values", "of a scalar")
    by = p["by"] if isinstance(p["by"], list) else [p["by"]]
    asc = p["ascending"] if isinstance(p["ascending"], list) else [p["ascending"]] * len(by)
    m = materialize(t, x)
    keys = [m.expr_of(b) if isinstance(x, Frame) else m.columns[0][1] for b in by]
    keys = _nan_as_missing(node.operand("frame"), by if isinstance(x, Frame) else [None], keys)
    return _as(x, _sorted(t, m, keys, [not a for a in asc], p.get("na_position", "last") == "last"))


def _nan_as_missing(frame, labels: list, keys: list[pl.Expr]) -> list[pl.Expr]:
    """Sort keys with a float's NaN as null: pandas places NaN where it places missing values,
    Polars above every number (``labels``: the keys' columns of ``frame``, None for a Series)."""
    meta = _meta(frame)
    columns = list(getattr(meta, "columns", ()))
    dtypes = [
        meta.dtype if label is None else meta[label].dtype if label in columns else None for label in labels
    ]
    return [nan_to_null(k) if d is not None and _dtype_kind(d) == "f" else k for k, d in zip(keys, dtypes)]


def _sorted(t: Translator, m: Frame, keys: list[pl.Expr], descending: list[bool], nulls_last=True, n=None):
    """``m`` (materialized) sorted by ``keys`` (expressions over its rows), stably; its first
    ``n`` rows when ``n`` is given."""
    names = [t.fresh() for _ in keys]
    lf = m.rows.lf.with_columns([k.alias(nm) for k, nm in zip(keys, names)])
    lf = lf.sort(names, descending=descending, nulls_last=nulls_last, maintain_order=True)
    if n is not None:
        lf = lf.head(n)
    return Frame(t.rows(lf.drop(names)), m.columns, m.index, True)


def _as(x: Frame | Column, out: Frame) -> Frame | Column:
    """``out`` (a frame made from ``x``) as ``x``'s kind: a Series stays a Series."""
    if isinstance(x, Column):
        return Column(out.rows, out.columns[0][1], x.label, out.index, out.ordered)
    return out


def _plain(e: pl.Expr) -> str:
    return e.meta.output_name()


def nlargest(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    n, cols = node.operand("n"), node.operand("_columns")
    largest = _dask_name(node) == "NLargest"
    if isinstance(x, Value):
        raise Untranslatable("nlargest", "of a scalar")
    m = materialize(t, x)
    labels = [None] if isinstance(x, Column) else cols if isinstance(cols, list) else [cols]
    keys = [m.columns[0][1]] if isinstance(x, Column) else [m.expr_of(c) for c in labels]
    keys = _nan_as_missing(node.operand("frame"), labels, keys)
    return _as(x, _sorted(t, m, keys, [largest] * len(keys), True, n))


def head(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if isinstance(x, Value):
        raise Untranslatable("head", "of a scalar")
    n = node.operand("n")
    m = materialize(t, x)
    lf = m.rows.lf.head(n) if _dask_name(node) == "Head" else m.rows.lf.tail(n)
    return _as(x, Frame(t.rows(lf), m.columns, m.index, m.ordered))


def drop_duplicates(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if isinstance(x, Value):
        raise Untranslatable("drop_duplicates", "of a scalar")
    keep = node.operand("keep") if "keep" in node._parameters else "first"
    subset = node.operand("subset") if "subset" in node._parameters else None
    m = materialize(t, x)
    if isinstance(x, Frame) and subset is not None:
        subset = subset if isinstance(subset, list) else [subset]
        names = [_plain(m.expr_of(s)) for s in subset]
    else:
        names = [_plain(e) for _, e in m.columns]
    strategy = {"first": "first", "last": "last", False: "none"}[keep]
    lf = m.rows.lf.unique(subset=names, keep=strategy, maintain_order=m.ordered)
    index = m.index
    if _dask_name(node) == "Unique" or ("ignore_index" in node._parameters and node.operand("ignore_index")):
        index = None
    return _as(x, Frame(t.rows(lf), m.columns, index, m.ordered))


def concat(t: Translator, node) -> Lowered:
    if node.operand("axis") not in (0, "index") or node.operand("_kwargs"):
        raise Untranslatable("concat", "only rows (axis=0) are translated")
    frames = [t.lower(f) for f in node.operands[len(node._parameters) :]]
    if not frames or not all(isinstance(f, Frame) for f in frames):
        raise Untranslatable("concat", "of Series or scalars")
    meta = _meta(node)
    labels = list(meta.columns)
    names = {lab: t.fresh() for lab in labels}
    has_index = [f.index is not None for f in frames]
    if any(has_index) and not all(has_index):
        raise Untranslatable("concat", "of frames with and without an index")
    parts = []
    index_names = [t.fresh() for _ in frames[0].index] if all(has_index) else []
    for f in frames:
        exprs = [e.alias(n) for (_, e), n in zip(f.index or [], index_names)]
        for lab in labels:
            try:
                exprs.append(f.expr_of(lab).alias(names[lab]))
            except Untranslatable:
                if node.operand("join") == "inner":
                    raise
                exprs.append(pl.lit(None).alias(names[lab]))
        parts.append(f.rows.lf.select(exprs))
    lf = pl.concat(parts, how="vertical_relaxed")
    index = [(lab, pl.col(n)) for (lab, _), n in zip(frames[0].index, index_names)] if index_names else None
    return Frame(
        t.rows(lf), [(lab, pl.col(names[lab])) for lab in labels], index, all(f.ordered for f in frames)
    )


# ---------------------------------------------------------------------------------------
# Merges
# ---------------------------------------------------------------------------------------
HOW = {
    "inner": "inner",
    "left": "left",
    "right": "right",
    "outer": "full",
    "leftsemi": "semi",
    "leftanti": "anti",
}


def merge(t: Translator, node) -> Lowered:
    p = _parameters(node)
    p.update(left=node.operand("left"), right=node.operand("right"))
    left, right = t.lower(p["left"]), t.lower(p["right"])
    if not isinstance(left, Frame) or not isinstance(right, Frame):
        raise Untranslatable("merge", "of a Series")
    if p["indicator"] or p["how"] not in HOW:
        raise Untranslatable("merge", f"how={p['how']!r} / indicator are not translated")
    meta = _meta(node)
    lm, rm = materialize(t, left), materialize(t, right)
    lkeys, lcols = _join_side(lm, p["left_on"], p["left_index"], "left")
    rkeys, rcols = _join_side(rm, p["right_on"], p["right_index"], "right")
    if len(lkeys) != len(rkeys):
        raise Untranslatable("merge", "a different number of keys on each side")
    lk = [t.fresh() for _ in lkeys]
    rk = [t.fresh() for _ in rkeys]
    lkt = _key_types(p["left"], p["left_on"], p["left_index"])
    rkt = _key_types(p["right"], p["right_on"], p["right_index"])
    casts = [_common_key_type(a, b) for a, b in zip(lkt, rkt)]
    llf = lm.rows.lf.with_columns([_cast(e, c).alias(n) for e, n, c in zip(lkeys, lk, casts)])
    rlf = rm.rows.lf.with_columns([_cast(e, c).alias(n) for e, n, c in zip(rkeys, rk, casts)])
    how = HOW[p["how"]]
    lf = llf.join(rlf, left_on=lk, right_on=rk, how=how, nulls_equal=True, coalesce=False)
    if how in ("semi", "anti"):
        out = Frame(t.rows(lf), lm.columns, None, False)
        if [lab for lab, _ in out.columns] != list(meta.columns):
            raise Untranslatable("merge", "its columns differ from Dask's")
        return out
    cols = _merge_columns(p, left, right, lm, rm, lcols, rcols)
    if [lab for lab, _ in cols] != list(meta.columns):
        raise Untranslatable("merge", "its columns differ from Dask's")
    index = None
    if p["left_index"] and p["right_index"]:
        index = [(name, pl.coalesce([pl.col(a), pl.col(b)])) for name, a, b in zip(meta.index.names, lk, rk)]
    elif p["left_index"] or p["right_index"]:
        if not (isinstance(meta.index, pd.RangeIndex) or meta.index.dtype == object) and how != "inner":
            raise Untranslatable("merge", "on an index and a column with an outer side")
    return Frame(t.rows(lf), cols, index, False)


def _join_side(x: Frame, on, by_index: bool, side: str):
    if by_index:
        if x.index is None:
            raise Untranslatable(
                "merge", f"on the {side} frame's positional index (its values depend on the partitions)"
            )
        return [e for _, e in x.index], [lab for lab, _ in x.columns]
    on = on if isinstance(on, list) else [on]
    return [x.expr_of(k) for k in on], [lab for lab, _ in x.columns]


def _key_types(node, on, by_index):
    meta = _meta(node)
    if by_index:
        idx = meta.index
        return [idx.get_level_values(i).dtype for i in range(idx.nlevels)]
    on = on if isinstance(on, list) else [on]
    return [meta.dtypes[k] for k in on]


def _common_key_type(a, b):
    ka, kb = _dtype_kind(a), _dtype_kind(b)
    if ka == kb and str(a) == str(b):
        return None
    if ka in "iu" and kb in "iu":
        return pl.Int64
    if ka in "iuf" and kb in "iuf":
        return pl.Float64
    if ka == kb == "s":
        return pl.String
    if ka == kb == "M":
        return pl.Datetime("ns")
    raise Untranslatable("merge", f"keys of types {a} and {b}")


def _cast(e: pl.Expr, to):
    return e if to is None else e.cast(to)


def _merge_columns(p, left, right, lm, rm, lcols, rcols):
    """pandas' merge columns: the left's, then the right's less keys named like the left's,
    overlapping names suffixed; a key named alike on both sides is one column."""
    lon = [] if p["left_index"] else (p["left_on"] if isinstance(p["left_on"], list) else [p["left_on"]])
    ron = [] if p["right_index"] else (p["right_on"] if isinstance(p["right_on"], list) else [p["right_on"]])
    shared = {a for a, b in zip(lon, ron) if _same_label(a, b)}
    lsuf, rsuf = p["suffixes"] or ("", "")
    overlap = {c for c in lcols if c in rcols and c not in shared}
    cols = []
    for lab, e in lm.columns:
        if lab in shared:
            r = rm.expr_of(lab)
            cols.append((lab, pl.coalesce([e, r]) if p["how"] in ("outer", "right") else e))
        elif lab in overlap:
            cols.append((_suffixed(lab, lsuf), e))
        else:
            cols.append((lab, e))
    for lab, e in rm.columns:
        if lab in shared:
            continue
        cols.append((_suffixed(lab, rsuf) if lab in overlap else lab, e))
    return cols


def _suffixed(label, suffix):
    if suffix is None:
        return label
    if not isinstance(label, str):
        raise Untranslatable("merge", "suffixes on labels that are not text")
    return f"{label}{suffix}"


# ---------------------------------------------------------------------------------------
# Aggregations
# ---------------------------------------------------------------------------------------
def _agg(func: str, e: pl.Expr, kind: str) -> pl.Expr:
    if func in ("sum", "mean", "std", "var", "median", "prod") and kind in "so":
        raise Untranslatable(f"{func} of text", "not translated")
    if kind == "f" and func not in ("size", "count"):
        e = nan_to_null(e)
    if func == "sum":
        return e.sum()
    if func == "mean":
        return e.mean()
    if func == "min":
        return e.min()
    if func == "max":
        return e.max()
    if func == "count":
        return e.count() if kind != "f" else nan_to_null(e).count()
    if func == "size":
        return pl.len()
    if func == "nunique":
        return e.drop_nulls().n_unique()
    if func in ("std", "var"):
        return getattr(e, func)(ddof=1)
    if func == "median":
        return e.median()
    if func == "prod":
        return e.product()
    if func == "first":
        return e.drop_nulls().first()
    if func == "last":
        return e.drop_nulls().last()
    raise Untranslatable(f"aggregation {func!r}", "not translated")


KEEPS_MISSING_KEYS = ("Mean", "Std", "Var")
"""Dask's groupby reductions that keep the group of missing keys unless ``dropna=True`` is
given (its other aggregations drop it, as pandas does): the translation gives Dask's answer."""
GROUPBY_FUNCS = {
    "Sum": "sum",
    "Mean": "mean",
    "Min": "min",
    "Max": "max",
    "Count": "count",
    "Size": "size",
    "NUnique": "nunique",
    "Std": "std",
    "Var": "var",
    "First": "first",
    "Last": "last",
    "Prod": "prod",
}


def groupby(t: Translator, node) -> Lowered:
    name = _dask_name(node)
    frame_node = node.operand("frame")
    x = t.lower(frame_node)
    if not isinstance(x, Frame):
        raise Untranslatable("groupby", "of a Series")
    params = _parameters(node)
    if params.get("observed") is False:
        raise Untranslatable("groupby", "observed=False")
    if name in ("Std", "Var") and params.get("ddof", 1) != 1:
        raise Untranslatable("groupby", "ddof other than 1")
    by = node.operands[len(node._parameters) :]
    rows = x.rows
    keys: list[tuple[Any, pl.Expr]] = []
    for b in by:
        if _is_expr(b):
            col = t.lower(b)
            if not isinstance(col, Column):
                raise Untranslatable("groupby", "by a frame")
            rows = align(rows, col.rows)
            keys.append((col.label, col.expr))
        elif isinstance(b, list):
            raise Untranslatable("groupby", "by a list inside the keys")
        else:
            keys.append((b, x.expr_of(b)))
    key_labels = [k for k, _ in keys]
    meta = _meta(node)
    fmeta = _meta(frame_node)
    kinds = {lab: _dtype_kind(dt) for lab, dt in fmeta.dtypes.items()}
    sl = params.get("_slice")
    named = [b for b in by if not _is_expr(b)]
    values = [lab for lab, _ in x.columns if not any(_same_label(lab, k) for k in named)]
    if sl is not None:
        values = sl if isinstance(sl, list) else [sl]
    if name == "GroupbyAggregation":
        pairs = _agg_pairs(params["arg"], values, sl)
    elif name in GROUPBY_FUNCS:
        pairs = [(v, GROUPBY_FUNCS[name]) for v in values]
        if name == "Size":
            pairs = [(None, "size")]
    else:
        raise Untranslatable(_operation(node), "not translated")
    out_labels = [meta.name] if _is_series_meta(meta) else list(meta.columns)
    if len(out_labels) != len(pairs):
        raise Untranslatable("groupby", "its columns differ from Dask's")
    key_names = [t.fresh() for _ in keys]
    agg_names = [t.fresh() for _ in pairs]
    aggs = [
        _agg(
            f, x.expr_of(v) if v is not None else pl.lit(1), kinds.get(v, "o") if v is not None else "i"
        ).alias(n)
        for (v, f), n in zip(pairs, agg_names)
    ]
    if _on_cudf(node):  # cuDF's sum of a group with no values is missing, pandas' is 0
        aggs = [
            pl.when(_agg("count", x.expr_of(v), kinds.get(v, "o")) > 0).then(a).alias(n) if f == "sum" else a
            for (v, f), n, a in zip(pairs, agg_names, aggs)
        ]
    lf = rows.lf
    dropna = params.get("dropna")
    if dropna is True or (dropna is None and name not in KEEPS_MISSING_KEYS):
        kind_of_key = [kinds.get(k, "o") if not _is_expr(b) else _kind_of(b) for k, b in zip(key_labels, by)]
        lf = lf.filter(~pl.any_horizontal([missing(e, kd) for (_, e), kd in zip(keys, kind_of_key)]))
    lf = lf.group_by([e.alias(n) for (_, e), n in zip(keys, key_names)]).agg(aggs)
    ordered = params.get("sort") is True
    if ordered:
        lf = lf.sort(key_names, nulls_last=True, maintain_order=True)
    index_labels = list(meta.index.names)
    index = [(lab, pl.col(n)) for lab, n in zip(index_labels, key_names)]
    r = t.rows(lf)
    if _is_series_meta(meta):
        return Column(r, pl.col(agg_names[0]), meta.name, index, ordered)
    return Frame(r, [(lab, pl.col(n)) for lab, n in zip(out_labels, agg_names)], index, ordered)


def _agg_pairs(arg, values, sl) -> list[tuple[Any, str]]:
    """(input column, function) in the order pandas lays out the result's columns."""

    def fname(f):
        if not isinstance(f, str):
            raise Untranslatable("groupby(...).agg", "a function that is not named by text")
        return f

    if isinstance(arg, str):
        return [(v, fname(arg)) for v in values]
    if isinstance(arg, list):
        return [(v, fname(f)) for v in values for f in arg]
    if isinstance(arg, dict):
        out = []
        for col, fs in arg.items():
            for f in fs if isinstance(fs, list) else [fs]:
                out.append((col, fname(f)))
        return out
    raise Untranslatable("groupby(...).agg", "this form of arguments")


def reduction(t: Translator, node) -> Lowered:
    name = _dask_name(node)
    x = t.lower(node.operand("frame"))
    if not isinstance(x, Column):
        raise Untranslatable(f"{name.lower()} of a DataFrame", "not translated")
    p = _parameters(node)
    if p.get("skipna") is False:
        raise Untranslatable(name.lower(), "skipna=False")
    kind = _kind_of(node.operand("frame"))
    if name == "Var":
        if p.get("ddof", 1) != 1:
            raise Untranslatable("var", "ddof other than 1")
        return Value(x.rows.lf, _agg("var", x.expr, kind))
    func = {
        "Sum": "sum",
        "Mean": "mean",
        "Max": "max",
        "Min": "min",
        "Count": "count",
        "Size": "size",
        "Prod": "prod",
    }
    if name in func:
        return Value(x.rows.lf, _agg(func[name], x.expr, kind), pytype=int if name == "Size" else None)
    if name in ("Any", "All"):
        return Value(x.rows.lf, getattr(x.expr.fill_null(name == "All"), name.lower())())
    raise Untranslatable(name.lower(), "not translated")


def length(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    if isinstance(x, Value):
        raise Untranslatable("len", "of a scalar")
    return Value(x.rows.lf, pl.len(), pytype=int)


def value_counts(t: Translator, node) -> Lowered:
    x = t.lower(node.operand("frame"))
    p = _parameters(node)
    if not isinstance(x, Column) or p.get("normalize"):
        raise Untranslatable("value_counts", "normalize= is not translated")
    meta = _meta(node)
    k, c = t.fresh(), t.fresh()
    lf = x.rows.lf.select(x.expr.alias(k))
    if p.get("dropna", True):
        lf = lf.filter(~missing(pl.col(k), _kind_of(node.operand("frame"))))
    lf = lf.group_by(k).agg(pl.len().alias(c))
    ordered = bool(p.get("sort", True))
    if ordered:
        lf = lf.sort(c, descending=not p.get("ascending", False), maintain_order=True)
    return Column(t.rows(lf), pl.col(c), meta.name, [(meta.index.name, pl.col(k))], ordered)


def map_partitions(t: Translator, node) -> Lowered:
    """Only NumPy's square root of a variance (how Dask writes ``Series.std()``)."""
    func = node.operand("func")
    x = t.lower(node.operand("frame")) if _is_expr(node.operand("frame")) else None
    if func is np.sqrt and isinstance(x, Value) and not node.operand("kwargs"):
        return Value(x.lf, x.expr.sqrt())
    raise Untranslatable(_operation(node), "Dask runs your function")


# ---------------------------------------------------------------------------------------
# The rules, by Dask's class
# ---------------------------------------------------------------------------------------
RULES: dict[type, Callable[[Translator, Any], Lowered]] = {}


def _register() -> None:
    from dask.dataframe.dask_expr import _accessor, _concat, _expr, _groupby, _merge, _reductions, _shuffle
    from dask.dataframe.dask_expr.io import io, parquet

    for cls in (parquet.ReadParquetFSSpec, parquet.ReadParquetPyarrowFS):
        RULES[cls] = read_parquet
    RULES[io.FromPandas] = from_pandas
    RULES[io.FromMapProjectable] = read_csv
    RULES[io.FromMap] = read_csv_cudf
    for name in ("ArrowStringConversion", "ClearDivisions"):
        if hasattr(_expr, name):
            RULES[getattr(_expr, name)] = passthrough
    RULES[_expr.Projection] = projection
    RULES[_expr.Assign] = assign
    RULES[_expr.RenameFrame] = relabel
    RULES[_expr.ColumnsSetter] = relabel
    RULES[_expr.RenameSeries] = rename_series
    RULES[_expr.Drop] = drop
    RULES[_expr.ToFrame] = to_frame
    RULES[_expr.ResetIndex] = reset_index
    RULES[_shuffle.SetIndex] = set_index
    for name in list(BINARY) + list(COMPARE):
        RULES[getattr(_expr, name)] = binop
    RULES[_expr.Invert] = unary(invert, "~")
    RULES[_expr.Neg] = unary(operator.neg, "-")
    RULES[_expr.Abs] = unary(lambda e: e.abs(), "abs")
    RULES[_expr.IsNa] = is_na
    if hasattr(_expr, "NotNa"):
        RULES[_expr.NotNa] = is_na
    RULES[_expr.Fillna] = fillna
    RULES[_expr.Isin] = isin
    RULES[_expr.Between] = between
    RULES[_expr.Where] = where
    RULES[_expr.Mask] = where
    RULES[_expr.Round] = round_
    RULES[_expr.AsType] = astype
    RULES[_accessor.FunctionMap] = accessor
    RULES[_accessor.PropertyMap] = accessor
    RULES[_expr.Filter] = filter_
    RULES[_expr.Query] = query
    RULES[_shuffle.SortValues] = sort_values
    RULES[_reductions.NLargest] = nlargest
    RULES[_reductions.NSmallest] = nlargest
    RULES[_expr.Head] = head
    RULES[_expr.Tail] = head
    RULES[_reductions.DropDuplicates] = drop_duplicates
    RULES[_reductions.Unique] = drop_duplicates
    RULES[_reductions.ValueCounts] = value_counts
    RULES[_concat.Concat] = concat
    RULES[_merge.Merge] = merge
    RULES[_groupby.GroupbyAggregation] = groupby
    for name in GROUPBY_FUNCS:
        RULES[getattr(_groupby, name)] = groupby
    for name in ("Sum", "Mean", "Max", "Min", "Count", "Size", "Var", "Prod", "Any", "All"):
        RULES[getattr(_reductions, name)] = reduction
    RULES[_reductions.Len] = length
    RULES[_expr.MapPartitions] = map_partitions


PASSED_THROUGH = ("NoOp",)
"""Classes of other libraries' expressions that stand for their one operand (dask-cudf wraps
its reads in a ``NoOp``)."""

STANDS_FOR = {"VarCudf": ("dask.dataframe.dask_expr._reductions", "Var")}
"""Classes of other libraries' expressions that compute what a Dask class does, with the same
parameters, without deriving from it (dask-cudf's ``var`` and ``std``), and that Dask class."""


def _rule_for(node):
    """The rule of ``node``'s class; for a class of another library (dask-cudf's reads derive
    from Dask's), of the nearest Dask class it derives from."""
    if not RULES:
        try:
            _register()
        except (ImportError, AttributeError):  # another Dask: nothing is translated
            RULES[type(None)] = None
    own = type(node)
    if own in RULES or own.__module__.split(".")[0] == "dask":
        return RULES.get(own)
    for cls in own.__mro__:
        if cls in RULES:
            return RULES[cls]
        if cls.__name__ in STANDS_FOR:
            module, name = STANDS_FOR[cls.__name__]
            return RULES.get(getattr(importlib.import_module(module), name, None))
        if cls.__name__ in PASSED_THROUGH and "frame" in getattr(cls, "_parameters", ()):
            return passthrough
    return None
