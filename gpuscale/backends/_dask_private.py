"""The one place the host fallback (:mod:`.fallback`) touches Dask internals.

Checked against dask 2026.8.0 (``DASK_CHECKED``): the dask-expr collection classes whose
methods the fallback wraps (``dask.dataframe.DataFrame`` / ``Series`` / ``Index`` are public;
the groupby and ``.loc`` classes live in private modules), and how a ``.loc`` indexer names
the collection it indexes. A Dask that moves them breaks here, and only here: :func:`classes`
then leaves the private ones out (their calls are not caught; the public ones still are).
"""

from __future__ import annotations

import contextlib

DASK_CHECKED = "2026.8.0"

OPERATORS = (
    "__getitem__",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pow__",
    "__rpow__",
    "__and__",
    "__rand__",
    "__or__",
    "__ror__",
    "__xor__",
    "__rxor__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__eq__",
    "__ne__",
    "__invert__",
    "__neg__",
    "__abs__",
)
"""The dunder methods of a collection that build a new one (``df[mask]``, ``a > b``)."""


def classes() -> list[tuple[type, tuple[str, ...]]]:
    """(class, dunder methods to wrap besides its public ones) of every collection-like class
    whose methods the fallback wraps: the frames, then the groupby objects and ``.loc``."""
    import dask.dataframe as dd

    out: list[tuple[type, tuple[str, ...]]] = [
        (dd.DataFrame, OPERATORS),
        (dd.Series, OPERATORS),
        (dd.Index, OPERATORS),
    ]
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._collection import FrameBase

        out.insert(0, (FrameBase, OPERATORS))
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._groupby import GroupBy, SeriesGroupBy

        out += [(GroupBy, ("__getitem__", "__getattr__")), (SeriesGroupBy, ())]
    with contextlib.suppress(ImportError, AttributeError):
        from dask.dataframe.dask_expr._indexing import LocIndexer

        out.append((LocIndexer, ("__getitem__",)))
    return out


def indexer_origin(obj) -> tuple[object, str] | None:
    """(the collection, "loc") for a ``df.loc`` indexer, else None."""
    try:
        from dask.dataframe.dask_expr._indexing import LocIndexer
    except ImportError:
        return None
    return (obj.obj, "loc") if isinstance(obj, LocIndexer) else None
