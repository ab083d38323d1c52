"""Tuned Dask array routes: ``svd(x)`` on any 2-D Dask array (NumPy or CuPy chunks) and the
Gram matrix it starts from."""

from __future__ import annotations

from .routes.linalg import ROUTES, SVDResult, condition_from_singular_values, gram, svd

__all__ = ["svd", "gram", "SVDResult", "ROUTES", "condition_from_singular_values"]
