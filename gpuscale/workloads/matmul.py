"""``matmul``: ``x @ y`` of two square random matrices (block GEMMs plus a sum over the inner
blocks).

Data: two ``n`` x ``n`` uniform [0, 1) matrices in square chunks (different seeds).

Validation (float64 reference; tolerance by dtype on max |error| / max |C|, ``TOL``):

* small (n^2 <= ``FULL_CHECK_ELEMENTS``): every entry against NumPy's ``x @ y`` of host copies;
* always: Freivalds' check, C z = x (y z) for a random Gaussian vector z, where y z and
  x (y z) are matrix-vector products that never form C (errors relative to max |x| (|y| |z|),
  the size of the summed terms); and ``SAMPLE_ROWS`` random rows of C against x[rows] @ y
  (each a vector-matrix product).
"""

from __future__ import annotations

import dask
import numpy as np
from pydantic import Field, PositiveInt

from ..backends.convert import from_memory
from . import Context, Output, Validation, Workload, _arrays, register
from ._arrays import SquareParams, close, host, plan_square_chunk, shape_check, uniform

TOL = {"float64": 1e-10, "float32": 1e-4}
SAMPLE_ROWS = 8


class MatmulParams(SquareParams):
    n: PositiveInt = Field(3_000, description="rows = columns of both matrices")


@register
class Matmul(Workload):
    name = "matmul"
    description = "x @ y of two square matrices (blocked GEMM)"
    collection = "array"
    Params = MatmulParams

    def plan(self, p, ctx: Context) -> None:
        plan_square_chunk(ctx, p.chunk, p.n, p.n, np.dtype(p.dtype).itemsize)

    def estimate_bytes(self, p, ctx: Context) -> int:
        return 4 * p.n * p.n * np.dtype(p.dtype).itemsize

    def describe_data(self, p) -> dict:
        return {"shape": [[p.n, p.n], [p.n, p.n]], "dtype": p.dtype, "source": "generated, uniform [0, 1)"}

    def generate(self, p, ctx: Context):
        c = ctx.value("chunk")
        return {
            "x": uniform(p.seed, (p.n, p.n), (c, c), p.dtype),
            "y": uniform(p.seed + 1, (p.n, p.n), (c, c), p.dtype),
        }

    def compute(self, data, p, ctx: Context) -> Output:
        return Output({"result": data["x"] @ data["y"]})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        x, y, c = data["x"], data["y"], out.collections["result"]
        tol = TOL[p.dtype]
        checks = [shape_check(c, (p.n, p.n))]
        rng = np.random.default_rng(p.seed + 7)
        z = rng.standard_normal(p.n)
        zb = from_memory(z, ctx.family, chunks=(x.chunks[1],))
        azb = from_memory(np.abs(z), ctx.family, chunks=(x.chunks[1],))
        rows = np.sort(rng.choice(p.n, size=min(p.n, SAMPLE_ROWS), replace=False))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        cz, xyz, bound, c_rows, ref_rows = dask.compute(
            c.astype(np.float64) @ zb, x64 @ (y64 @ zb), abs(x64) @ (abs(y64) @ azb), c[rows], x64[rows] @ y64
        )
        # scale: |x| (|y| |z|), the size of the terms summed (rounding errors scale with it)
        checks.append(
            close(
                "Freivalds: C z = x (y z)",
                host(cz),
                host(xyz),
                tol,
                "max |Cz - x(yz)| / max |x| (|y| |z|)",
                float(host(bound).max()),
            )
        )
        checks.append(close(f"{len(rows)} sampled rows vs x[rows] @ y", host(c_rows), host(ref_rows), tol))
        method = "Freivalds' check (C z = x (y z), random z) + sampled rows"
        if p.n * p.n <= _arrays.FULL_CHECK_ELEMENTS:
            ref = host(x).astype(np.float64) @ host(y).astype(np.float64)
            checks.append(close("every entry vs numpy x @ y", host(c), ref, tol))
            method = "full reference (NumPy on host copies) + " + method
        return Validation(method, checks)
