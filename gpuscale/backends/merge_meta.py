"""The metadata of a Dask merge, computed once per pair of input schemas while a session is open.

Dask works out the columns and dtypes a merge returns by merging two small non-empty frames of
the chunk library (``Merge._meta``), and computes it again for every new expression its
optimizer makes of the merge. A :class:`MetaCache` answers a merge whose inputs have the schemas
and arguments of one already computed with that answer (rule ``merge-meta.cached`` in
docs/decisions.md); anything it cannot key (a key given as a Series, an unhashable dtype) is
left to Dask. Installed by the session through :func:`gpuscale._dask_compat.merge_meta_through`.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

LIMIT = 4096
"""Schemas kept before the cache starts again (a session's queries use a few dozen)."""


class MetaCache:
    """``cache(left_meta, right_meta, kwargs, compute)``: Dask's merge metadata for those inputs,
    computed by ``compute()`` the first time a key is seen; every answer is a shallow copy."""

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._kept: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, left, right, kwargs: dict[str, Any], compute: Callable[[], Any]):
        key = merge_key(left, right, kwargs)
        if key is None:
            return compute()
        with self._lock:
            kept = self._kept.get(key)
        if kept is None:
            kept = compute()
            with self._lock:
                if len(self._kept) >= self.limit:
                    self._kept.clear()
                self._kept[key] = kept
        return kept.copy(deep=False)


def merge_key(left, right, kwargs: dict[str, Any]) -> tuple | None:
    """What a merge's metadata depends on: both inputs' schemas (frame type, column names and
    dtypes, index type, names, dtypes and frequency) and the merge's arguments; None where one
    of them cannot be a key."""
    try:
        key = (schema(left), schema(right), tuple(sorted((k, _frozen(v)) for k, v in kwargs.items())))
        hash(key)
    except (TypeError, AttributeError):
        return None
    return key


def schema(meta) -> tuple:
    """A frame's schema as a hashable tuple (raises TypeError / AttributeError for anything else)."""
    index, columns = meta.index, meta.columns
    levels = tuple(index.dtypes) if getattr(index, "nlevels", 1) > 1 else (index.dtype,)
    return (
        type(meta),
        type(columns),
        columns.name,
        tuple(columns),
        _dtypes(meta, columns),
        type(index),
        tuple(index.names),
        levels,
        str(getattr(index, "freq", None)),
    )


def _dtypes(meta, columns) -> tuple:
    """The columns' dtypes in order: from the (name, dtype) pairs of cuDF's ``_dtypes`` where a
    frame has them in its columns' order (cuDF's ``dtypes`` builds a pandas Series each time;
    rule ``merge-meta.cached``), else from ``dtypes``."""
    pairs = getattr(meta, "_dtypes", None)
    if pairs is not None:
        pairs = tuple(pairs.items() if hasattr(pairs, "items") else pairs)
        if tuple(name for name, _ in pairs) == tuple(columns):
            return tuple(dtype for _, dtype in pairs)
    return tuple(meta.dtypes)


def _frozen(v):
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    raise TypeError(f"not a key: {type(v).__name__}")
