"""Data between families: the one place that puts data on a family's chunk libraries.

* :func:`convert_array` / :func:`convert_frame`: one block as a chunk library's type;
* :func:`from_memory`: in-memory data as a Dask collection whose every task builds its block
  on the family, so no task outputs a chunk of another family;
* :func:`to_backend`: an existing Dask collection on a family (Dask's own ``to_backend``);
* :func:`on_workers`: a collection built from host objects, converted inside the tasks that
  make its blocks, each block counted for the backend audit.

Conversions go through the host (:func:`to_host`) and then ``<array_module>.asarray`` /
``<dataframe_module>.from_pandas``, so a plugin family needs nothing more. Nothing here imports
a GPU library at module level.
"""

from __future__ import annotations

import importlib
import itertools
import math
from typing import Any, Protocol, runtime_checkable

import dask
from dask.base import tokenize
from dask.utils import Dispatch

from .. import _dask_compat
from .family import Family

PREFIX = "to_backend"

to_host = Dispatch("to_host")
"""A host (NumPy / pandas) copy of a chunk, by its type: the families register their chunk
types (no backend names); anything else is returned as it is."""


@to_host.register(object)
def _to_host_identity(x):
    return x


finished_by_type = Dispatch("finished")
""":func:`gpuscale.backends.finished` by the chunk's type; anything else is returned as it is."""


@finished_by_type.register(object)
def _finished_identity(x):
    return x


def convert_array(block, module: str):
    """A block as ``module``'s array type (runs on workers): itself when it has it, else
    ``<module>.asarray`` of its host copy."""
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
    """An empty ``ndim``-D block of ``dtype`` on ``family``'s array library (a ``meta``)."""
    import numpy as np

    return convert_array(np.empty((0,) * ndim, dtype=dtype), family.array_module)


def _convert_frame_args(args):
    return convert_frame(*args)


def from_memory(obj: Any, family: Family, *, chunks=None, npartitions: int | None = None):
    """``obj`` (an in-memory array, frame or series) as a Dask collection whose every task
    builds its block on ``family``'s libraries. ``chunks`` (arrays; default: row blocks of the
    family's ``chunk_bytes``), ``npartitions`` (frames; default: from ``partition_bytes``).
    Raises TypeError for a Dask collection or anything not an array or frame."""
    if dask.is_dask_collection(obj):
        raise TypeError(
            "from_memory takes in-memory data; convert Dask collections with "
            "gpuscale.backends.convert.to_backend (Session.to_backend)"
        )
    if hasattr(obj, "columns") or hasattr(obj, "index") and hasattr(obj, "iloc"):
        return _frame(obj, family, npartitions)
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return _array(obj, family, chunks)
    raise TypeError(f"from_memory converts arrays and frames, not {type(obj).__name__}")


def _array(a, family: Family, chunks):
    from dask.array.core import normalize_chunks

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
    return _array_of(name, dsk, chunks, a.dtype, family)


def _array_of(name: str, dsk: dict, chunks: tuple, dtype, family: Family):
    """The Dask array of the graph ``dsk`` with ``family``'s array library as its meta."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    meta = empty_array(family, len(chunks), dtype)
    return da.Array(
        HighLevelGraph.from_collections(name, dsk, dependencies=()), name, chunks, dtype=dtype, meta=meta
    )


def _frame(df, family: Family, npartitions: int | None):
    import dask.dataframe as dd

    module = family.dataframe_module
    n = len(df)
    if npartitions is None:
        nbytes = int(df.memory_usage(deep=True).sum()) if hasattr(df, "memory_usage") else n * 8
        npartitions = max(1, math.ceil(nbytes / family.knobs.partition_bytes))
    npartitions = max(1, min(npartitions, n or 1))
    bounds = [round(i * n / npartitions) for i in range(npartitions + 1)]
    parts = [(df.iloc[bounds[i] : bounds[i + 1]], module) for i in range(npartitions)]
    meta = convert_frame(df.iloc[:0], module)
    return dd.from_map(_convert_frame_args, parts, meta=meta, label=PREFIX, enforce_metadata=False)


def collection_kind(obj) -> str | None:
    """ "array" for a Dask array, "dataframe" for a Dask DataFrame or Series, else None."""
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(obj, da.Array):
        return "array"
    if isinstance(obj, (dd.DataFrame, dd.Series)):
        return "dataframe"
    return None


def to_backend(obj, family: Family):
    """``obj`` (a Dask array, DataFrame or Series) with ``family``'s chunk type: itself when it
    has it already, else Dask's ``to_backend``."""
    import dask.dataframe as dd

    collection = collection_kind(obj)
    if collection is None:
        raise TypeError(f"to_backend converts Dask arrays, DataFrames and Series, not {type(obj).__name__}")
    target = getattr(family, f"{collection}_backend")
    module = getattr(family, f"{collection}_module")
    if type(obj._meta).__module__.partition(".")[0] == module.partition(".")[0]:
        return obj
    family.check(family.names[0], collection)
    out = obj.to_backend(target)
    if collection == "dataframe" and family.dataframe_module == "pandas" and _default_str() is not None:
        strings = _na_strings(out._meta)
        if strings:  # cuDF -> pandas gives "string" (pd.NA) columns; pandas' own default is "str"
            out = (
                out.astype(dict.fromkeys(strings, _default_str()))
                if isinstance(out, dd.DataFrame)
                else out.astype(_default_str())
            )
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


