"""Tuned Dask array routes: ``svd(x)`` on any 2-D Dask array (NumPy or CuPy chunks) and the
Gram matrix it starts from."""

from __future__ import annotations

from .routes.linalg import ROUTES, Route, SVDResult, condition_from_singular_values, gram, svd

__all__ = ["svd", "gram", "SVDResult", "Route", "ROUTES", "condition_from_singular_values"]
