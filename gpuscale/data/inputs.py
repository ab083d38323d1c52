"""Users' own data: files and collections in, described for the record, on the right backend.

* :func:`inspect` describes a path (Parquet, CSV, ``.npy``, Zarr; a file or a folder) or a
  Dask collection without a cluster; every problem is a one-line
  :class:`~gpuscale.errors.UserError` naming the fix.
* :func:`open_source` opens it as a Dask collection on a backend family with Dask's own
  readers (the GPU family reads straight into cuDF), converting through
  :mod:`gpuscale.backends.convert`.
* :func:`parse_agg` / :func:`parse_by` read ``--agg`` / ``--by``; :func:`check_run` does every
  check of a run on user data that needs no cluster.

No GPU library is imported here.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import numpy as np

from ..backends import convert
from ..errors import UserError, missing_module
from ..routes.dataframe import AGGREGATIONS
from . import outputs

SUFFIXES = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".parq": "parquet",
    ".csv": "csv",
    ".npy": "npy",
    ".zarr": "zarr",
}
CSV_COMPRESSED = (".gz", ".bz2", ".xz", ".zst")  # x.csv.gz: read whole (not splittable)
ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup")
FORMAT_NAMES = {"parquet": "Parquet", "csv": "CSV", "npy": ".npy", "zarr": "Zarr"}
ZARR_INSTALL = "pip install zarr  (or pip install 'gpuscale[zarr]')"
COUNTED_CHUNKS = 1_000_000
"""A Zarr array's written chunks are counted (for the note on absent ones) up to this many
chunks."""
VALIDATE_LEVELS = ("off", "fast", "full")
FULL_FIT_FRACTION = 0.5
"""``--validate full`` recomputes on the client when its working set fits this fraction of the
host's available memory."""


@dataclasses.dataclass
class Source:
    """The user's data, as far as it can be known without a cluster."""

    collection: str  # "array" | "dataframe"
    format: str  # parquet | csv | npy | zarr | dask
    path: str | None = None  # absolute path of a file source
    obj: Any = None  # the user's Dask collection (format "dask")
    shape: tuple | None = None  # arrays: the shape; frames: (rows or None, columns)
    dtype: str | None = None  # arrays
    meta: Any = None  # frames: an empty frame with the columns and dtypes
    nbytes: int | None = None  # size in memory, when known without reading the data
    file_bytes: int | None = None
    stored_chunks: tuple | None = None  # zarr: the store's chunk shape
    absent_chunks: tuple[int, int, Any] | None = None  # zarr: (absent, of all, fill value) when any
    chunk_type: str | None = None  # a collection's chunk / partition type

    @property
    def columns(self) -> dict[str, str] | None:
        if self.meta is None:
            return None
        return {str(c): str(t) for c, t in self.meta.dtypes.items()}

    @property
    def label(self) -> str:
        return self.path if self.path else "the DataFrame" if self.collection == "dataframe" else "the array"

    def describe(self) -> dict[str, Any]:
        """The record's ``data``: where the data came from and what it is (not how to make it)."""
        d: dict[str, Any] = {"source": self.path or "user collection", "format": self.format}
        if self.collection == "array":
            d.update(shape=list(self.shape) if self.shape else None, dtype=self.dtype)
        else:
            d.update(rows=self.shape[0] if self.shape else None, columns=self.columns)
        if self.nbytes is not None:
            d["bytes"] = int(self.nbytes)
        if self.file_bytes is not None:
            d["file_bytes"] = int(self.file_bytes)
        if self.stored_chunks is not None:
            d["stored_chunks"] = list(self.stored_chunks)
        if self.absent_chunks is not None:
            absent, total, fill = self.absent_chunks
            d["absent_chunks"] = {
                "absent": absent,
                "of": total,
                "read_as": fill,
                "note": f"{absent} of {total} chunks are not in the store: Zarr reads "
                f"them as the fill value {fill!r}",
            }
        if self.chunk_type:
            d["chunk_type"] = self.chunk_type
        return d


def type_name(obj) -> str:
    top = type(obj).__module__.split(".")[0]
    return type(obj).__name__ if top == "builtins" else f"{top}.{type(obj).__name__}"


def _supported(formats=None) -> str:
    names = {
        "parquet": ".parquet (file or folder)",
        "csv": ".csv (file or folder)",
        "npy": ".npy",
        "zarr": ".zarr",
    }
    return ", ".join(names[f] for f in (formats or names))


