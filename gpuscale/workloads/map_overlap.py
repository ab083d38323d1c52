"""``map_overlap``: mean smoothing of a 2-D random image with a ``size`` x ``size`` window,
applied chunk by chunk with halos of ``size // 2`` pixels (``dask.array.map_overlap``,
mirrored at the image's edges). Each chunk runs ``uniform_filter`` from ``scipy.ndimage``
(NumPy chunks) or ``cupyx.scipy.ndimage`` (CuPy chunks).

Data: ``n`` x ``n`` uniform [0, 1) pixels in square chunks.

Validation against a float64 mean filter on the host that sums shifted windows (not ndimage);
tolerance by dtype on max |error|, ``TOL`` (pixels are in [0, 1)):

* small (n^2 <= ``FULL_CHECK_ELEMENTS``): every pixel;
* large: tiles that straddle chunk boundaries (where a halo bug shows) and the two corners
  (where the mirroring shows), each recomputed from its pixels plus the halo.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, PositiveInt, field_validator

from ..errors import UserError
from ..kernels.filters import uniform_filter
from ..routes import overlap
from . import Context, Output, Params, Validation, Workload, _arrays, register
from ._arrays import UniformMatrix, boundary_tiles, close, host, mean_filter_reference, shape_check
from .base import Dtype, block_field, dtype_field, seed_field

TOL = {"float64": 1e-10, "float32": 1e-5}
TILE = 64
BOUNDARY = "reflect"  # dask's "reflect" repeats the edge pixel (NumPy's "symmetric")
OVERLAP_RULE = (
    "one padded task when the array is one chunk, else Dask's map_overlap (gpuscale.routes.overlap)"
)


class MapOverlapParams(Params):
    n: PositiveInt = Field(8_000, description="rows = columns of the image")
    size: PositiveInt = Field(5, description="odd window width; the halo is size // 2 pixels")
    chunk: PositiveInt | None = block_field("chunk side, at least the halo")
    dtype: Dtype = dtype_field()
    seed: int = seed_field()

    @field_validator("size")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError(
                f"the window width must be odd (a centre pixel plus a halo each side), e.g. {v + 1}"
            )
        return v


def check_halo(workload: str, halo: int, chunk: int | None, n: int) -> None:
    if halo > n:
        raise UserError(
            f"{workload}: the halo ({halo} pixels) is wider than the image ({n})",
            "use a smaller --size or a larger --n",
        )
    if chunk is not None and halo > chunk:
        raise UserError(
            f"{workload}: the halo ({halo} pixels) is wider than a chunk (--chunk {chunk})",
            f"use --chunk >= {halo} or a smaller --size",
        )


@register
class MapOverlap(UniformMatrix, Workload):
    name = "map_overlap"
    description = "mean smoothing of an image across chunks with halos (ndimage.uniform_filter)"
    collection = "array"
    Params = MapOverlapParams

    def check(self, p) -> None:
        check_halo(self.name, p.size // 2, p.chunk, p.n)

    def plan(self, p, ctx: Context) -> None:
        halo = p.size // 2
        super().plan(p, ctx, minimum=halo)
        ctx.choose("halo", halo, "rule", f"--size {p.size} // 2")
        ctx.choose("overlap", "auto", "rule", OVERLAP_RULE)

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """The image; the padded blocks Dask's map_overlap stores (none on the one-chunk route);
        the results, each a view that keeps its padded block whole."""
        pad = padded_bytes(p, ctx)
        return {
            "inputs": p.n * p.n * np.dtype(p.dtype).itemsize,
            "intermediates": 0 if _one_chunk(p, ctx) else pad,
            "results": pad,
        }

    def task_bytes(self, p, ctx: Context) -> int:
        """One filter task's peak beyond the stored blocks: its padded-size output, and on the
        one-chunk route its own padded copy."""
        c = ctx.value("chunk")
        if not isinstance(c, int):
            return 0
        halo = p.size // 2
        block = (min(c, p.n) + 2 * halo) ** 2 * np.dtype(p.dtype).itemsize
        return (2 if _one_chunk(p, ctx) else 1) * block

    def compute(self, x, p, ctx: Context) -> Output:
        return smooth(x, uniform_filter, p.size // 2, ctx, size=p.size)

    def validate(self, out: Output, x, p, ctx: Context) -> Validation:
        return validate_smoothing(out.collections["result"], x, p.size, TOL[p.dtype], p.seed)


def _one_chunk(p, ctx: Context) -> bool:
    """Whether :func:`gpuscale.routes.overlap.map_overlap` takes its one-chunk route."""
    c = ctx.value("chunk")
    return isinstance(c, int) and c >= p.n


def padded_bytes(p, ctx: Context) -> int:
    """Bytes of all the padded blocks: every chunk grows by the halo on each side."""
    c = ctx.value("chunk")
    halo = p.size // 2
    per_axis = p.n + 2 * halo * (math.ceil(p.n / c) if isinstance(c, int) else 1)
    return per_axis * per_axis * np.dtype(p.dtype).itemsize


def smooth(x, fn, halo: int, ctx: Context, **kwargs) -> Output:
    """``fn`` over the chunks of ``x`` with ``halo``-pixel halos mirrored at the image's edges
    (:func:`gpuscale.routes.overlap.map_overlap`; its plan is the decision ``overlap``)."""
    route = overlap.map_overlap(x, fn, halo, BOUNDARY, x.dtype, **kwargs)
    ctx.decide("overlap", route.decision)
    return Output({"result": route.result})


def validate_smoothing(y, x, size: int, tol: float, seed: int) -> Validation:
    """Smoothed ``y`` against the host mean filter of ``x``: whole at small sizes, else tiles."""
    checks = [shape_check(y, x.shape)]
    detail = "max |got - ref| (pixels in [0, 1))"
    if x.size <= _arrays.FULL_CHECK_ELEMENTS:
        ref = mean_filter_reference(host(x), size)
        checks.append(close("every pixel vs host mean filter", host(y), ref, tol, detail, scale=1.0))
        return Validation("full reference (host float64 mean filter, shifted-window sums)", checks)
    tiles = boundary_tiles(x.shape, x.chunks, TILE, np.random.default_rng(seed + 9))
    for (i0, i1), (j0, j1) in tiles:
        ref = mean_filter_reference(x, size, (i0, i1), (j0, j1))
        checks.append(
            close(f"tile [{i0}:{i1}, {j0}:{j1}]", host(y[i0:i1, j0:j1]), ref, tol, detail, scale=1.0)
        )
    return Validation("tiles across chunk boundaries and at the corners vs host float64 mean filter", checks)
