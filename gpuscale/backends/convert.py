"""Data between families: the one place that puts data on a family's chunk libraries.

* :func:`convert_array` / :func:`convert_frame`: one block (one partition) as a chunk
  library's type; they run on workers (readers of the user's files, :func:`from_memory`'s
  tasks). :func:`empty_array` is the empty block of a family: a Dask array's ``meta``.
* :func:`from_memory`: in-memory data on a family, as a Dask collection
  (``Session.to_backend(numpy_array)``).

  - A NumPy (or CuPy) array becomes a Dask array of the family's array type. Every task
    converts its own block (the block's data travels inside the task), so no task outputs a
    chunk of the other family: the backend audit (:mod:`gpuscale.audit`) sees only
    ``to_backend`` tasks of the right type. This is the fix for ``da.from_array(numpy_array)``
    under the GPU family, whose tasks hold NumPy chunks.
  - A pandas (or cuDF) frame or series becomes a Dask DataFrame / Series the same way (the
    fix for ``dd.from_pandas(df)``).

* :func:`to_backend`: a Dask collection that exists already, on a family (Dask's own
  ``to_backend``); the tasks that made it still produce what they produce.

Conversions go through the host (:func:`to_host`) and then the family's module
(``<array_module>.asarray``, ``<dataframe_module>.from_pandas``), so a family registered by a
plugin needs nothing more. Nothing here imports a GPU library at module level.
"""
from __future__ import annotations

import importlib
import itertools
import math
from typing import Any

import dask
from dask.base import tokenize
from dask.utils import Dispatch

from .family import Family

PREFIX = "to_backend"

to_host = Dispatch("to_host")
"""A host (NumPy / pandas) copy of a chunk, by its type: the families register their chunk
types (no backend names); anything else is returned as it is."""


@to_host.register(object)
def _to_host_identity(x):
    return x


def convert_array(block, module: str):
    """A block as ``module``'s array type (runs on workers): itself when it has it, else
    ``<module>.asarray`` of its host copy (a host block read from a file goes straight to the
    device on the GPU family)."""
    if type(block).__module__.partition(".")[0] == module:
        return block
    return importlib.import_module(module).asarray(to_host(block))


def convert_frame(part, module: str):
    """A partition as ``module``'s frame type (runs on workers)."""
    if type(part).__module__.partition(".")[0] == module:
        return part
    host = to_host(part)
    if type(host).__module__.partition(".")[0] == module:
        return host
    return importlib.import_module(module).from_pandas(host)


def empty_array(family: Family, ndim: int, dtype):
    """An empty ``ndim``-D block of ``dtype`` on ``family``'s array library: the ``meta`` of a
    Dask array whose chunks the family's tasks build."""
    import numpy as np
    return convert_array(np.empty((0,) * ndim, dtype=dtype), family.array_module)


def _convert_frame_args(args):
    part, module = args
    return convert_frame(part, module)


def _is_frame(obj) -> bool:
    return hasattr(obj, "columns") or hasattr(obj, "index") and hasattr(obj, "iloc")


def from_memory(obj: Any, family: Family, *, chunks=None, npartitions: int | None = None):
    """``obj`` (an in-memory array, frame or series) on ``family``'s libraries, as a Dask
    collection whose every task builds its block there (see the module docstring).

    ``chunks`` (arrays; default: row blocks of the family's ``chunk_bytes``) and
    ``npartitions`` (frames; default: from the family's ``partition_bytes``)."""
    if dask.is_dask_collection(obj):
        raise TypeError("from_memory takes in-memory data; convert Dask collections with "
                        "gpuscale.backends.convert.to_backend (Session.to_backend)")
    if _is_frame(obj):
        return _frame(obj, family, npartitions)
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return _array(obj, family, chunks)
    raise TypeError(f"from_memory converts arrays and frames, not {type(obj).__name__}")


