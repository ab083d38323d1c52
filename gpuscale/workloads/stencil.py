"""``stencil``: the 3x3 mean smoothing of a 2-D image with a hand-written kernel, applied
across chunks with one-pixel halos (``dask.array.map_overlap``, mirrored at the image's
edges). NumPy chunks run a ``numba.njit`` kernel, CuPy chunks a ``numba.cuda.jit`` kernel
(grid-stride, one thread per pixel); see :mod:`gpuscale.kernels.stencil`. The kernel is picked
by the chunk type and recorded as the choice ``kernel``.

Data: ``n`` x ``n`` uniform [0, 1) pixels in square chunks.

Validation: as ``map_overlap`` (a float64 mean filter on the host that sums shifted windows:
every pixel at small sizes, tiles across chunk boundaries and at the corners at large ones),
tolerance by dtype, ``TOL``. A halo narrower than the window (``HALO = 0``) or a kernel that
reads the wrong neighbour fails it.
"""

from __future__ import annotations

from pydantic import Field, PositiveInt

from ..kernels import stencil as kernels
from . import Context, Output, Validation, Workload, register
from ._arrays import SquareParams, UniformMatrix, array_module
from .map_overlap import OVERLAP_RULE, check_halo, smooth, validate_smoothing

TOL = {"float64": 1e-12, "float32": 1e-5}
SIZE = 3


class StencilParams(SquareParams):
    n: PositiveInt = Field(8_000, description="rows = columns of the image")


@register
class Stencil(UniformMatrix, Workload):
    name = "stencil"
    description = "3x3 mean smoothing with a Numba kernel (njit on CPU, cuda.jit on GPU) across chunk halos"
    collection = "array"
    Params = StencilParams
    HALO = SIZE // 2
    """Halo width passed to map_overlap; the 3x3 window needs 1."""

    def check(self, p) -> None:
        check_halo(self.name, self.HALO, p.chunk, p.n)

    def plan(self, p, ctx: Context) -> None:
        super().plan(p, ctx, minimum=max(1, self.HALO))
        ctx.choose("halo", self.HALO, "rule", "3x3 window: one pixel each side")
        ctx.choose(
            "kernel",
            kernels.kernel_for(array_module(ctx).ndarray),
            "rule",
            "by chunk type: numba.njit for NumPy, numba.cuda.jit for CuPy",
        )
        ctx.choose("overlap", "auto", "rule", OVERLAP_RULE)

    def compute(self, x, p, ctx: Context) -> Output:
        return smooth(x, kernels.smooth_block, self.HALO, ctx)

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        return validate_smoothing(out.collections["result"], x, SIZE, TOL[p.dtype], p.seed)
