"""Tuned Dask array routes, importable as ``gpuscale.linalg``: ``svd(x)`` on any 2-D Dask array
(NumPy or CuPy chunks) and the Gram matrix it starts from (``gpuscale/routes/linalg.py``
holds them and explains the routes)."""

from __future__ import annotations

from .routes.linalg import ROUTES, Route, SVDResult, condition_from_singular_values, gram, svd

__all__ = ["svd", "gram", "SVDResult", "Route", "ROUTES", "condition_from_singular_values"]
