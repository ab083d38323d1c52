"""``map_overlap`` with a route: an array of one chunk is padded with the same boundary rule,
filtered and trimmed on its worker in one ``map_blocks`` task, without Dask's overlap graph
(docs/decisions.md, rule ``routes.graph-by-hand``); arrays of several chunks keep Dask's own.
"""

from __future__ import annotations

import math
from typing import Callable

from . import Routed, routed

PAD_MODES = {"reflect": "symmetric", "periodic": "wrap", "nearest": "edge"}
"""Dask's boundary names -> ``numpy.pad`` modes (Dask's "reflect" repeats the edge pixel:
NumPy's "symmetric")."""


def _pad_apply_trim(block, func, depth: tuple[int, ...], mode: str | None, value, kwargs: dict):
    import importlib

    xp = importlib.import_module(type(block).__module__.partition(".")[0])
    if not hasattr(xp, "pad"):
        import numpy as xp
    width = [(d, d) for d in depth]
    padded = (
        xp.pad(block, width, mode="constant", constant_values=value)
        if mode is None
        else xp.pad(block, width, mode=mode)
    )
    out = func(padded, **kwargs)
    return out[tuple(slice(d, out.shape[i] - d) for i, d in enumerate(depth))]


def map_overlap(x, func: Callable, depth: int, boundary, dtype=None, **kwargs) -> Routed:
    """``x.map_overlap(func, depth=depth, boundary=boundary, dtype=dtype, **kwargs)``, lazy:
    one padded task when ``x`` is one chunk and the boundary is Dask's "reflect", "periodic",
    "nearest" or a number, else Dask's own."""
    one_chunk = math.prod(len(c) for c in x.chunks) == 1
    mode = PAD_MODES.get(boundary) if isinstance(boundary, str) else None
    known = mode is not None or isinstance(boundary, (int, float)) and not isinstance(boundary, bool)
    if one_chunk and known and depth > 0 and all(depth <= s for s in x.shape):
        y = x.map_blocks(
            _pad_apply_trim,
            func,
            (depth,) * x.ndim,
            mode,
            None if mode else boundary,
            kwargs,
            dtype=dtype or x.dtype,
            meta=x._meta,
        )
        return routed(
            y, "one chunk", f"one chunk: padded on its worker ({boundary}) and filtered in one task"
        )
    y = x.map_overlap(func, depth=depth, boundary=boundary, dtype=dtype or x.dtype, **kwargs)
    return routed(
        y,
        "dask",
        f"Dask's map_overlap ({'several chunks' if not one_chunk else 'boundary ' + repr(boundary)})",
    )
