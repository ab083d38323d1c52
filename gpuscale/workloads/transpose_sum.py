"""``transpose_sum``: ``(x + x.T).sum()`` of a square random matrix (a transpose that moves
every block across the cluster, then a tree reduction).

Data: ``n`` x ``n`` uniform [0, 1) entries in square chunks.

Validation (float64 reference; relative tolerance by dtype, ``TOL``):

* small (n^2 <= ``FULL_CHECK_ELEMENTS``): against NumPy's ``(x + x.T).sum()`` of a host copy;
* large: against the identity sum(x + x^T) = 2 sum(x), with sum(x) added up on the host from
  per-block float64 partial sums (no transpose, no Dask reduction tree).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, PositiveInt

from . import Context, Output, Validation, Workload, _arrays, register
from ._arrays import SquareParams, UniformMatrix, close, host

TOL = {"float64": 1e-10, "float32": 1e-4}


class TransposeSumParams(SquareParams):
    n: PositiveInt = Field(5_000, description="rows = columns of the matrix")


def block_sums(x):
    """float64 sum of every block, as a small host array (the independent route)."""
    return host(x.map_blocks(_block_sum, chunks=(1,) * x.ndim, dtype=np.float64))


def _block_sum(b):
    return b.sum(dtype=np.float64).reshape((1,) * b.ndim)


@register
class TransposeSum(UniformMatrix, Workload):
    name = "transpose_sum"
    description = "(x + x.T).sum() of a square matrix: an all-to-all transpose plus a reduction"
    collection = "array"
    Params = TransposeSumParams

    def compute(self, x, p, ctx: Context) -> Output:
        return Output({"result": (x + x.T).sum()})

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        got = float(host(out.collections["result"]))
        tol = TOL[p.dtype]
        if p.n * p.n <= _arrays.FULL_CHECK_ELEMENTS:
            a = host(x).astype(np.float64)
            return Validation(
                "full reference (NumPy on a host copy)",
                [close("sum vs numpy (x + x.T).sum()", got, (a + a.T).sum(), tol)],
            )
        ref = 2.0 * float(block_sums(x).sum())
        return Validation(
            "identity sum(x + x^T) = 2 sum(x), from per-block float64 sums",
            [close("sum vs 2 * sum(x)", got, ref, tol)],
        )
