"""In-memory data onto a family's chunk libraries, as a Dask collection
(``Session.to_backend(numpy_array)`` / :func:`from_memory`).

* A NumPy (or CuPy) array becomes a Dask array of the family's array type. Every task
  converts its own block (the block's data travels inside the task), so no task outputs a
  chunk of the other family: the backend audit (:mod:`gpuscale.audit`) sees only
  ``to_backend`` tasks of the right type. This is the fix for ``da.from_array(numpy_array)``
  under the GPU family, whose tasks hold NumPy chunks.
* A pandas (or cuDF) frame or series becomes a Dask DataFrame / Series the same way (the fix
  for ``dd.from_pandas(df)``).

Dask collections that exist already are converted by :func:`gpuscale.inputs.to_backend`
(Dask's own ``to_backend``); the tasks that made them still produce what they produce.

Conversions go through the host (:func:`gpuscale.backends.to_host`) and then the family's
module (``<array_module>.asarray``, ``<dataframe_module>.from_pandas``), so a family
registered by a plugin needs nothing more. Nothing here imports a GPU library at module level.
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
    """A block as ``module``'s array type (runs on workers)."""
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
                        "gpuscale.inputs.to_backend (Session.to_backend)")
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
    meta = convert_array(a[tuple(slice(0, 0) for _ in range(a.ndim))], module)
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