def detect_format(path: pathlib.Path) -> str:
    """The format of an existing path, by suffix, else (for a folder) by what it holds."""
    name = path.name.lower()
    for suffix, fmt in SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    if any(name.endswith(".csv" + c) for c in CSV_COMPRESSED):
        return "csv"
    if path.is_dir():
        if any((path / m).exists() for m in ZARR_MARKERS):
            return "zarr"
        files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
        formats = {SUFFIXES.get(p.suffix.lower()) for p in files}
        if (path / "_metadata").exists() or "parquet" in formats:
            return "parquet"
        if "csv" in formats:
            return "csv"
        raise UserError(
            f"cannot tell what the folder {path} holds (no Parquet, CSV or Zarr files in it)",
            f"give one of: {_supported()}",
        )
    raise UserError(
        f"unsupported input file type '{path.suffix or path.name}' ({path})", f"give one of: {_supported()}"
    )


def inspect(data, formats: tuple[str, ...] | None = None) -> Source:
    """Describe ``data`` (a path, or a Dask array / DataFrame) without a cluster."""
    if isinstance(data, (str, os.PathLike)):
        return inspect_path(data, formats)
    return inspect_collection(data)


def inspect_collection(obj) -> Source:
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(obj, da.Array):
        shape = tuple(obj.shape)
        known = all(not (isinstance(n, float) and np.isnan(n)) for n in shape)
        return Source(
            "array",
            "dask",
            obj=obj,
            shape=shape,
            dtype=str(obj.dtype),
            nbytes=int(obj.nbytes) if known else None,
            chunk_type=type_name(obj._meta),
        )
    if isinstance(obj, dd.DataFrame):
        return Source(
            "dataframe",
            "dask",
            obj=obj,
            shape=(None, len(obj.columns)),
            meta=obj._meta,
            chunk_type=type_name(obj._meta),
        )
    if isinstance(obj, dd.Series):
        raise UserError("got a Dask Series", "pass a DataFrame (series.to_frame())")
    kind = type_name(obj)
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and not hasattr(obj, "columns"):
        raise UserError(
            f"got an in-memory {kind}, not a Dask array",
            "wrap it with dask.array.from_array(x, chunks=(rows_per_block, -1))",
        )
    if hasattr(obj, "columns"):
        raise UserError(
            f"got an in-memory {kind}, not a Dask DataFrame",
            "wrap it with dask.dataframe.from_pandas(df, npartitions=N)",
        )
    raise UserError(
        f"cannot use a {kind} as data", f"give a Dask array or DataFrame, or a path to one of: {_supported()}"
    )


def inspect_path(path, formats: tuple[str, ...] | None = None) -> Source:
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        where = p.parent if str(p.parent) not in ("", ".") else pathlib.Path.cwd()
        raise UserError(
            f"input {path} does not exist", f"check the path (relative paths start in {where.resolve()})"
        )
    if not (p.is_file() or p.is_dir()):  # a FIFO, socket or device: reading it would block or never end
        raise UserError(
            f"input {path} is not a regular file or folder (a pipe, socket or device)",
            "write the data to a file first and give that file",
        )
    fmt = detect_format(p)
    if formats is not None and fmt not in formats:
        raise UserError(
            f"{path} is {FORMAT_NAMES[fmt]}, which this workload does not read",
            f"give one of: {_supported(formats)}",
        )
    p = p.resolve()
    if fmt == "npy":
        return _inspect_npy(p)
    if fmt == "zarr":
        return _inspect_zarr(p)
    return _inspect_frame(p, fmt)


def unreadable(path, fmt: str, e: BaseException) -> UserError:
    mismatch = _csv_dtype_mismatch(path, e) if fmt == "csv" else None
    if mismatch is not None:
        return mismatch
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return UserError(
        f"cannot read {path} as {FORMAT_NAMES[fmt]}: {type(e).__name__}: {first[:300]}",
        f"check that it is a valid {FORMAT_NAMES[fmt]} file",
    )