def _array(a, family: Family, chunks):
    import dask.array as da
    from dask.array.core import normalize_chunks
    from dask.highlevelgraph import HighLevelGraph
    if chunks is None:
        chunks = ("auto",) + (-1,) * (a.ndim - 1) if a.ndim else ()
    chunks = normalize_chunks(chunks, a.shape, limit=family.knobs.chunk_bytes, dtype=a.dtype)
    module = family.array_module
    name = f"{PREFIX}-{tokenize(a, module, chunks)}"
    starts = [list(itertools.accumulate((0,) + c[:-1])) for c in chunks]
    dsk = {}
    for idx in itertools.product(*(range(len(c)) for c in chunks)):
        sl = tuple(slice(starts[d][i], starts[d][i] + chunks[d][i]) for d, i in enumerate(idx))
        dsk[(name, *idx)] = (convert_array, a[sl], module)
    meta = empty_array(family, a.ndim, a.dtype)
    return da.Array(HighLevelGraph.from_collections(name, dsk, dependencies=()), name, chunks,
                    dtype=a.dtype, meta=meta)


def _frame(df, family: Family, npartitions: int | None):
    import dask.dataframe as dd
    module = family.dataframe_module
    n = len(df)
    if npartitions is None:
        nbytes = int(df.memory_usage(deep=True).sum()) if hasattr(df, "memory_usage") else n * 8
        npartitions = max(1, math.ceil(nbytes / family.knobs.partition_bytes))
    npartitions = max(1, min(npartitions, n or 1))
    bounds = [round(i * n / npartitions) for i in range(npartitions + 1)]
    parts = [(df.iloc[bounds[i]:bounds[i + 1]], module) for i in range(npartitions)]
    meta = convert_frame(df.iloc[:0], module)
    return dd.from_map(_convert_frame_args, parts, meta=meta, label=PREFIX, enforce_metadata=False)


def collection_kind(obj) -> str | None:
    """"array" for a Dask array, "dataframe" for a Dask DataFrame or Series, else None."""
    import dask.array as da
    import dask.dataframe as dd
    if isinstance(obj, da.Array):
        return "array"
    if isinstance(obj, (dd.DataFrame, dd.Series)):
        return "dataframe"
    return None


def to_backend(obj, family: Family):
    """``obj`` (a Dask array, DataFrame or Series) with ``family``'s chunk type: itself when it
    has it already, else Dask's ``to_backend`` (``map_blocks`` / ``map_partitions`` of the chunk
    library's converter: CuPy / cuDF from NumPy / pandas and back)."""
    import dask.dataframe as dd
    collection = collection_kind(obj)
    if collection is None:
        raise TypeError(f"to_backend converts Dask arrays, DataFrames and Series, not {type(obj).__name__}")
    target, module = (family.array_backend, family.array_module) if collection == "array" else \
        (family.dataframe_backend, family.dataframe_module)
    if type(obj._meta).__module__.partition(".")[0] == module.partition(".")[0]:
        return obj  # on the family already
    family.check(family.names[0], collection)
    out = obj.to_backend(target)
    if collection == "dataframe" and family.dataframe_module == "pandas" and _default_str() is not None:
        strings = _na_strings(out._meta)
        if strings:  # cuDF -> pandas gives "string" (pd.NA) columns; pandas' own default is "str"
            out = out.astype(dict.fromkeys(strings, _default_str())) if isinstance(out, dd.DataFrame) \
                else out.astype(_default_str())
    return out


def _default_str():
    """pandas' default string dtype when it is the NaN-missing ``str`` (pandas >= 3), else None."""
    import pandas as pd
    dt = pd.Series(["a"]).dtype
    return dt if isinstance(dt, pd.StringDtype) and dt.na_value is not pd.NA else None


def _na_strings(meta) -> list:
    """The columns (or [the Series' name]) of ``meta`` with the pd.NA-missing ``string`` dtype."""
    import pandas as pd
    dtypes = meta.dtypes.items() if isinstance(meta, pd.DataFrame) else [(meta.name, meta.dtype)]
    return [c for c, dt in dtypes if isinstance(dt, pd.StringDtype) and dt.na_value is pd.NA]