# -- A session's conversion of collections built from host objects (host_collections) ------
def on_workers(obj, family: Family, conversion: str):
    """``obj`` (a Dask collection with NumPy / pandas chunks, as a creation function returned
    it) with ``family``'s chunk type, converted inside the tasks that make its blocks: no task
    outputs the host chunk. Each output task is fused with the tasks only it depends on
    (``Task.fuse``; a blockwise step after them would not be fused under ``distributed``), and
    each converted block is counted under ``conversion`` (an id) for the backend audit. Tasks
    several blocks share stay; divisions, chunks and dtypes stay; the keys are new. Lazy."""
    from dask.core import flatten
    from dask.task_spec import Task

    kind = collection_kind(obj)
    module = family.array_module if kind == "array" else family.dataframe_module
    graph = _dask_compat.graph_nodes(obj.__dask_graph__())
    keys = list(flatten(obj.__dask_keys__()))
    token = tokenize(obj, module, conversion)
    name = f"{PREFIX}-{token}"
    func = _convert_block_noted if kind == "array" else _convert_part_noted
    owned = _owned(graph, keys)
    fused = {n for group in owned.values() for n in group}
    dsk = {k: v for k, v in graph.items() if k not in fused}
    new_keys = []
    for k in keys:
        group = [graph[n] for n in owned[k]]
        inner = group[0] if len(group) == 1 else Task.fuse(*group, key=k)
        key = (name, *k[1:])
        dsk[key] = _dask_compat.task_like(key, func, inner, module, conversion)
        new_keys.append(key)
    if kind == "array":
        return _array_of(name, dsk, obj.chunks, obj.dtype, family)
    import dask.dataframe as dd

    return dd.from_graph(
        _Graph(dsk, token), convert_frame(obj._meta, module), obj.divisions, new_keys, PREFIX
    )


class _Graph(dict):
    """A graph whose Dask token is given, so naming it does not hash the data embedded in it."""

    def __init__(self, dsk, token: str):
        super().__init__(dsk)
        self.token = token

    def __dask_tokenize__(self):
        return ("gpuscale-on-workers", self.token)


def _owned(graph: dict, keys: list) -> dict:
    """Output key -> the keys of ``graph`` that only it depends on, itself first (never another
    output key): what is fused into its task."""
    from dask.core import reverse_dict

    deps = {k: set(v.dependencies) & graph.keys() for k, v in graph.items()}
    dependents = reverse_dict(deps)
    outputs = set(keys)
    taken: set = set()
    groups: dict = {}
    for k in keys:
        group, order = {k}, [k]
        stack, pending = list(deps[k]), set()
        while stack:
            d = stack.pop()
            if d in group or d in outputs or d in taken:
                continue
            if dependents[d] <= group:
                group.add(d)
                order.append(d)
                stack.extend(deps[d])
                stack.extend(pending)
                pending.clear()
            else:
                pending.add(d)
        taken |= group
        groups[k] = order
    return groups


def host_copy(frame, family: Family, conversion: str):
    """``frame`` (a Dask DataFrame or Series of ``family``'s chunk library) with host chunks,
    copied on the workers partition by partition, each counted under ``conversion`` with its
    task's key (the backend audit allows these host outputs). The family travels with each
    task: unpickling it registers its chunk types with :func:`to_host`."""
    return frame.map_partitions(
        _host_part_noted, family, conversion, meta=to_host(frame._meta), token="to_host"
    )


def _host_part_noted(part, family: Family, conversion: str):
    return _noted(to_host(part), part, conversion, host_copy=True)


def _convert_block_noted(block, module: str, conversion: str):
    return _noted(convert_array(block, module), block, conversion)


def _convert_part_noted(part, module: str, conversion: str):
    return _noted(convert_frame(part, module), part, conversion)


@runtime_checkable
class ConversionCounter(Protocol):
    """A worker plugin that counts the blocks converted on its worker: ``conversion`` names
    the conversion, ``nbytes`` the block's size, ``key`` the task that outputs a host copy
    (None: the block stays inside its task)."""

    def note_conversion(self, conversion: str, nbytes: int, key=None) -> None: ...


def _noted(out, block, conversion: str, host_copy: bool = False):
    """``out``, ``block`` converted: where it is another object, ``block`` is counted under
    ``conversion`` in this worker's :class:`ConversionCounter` plugins (``host_copy``: with the
    running task's key). Nothing is counted outside a ``distributed`` worker."""
    if out is block:
        return out
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return out
    plugins = [p for p in list(worker.plugins.values()) if isinstance(p, ConversionCounter)]
    if plugins:
        from dask.sizeof import sizeof

        nbytes = int(sizeof(block))
        key = worker.get_current_task() if host_copy else None
        for p in plugins:
            p.note_conversion(conversion, nbytes, key=key)
    return out