def _inspect_npy(p: pathlib.Path) -> Source:
    if p.is_dir():
        raise UserError(f"{p} is a folder, not a .npy file", "give the .npy file itself")
    with open(p, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise UserError(
                f"{p} is not a .npy file (it has no NumPy header)", "give a file written by numpy.save"
            )
    try:
        a = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any failure to parse the header is the user's file
        raise unreadable(p, "npy", e) from None
    if not isinstance(a, np.ndarray):
        raise UserError(
            f"{p} holds several arrays (an .npz archive), not one .npy array",
            "save one array with numpy.save(path, x)",
        )
    return _file_array("npy", p, a.shape, a.dtype, file_bytes=p.stat().st_size)


def _file_array(fmt: str, p: pathlib.Path, shape, dtype, **more) -> Source:
    """The source of an array file: NumPy chunks of ``shape`` and ``dtype``, their size in
    memory known from both."""
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    return Source(
        "array",
        fmt,
        path=str(p),
        shape=shape,
        dtype=str(dtype),
        nbytes=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
        chunk_type="numpy.ndarray",
        **more,
    )


def _import_zarr():
    try:
        import zarr
    except ImportError:
        raise missing_module("zarr", "reading Zarr input", ZARR_INSTALL) from None
    return zarr


def _inspect_zarr(p: pathlib.Path) -> Source:
    zarr = _import_zarr()
    try:
        node = zarr.open(str(p), mode="r")
    except Exception as e:  # noqa: BLE001
        raise unreadable(p, "zarr", e) from None
    if not hasattr(node, "dtype"):
        names = [n for n, a in node.arrays()] if hasattr(node, "arrays") else []
        raise UserError(
            f"{p} is a Zarr group, not an array",
            f"give the array inside it: {', '.join(f'{p}/{n}' for n in names[:5])}"
            if names
            else "give the path of a Zarr array",
        )
    shape = tuple(int(n) for n in node.shape)
    dtype = np.dtype(node.dtype)
    if dtype.kind not in "biufc":
        raise UserError(
            f"{p} holds {dtype} values, not numbers",
            "gpuscale's array workloads take numbers: save a numeric array (e.g. x.astype('float64'))",
        )
    absent = None
    try:
        total = int(node.nchunks)
        if total > COUNTED_CHUNKS:  # zarr counts the written ones by walking every chunk's name
            raise ValueError("too many chunks to count")
        stored = int(node.nchunks_initialized)
        if stored < total:
            fill = node.fill_value
            absent = (total - stored, total, fill.item() if hasattr(fill, "item") else fill)
    except Exception:  # noqa: BLE001 - a store that cannot list its chunks: not counted
        pass
    return _file_array(
        "zarr", p, shape, dtype, stored_chunks=tuple(int(c) for c in node.chunks), absent_chunks=absent
    )


def _frame_reader(p: pathlib.Path, fmt: str, blocksize=None):
    """Dask's reader call for a frame source under the active ``dataframe.backend``."""
    import dask.dataframe as dd

    if fmt == "parquet":
        return dd.read_parquet(str(p))
    target = str(p / "*.csv") if p.is_dir() else str(p)
    if p.suffix.lower() in CSV_COMPRESSED:
        return dd.read_csv(target, blocksize=None)
    return dd.read_csv(target, **({"blocksize": blocksize} if blocksize else {}))


def _inspect_frame(p: pathlib.Path, fmt: str) -> Source:
    import dask

    try:
        with dask.config.set({"dataframe.backend": "pandas"}):
            df = _frame_reader(p, fmt)  # lazy: reads the footer / a sample for the meta
            meta = df._meta
    except Exception as e:  # noqa: BLE001 - a file Dask cannot parse is the user's to fix
        raise unreadable(p, fmt, e) from None
    rows = nbytes = None
    if fmt == "parquet":
        _check_parquet_schemas(p)
        rows, nbytes = _parquet_size(p)
    elif fmt == "csv":
        _check_csv_headers(p)
        if _csv_header_only(p):
            rows = 0
    if rows == 0:
        raise UserError(
            f"{p} has no rows (only {'a header' if fmt == 'csv' else 'a schema'}: columns "
            f"{', '.join(map(str, meta.columns))})",
            "give a file with data rows",
        )
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
    if fmt == "csv":
        nbytes = 2 * size  # parsed numbers take about as much as their text; strings more
    return Source(
        "dataframe",
        fmt,
        path=str(p),
        shape=(rows, len(meta.columns)),
        meta=meta,
        nbytes=nbytes,
        file_bytes=size,
        chunk_type="pandas.DataFrame",
    )


def _csv_header_only(p: pathlib.Path) -> bool:
    """True when every (uncompressed) CSV file holds at most its header line."""
    files = _csv_files(p)
    if not files or any(f.suffix.lower() in CSV_COMPRESSED for f in files):
        return False
    for f in files:
        with open(f, "rb") as fh:
            lines = [line for _, line in zip(range(2), fh) if line.strip()]
        if len(lines) > 1:
            return False
    return True


ONE_SCHEMA_FIX = "give files with one schema (cast the column to one type and write them again) or one file"


def _arrow_kind(t) -> str | None:
    """What a Parquet column's Arrow type must agree on across files: integer and floating
    columns mix (each file reads on its own, the aggregations take both), as do string types
    of any width and a dictionary (categorical) of them; an all-null column mixes with any."""
    import pyarrow.types as pat

    if pat.is_dictionary(t):
        t = t.value_type
    if pat.is_null(t):
        return None
    if pat.is_integer(t) or pat.is_floating(t):
        return "number"
    if pat.is_string(t) or pat.is_large_string(t) or str(t) == "string_view":
        return "string"
    if pat.is_binary(t) or pat.is_large_binary(t) or str(t) == "binary_view":
        return "binary"
    if pat.is_timestamp(t):
        return f"timestamp {t.tz}"
    return str(t)


def _check_parquet_schemas(p: pathlib.Path) -> None:
    """Refuse, before any cluster starts, a folder of Parquet files whose footers disagree on
    their columns or types (:func:`_arrow_kind`) or cannot be read (Dask would take the first
    file's schema and fail later, on the workers)."""
    if not p.is_dir():
        return
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    try:
        files = sorted(pads.dataset(str(p), format="parquet").files)
    except Exception:  # noqa: BLE001 - the reader's own error is the one to show
        return
    if len(files) < 2:
        return
    first: dict[str, tuple[str, Any]] = {}  # column -> (file, Arrow type) where first seen
    first_name = None
    columns_of_first: set[str] = set()
    for f in files:
        name = os.path.relpath(f, p)
        try:
            schema = pq.read_schema(f)
        except Exception as e:  # noqa: BLE001 - a damaged file among good ones
            raise unreadable(f, "parquet", e) from None
        index = {c for c in (schema.pandas_metadata or {}).get("index_columns") or [] if isinstance(c, str)}
        fields = {fl.name: fl.type for fl in schema if fl.name not in index}
        if first_name is None:
            first_name, columns_of_first = name, set(fields)
        elif set(fields) != columns_of_first:
            missing = sorted(columns_of_first - set(fields))
            has, lacks = (first_name, name) if missing else (name, first_name)
            col = (missing or sorted(set(fields) - columns_of_first))[0]
            raise UserError(
                f"{p}: column {col!r} is in {has} but not in {lacks}",
                "give files with the same columns (add or drop the column and write them again) or one file",
            )
        for col, t in fields.items():
            seen = first.get(col)
            if seen is None or _arrow_kind(seen[1]) is None:
                first[col] = (name, t)
            elif _arrow_kind(t) is not None and _arrow_kind(t) != _arrow_kind(seen[1]):
                raise UserError(
                    f"{p}: column {col!r} is {seen[1]} in {seen[0]} but {t} in {name}", ONE_SCHEMA_FIX
                )


def _csv_files(p: pathlib.Path) -> list[pathlib.Path]:
    """The files Dask reads for a CSV source (``FOLDER/*.csv``, in order)."""
    return sorted(p.glob("*.csv")) if p.is_dir() else [p]


def _csv_header(f: pathlib.Path) -> list[str] | None:
    """The column names on a CSV file's first line (None for an empty file)."""
    import csv

    with open(f, "rb") as fh:
        line = fh.readline(1 << 20)
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")
    if not text.strip():
        return None
    return [c.strip() for c in next(csv.reader([text]))]


def _check_csv_headers(p: pathlib.Path) -> None:
    """Refuse a folder of CSV files whose headers differ from the first file's: Dask reads the
    first file's header and drops every other file's first line, so other columns would be read
    under the wrong names. Reads one line per file."""
    files = [f for f in _csv_files(p) if f.suffix.lower() == ".csv"]
    if len(files) < 2:
        return
    ref = ref_file = None
    for f in files:
        cols = _csv_header(f)
        if cols is None:
            continue
        if ref is None:
            ref, ref_file = cols, f
        elif cols != ref:

            def show(c):
                text = ",".join(c)
                return text if len(text) <= 200 else text[:200] + "..."

            raise UserError(
                f"{p}: {f.name} has the header '{show(cols)}' but {ref_file.name} has '{show(ref)}'",
                "give CSV files with the same header (the same columns in the same order) or one file",
            )


def _csv_dtype_mismatch(path, e: BaseException) -> UserError | None:
    """Dask's "Mismatched dtypes" (a CSV column that Dask typed from the first rows of the first
    file holds another type further on, in a later block or file) as one line naming the
    column(s) and both types; None for any other error."""
    import re

    text = str(e)
    if not text.startswith("Mismatched dtypes found"):
        return None
    matches = (re.match(r"^\|\s*(.+?)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|$", line) for line in text.splitlines())
    rows = [m.groups() for m in matches if m and m.groups() != ("Column", "Found", "Expected")]
    if not rows:
        return None

    def kind(t):
        return "text (str)" if t in ("str", "object", "string") else t

    cols = "; ".join(
        f"column {c!r} was read as {kind(want)} but holds {kind(found)} further on"
        for c, found, want in rows[:5]
    )
    more = f" (and {len(rows) - 5} more columns)" if len(rows) > 5 else ""
    return UserError(
        f"{path}: {cols}{more} (Dask types the columns from the first rows of the first file)",
        "give files in which each column holds one type throughout (clean or cast it and "
        "write them again), or write the data as Parquet with one schema",
    )


def _parquet_size(p: pathlib.Path) -> tuple[int | None, int | None]:
    """Rows and uncompressed bytes from the Parquet footers (no data read)."""
    try:
        import pyarrow.dataset as pads

        rows = nbytes = 0
        for frag in pads.dataset(str(p), format="parquet").get_fragments():
            md = frag.metadata
            rows += md.num_rows
            nbytes += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
        return rows, nbytes
    except Exception:  # noqa: BLE001 - sizes are a nicety for the record and the memory check
        return None, None


def read_rows(fmt: str, path: str, start: int, stop: int, module: str):
    """Rows ``start:stop`` of a ``.npy`` (memory-mapped) or Zarr array, as ``module``'s array
    type (runs on a worker: the block goes straight to the device on the GPU family)."""
    try:
        if fmt == "npy":
            block = np.array(np.load(path, mmap_mode="r")[start:stop])
        else:
            import zarr

            block = zarr.open_array(path, mode="r")[start:stop]
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged file or store is the user's to fix
        raise UserError(
            f"{path}: rows {start}:{stop} cannot be read ({type(e).__name__}: {e})",
            f"the {FORMAT_NAMES.get(fmt, fmt)} data is damaged there (a corrupt or truncated "
            "chunk / file): write it again",
        ) from None
    return convert.convert_array(block, module)


def open_source(src: Source, family, *, chunk_rows: int | None = None, partition_bytes: int | None = None):
    """A Dask collection of ``src`` with ``family``'s chunk type (lazy)."""
    import dask

    if src.format == "dask":
        return convert.to_backend(src.obj, family)
    p = pathlib.Path(src.path)
    if src.collection == "dataframe":
        with dask.config.set({"dataframe.backend": family.dataframe_backend}):
            try:
                return _frame_reader(p, src.format, partition_bytes if src.format == "csv" else None)
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001
                raise unreadable(p, src.format, e) from None
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    if src.format == "zarr":
        _import_zarr()
    m = src.shape[0]
    rows = max(1, min(chunk_rows or m, m))
    module = family.array_module
    stat = p.stat()
    name = f"read-{src.format}-{tokenize(str(p), stat.st_mtime_ns, stat.st_size, rows, module)}"
    row_chunks = tuple(min(rows, m - i) for i in range(0, m, rows)) or (0,)
    rest = tuple((d,) for d in src.shape[1:])
    tail = (0,) * len(rest)
    dsk = {
        (name, i, *tail): (read_rows, src.format, str(p), start, start + n, module)
        for i, (start, n) in enumerate(zip(np.cumsum((0,) + row_chunks[:-1]).tolist(), row_chunks))
    }
    return da.Array(
        HighLevelGraph.from_collections(name, dsk, dependencies=()),
        name,
        (row_chunks, *rest),
        dtype=src.dtype,
        meta=convert.empty_array(family, len(src.shape), src.dtype),
    )


def check_finite(x, where: str) -> None:
    """Count the NaN / inf values of a (persisted) Dask array on the workers, one pass over its
    blocks; raise a UserError with the count and the first position when there are any."""
    import dask
    import dask.array as da

    if np.dtype(x.dtype).kind not in "fc":
        return
    bad = ~da.isfinite(x)
    count, first_row = dask.compute(
        bad.sum(),
        da.argmax(bad.any(axis=tuple(range(1, x.ndim))), axis=0) if x.ndim > 1 else da.argmax(bad, axis=0),
    )
    count, first_row = int(count), int(first_row)
    if not count:
        return
    where_col = ""
    if x.ndim > 1:
        row = np.asarray(convert.to_host(x[first_row].compute()))
        col = int(np.argmax(~np.isfinite(row.ravel())))
        where_col = f", column {col}"
    raise UserError(
        f"{where} holds {count} NaN / inf value(s), the first at row {first_row}{where_col}",
        "clean the data first (drop those rows, or numpy.nan_to_num) and save it again",
    )


AGG_EXAMPLE = "--agg 'price:mean,max;qty:sum'"
ESCAPE = "\\"
"""In ``--agg`` and ``--by`` a backslash makes the next character part of the column name: ``\\;``
a ``;`` (``--agg``'s separator of columns), ``\\,`` a ``,`` (``--by``'s), ``\\\\`` a backslash. A
``:`` needs none: the last one in an item is the separator."""


def split_escaped(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` not escaped (:data:`ESCAPE`); escapes kept (:func:`unescape`)."""
    parts = [""]
    for ch in _escaped_chars(str(text)):
        if ch == sep:
            parts.append("")
        else:
            parts[-1] += ch
    return parts


def unescape(text: str) -> str:
    """``text`` with each escaped character (:data:`ESCAPE`) as itself."""
    return "".join(p[1:] if p.startswith(ESCAPE) else p for p in _escaped_chars(text))


def _escaped_chars(text: str) -> list[str]:
    out, chars = [], iter(text)
    for ch in chars:
        out.append(ch + next(chars, "") if ch == ESCAPE else ch)
    return out


def parse_agg(text: str) -> dict[str, list[str]]:
    """``'price:mean,max;qty:sum'`` -> ``{'price': ['mean', 'max'], 'qty': ['sum']}``; a ``;`` in
    a column name is written ``\\;`` (:data:`ESCAPE`)."""
    spec: dict[str, list[str]] = {}
    items = [i.strip() for i in split_escaped(text, ";")]
    if not any(items):
        raise ValueError(
            f"empty aggregation spec; write COLUMN:AGG[,AGG][;COLUMN:AGG...], e.g. {AGG_EXAMPLE}"
        )
    for item in items:
        if not item:
            continue
        col, sep, aggs = item.rpartition(":")
        col = unescape(col.strip())
        if not sep or not col:
            raise ValueError(
                f"'{item}' is not COLUMN:AGG[,AGG]; e.g. {AGG_EXAMPLE} (a ';' in a column name: \\;)"
            )
        names = [a.strip() for a in aggs.split(",")]
        if not all(names):
            raise ValueError(f"'{item}' has an empty aggregation; e.g. {AGG_EXAMPLE}")
        bad = [a for a in names if a not in AGGREGATIONS]
        if bad:
            raise ValueError(f"unknown aggregation(s) {bad} in '{item}'; use: {', '.join(AGGREGATIONS)}")
        if col in spec:
            raise ValueError(
                f"column '{col}' appears twice; list all its aggregations once, "
                f"e.g. {col}:{','.join(spec[col] + names)}"
            )
        spec[col] = names
    return spec


def parse_by(text: str) -> list[str]:
    """``'a,b'`` -> ``['a', 'b']``; a ``,`` in a column name is written ``\\,`` (:data:`ESCAPE`)."""
    cols = [unescape(c.strip()) for c in split_escaped(text, ",")]
    if not all(cols):
        raise ValueError(
            "empty column name; write --by COLUMN or --by COL1,COL2 (a ',' in a column name: \\,)"
        )
    if len(set(cols)) != len(cols):
        raise ValueError("a column appears twice")
    return cols


@dataclasses.dataclass
class RunInputs:
    """What a run on the user's data takes, checked: the source (None: generated data), the
    validation level, the ``--output`` path and whether it may be replaced."""

    source: Source | None
    validate: str | None
    output: pathlib.Path | None
    overwrite: bool


def host_fits(nbytes: int, what: str) -> None:
    """``--validate full`` needs ``nbytes`` on the client: refuse it when that will not fit."""
    import psutil

    avail = int(psutil.virtual_memory().available)
    if nbytes > FULL_FIT_FRACTION * avail:
        from dask.utils import format_bytes

        raise UserError(
            f"--validate full needs about {format_bytes(nbytes)} of host memory for {what}, "
            f"more than {int(FULL_FIT_FRACTION * 100)}% of the {format_bytes(avail)} available",
            "use --validate fast (identities and a sample, computed on the cluster)",
        )


def check_params(cls, params: dict[str, Any], data) -> None:
    """Before parsing: parameters that only describe generated data are refused on the user's
    (so ``--rows`` with ``--input`` names the real problem, not a clash with ``--cols``)."""
    if data is not None:
        _refuse_generation(cls, [k.replace("-", "_") for k, v in params.items() if v is not None])


def _refuse_generation(cls, given) -> None:
    """Parameters of ``given`` that only describe generated data, refused on an input."""
    generation = [f for f in getattr(cls, "generation_params", ()) if f in given]
    if generation:
        raise _describes(
            generation,
            "generated data, but an input was given",
            "leave {flags} out: the input's own shape and chunks are used",
        )


def _describes(names: list[str], what: str, fix: str) -> UserError:
    """``--a, --b describe WHAT``, with ``fix`` (``{flags}`` names them)."""
    flags = ", ".join("--" + f.replace("_", "-") for f in names)
    verb = "describes" if len(names) == 1 else "describe"
    return UserError(f"{flags} {verb} {what}", fix.format(flags=flags))


def check_run(
    cls, p, *, data=None, validate: str | None = None, output=None, overwrite: bool = False
) -> RunInputs:
    """Check a run of workload ``cls`` with parameters ``p`` on ``data`` (a path, a Dask
    collection, or None for generated data), the validation level and ``output``. ``cls``
    must read data (``input_formats``) when ``data`` is given (the caller, which knows the
    workloads, says which do)."""
    name = cls.name
    if validate is not None and validate not in VALIDATE_LEVELS:
        raise UserError(
            f"--validate must be one of {', '.join(VALIDATE_LEVELS)}, got {validate!r}",
            "e.g. --validate fast",
        )
    if validate in ("fast", "full") and not getattr(cls, "validation_levels", False):
        raise UserError(
            f"workload '{name}' has one validation; --validate {validate} does not apply",
            "leave --validate out, or use --validate off to skip it",
        )
    user_only = [f for f in getattr(cls, "input_params", ()) if getattr(p, f, None) is not None]
    source = None
    if data is None:
        if user_only:
            raise _describes(
                user_only,
                "your own data, but no input was given",
                "add --input PATH (or data=...), or leave {flags} out for generated data",
            )
        if validate == "full" and hasattr(cls, "host_bytes"):
            host_fits(cls().host_bytes(p), "a host copy of the generated data")
    else:
        formats = tuple(cls.input_formats)
        _refuse_generation(cls, p.model_fields_set)
        source = inspect(data, formats)
        if source.collection != cls.collection:
            want = (
                "an array (.npy, Zarr, a Dask array)"
                if cls.collection == "array"
                else "a DataFrame (Parquet, CSV, a Dask DataFrame)"
            )
            raise UserError(f"{name} works on {want}, got a {source.collection}", f"give {name} {want}")
        cls().check_input(p, source)
        if validate == "full" and source.nbytes:
            host_fits(3 * source.nbytes, source.label)
    out = (
        None if output is None else outputs.check(output, overwrite, getattr(cls, "output_formats", ()), name)
    )
    if out is not None and source is not None and source.path and out == pathlib.Path(source.path):
        raise UserError(f"--output {output} is the input file", "write the result to another path")
    return RunInputs(source, validate, out, overwrite)
