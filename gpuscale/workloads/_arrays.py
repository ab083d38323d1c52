"""Shared pieces of the array workloads: chunk rules, generated data, host references, checks.

Validation never reuses the computation under test: references are NumPy on host copies
(small sizes) or identities evaluated by a different route (large sizes), in float64.
"""

from __future__ import annotations

import importlib
import math

import dask
import dask.array as da
import numpy as np
from pydantic import PositiveInt

from ..backends import to_host
from . import Check, Context, Params
from .base import Dtype, block_field, dtype_field, seed_field

MiB = 2**20
FULL_CHECK_ELEMENTS = 4_000_000
"""Arrays up to this many elements are checked whole against NumPy on the host."""
SAMPLES = 2_000
"""Elements / lanes / tiles sampled by the large-size checks."""


class SquareParams(Params):
    """``--n`` x ``--n`` uniform [0, 1) entries in square chunks; subclasses give ``n`` its
    default and description."""

    n: PositiveInt
    chunk: PositiveInt | None = block_field()
    dtype: Dtype = dtype_field()
    seed: int = seed_field()


def array_module(ctx: Context):
    """The family's array module (``numpy``, ``cupy``, ...), imported by name."""
    return importlib.import_module(ctx.family.array_module)


BLOCK_COPIES = 3
"""Blocks one running array task holds at its peak (two inputs and its output: ``x + x.T``, a
block product), for capping the chunk budget by worker memory (:meth:`Context.capped`; see
docs/decisions.md, rule ``memory.block-copies``)."""


def plan_square_chunk(
    ctx: Context,
    given: int | None,
    rows: int,
    cols: int,
    itemsize: int,
    minimum: int = 1,
) -> int:
    """Side of square chunks: the flag, else min(family chunk budget capped by worker memory,
    enough blocks for every thread), at least ``minimum``."""

    def rule(budget: int) -> tuple[int, str]:
        by_bytes = max(1, math.isqrt(budget // itemsize))
        per_side = max(1, math.ceil(math.sqrt(ctx.total_threads)))
        by_threads = max(1, math.ceil(max(rows, cols) / per_side))
        return max(min(by_bytes, by_threads), minimum), (
            f"min(sqrt({ctx.family.name} chunk budget {budget / MiB:.0f} MiB / "
            f"{itemsize} B) = {by_bytes}, {max(rows, cols)} / ceil(sqrt({ctx.total_threads} "
            f"threads)) = {by_threads})" + (f", at least {minimum}" if minimum > 1 else "")
        )

    return ctx.choose_size("chunk", given, ctx.knobs.chunk_bytes, BLOCK_COPIES, "chunk budget", rule)


def plan_lanes(ctx: Context, given: int | None, lanes: int, lane_bytes: int, name: str) -> int:
    """Lanes (rows of work) per chunk when each lane is one unsplittable unit."""

    def rule(budget: int) -> tuple[int, str]:
        by_bytes = max(1, budget // max(1, lane_bytes))
        by_threads = max(1, math.ceil(lanes / ctx.total_threads))
        return min(by_bytes, by_threads, lanes), (
            f"min({ctx.family.name} chunk budget {budget / MiB:.0f} MiB / "
            f"{lane_bytes} B per lane = {by_bytes}, {lanes} lanes / {ctx.total_threads} "
            f"threads = {by_threads})"
        )

    return ctx.choose_size(name, given, ctx.knobs.chunk_bytes, BLOCK_COPIES, "chunk budget", rule)


def uniform(seed: int, shape, chunks, dtype: str):
    """Uniform [0, 1) data on the active backend (``array.backend`` picks NumPy or CuPy)."""
    return da.random.default_rng(seed).random(shape, chunks=chunks, dtype=dtype)


def host(x) -> np.ndarray:
    """A NumPy copy of a Dask array (or a chunk / scalar) from any backend."""
    if dask.is_dask_collection(x):
        x = x.compute()
    return np.asarray(to_host(x))


def max_error(got, ref, scale: float | None = None) -> float:
    """max |got - ref| / scale (scale defaults to max |ref|; absolute when that is 0)."""
    got = np.asarray(got, dtype=np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(ref) else np.float64)
    ref = np.asarray(ref, dtype=got.dtype)
    if got.shape != ref.shape:
        return math.inf
    if got.size == 0:
        return 0.0
    if not np.isfinite(got).all():
        return math.inf
    s = float(np.abs(ref).max()) if scale is None else float(scale)
    err = float(np.abs(got - ref).max())
    return err / s if s > 0 else err


def close(
    name: str, got, ref, tol: float, detail: str = "max |got - ref| / max |ref|", scale: float | None = None
) -> Check:
    err = max_error(got, ref, scale)
    return Check(name, err <= tol, err, tol, detail)


def shape_check(x, shape) -> Check:
    return Check("shape", tuple(x.shape) == tuple(shape), str(tuple(x.shape)), str(tuple(shape)))


def mean_filter_reference(x: np.ndarray, size: int, rows=None, cols=None) -> np.ndarray:
    """The ``size`` x ``size`` mean of ``x`` (mirrored at the image's edges, the edge pixel
    repeated: NumPy's "symmetric", ndimage's "reflect"), in float64, on the host, by summing
    shifted windows.

    ``rows`` / ``cols`` (start, stop) restrict the output to a tile; ``x`` may then be a
    :class:`dask.array.Array` (only the tile plus its halo is fetched) or a NumPy array.
    """
    n, m = x.shape
    r = size // 2
    i0, i1 = rows or (0, n)
    j0, j1 = cols or (0, m)
    a0, a1, b0, b1 = max(0, i0 - r), min(n, i1 + r), max(0, j0 - r), min(m, j1 + r)
    window = np.asarray(host(x[a0:a1, b0:b1]), dtype=np.float64)
    pad = ((r - (i0 - a0), r - (a1 - i1)), (r - (j0 - b0), r - (b1 - j1)))
    padded = _symmetric_pad(window, pad)
    out = np.zeros((i1 - i0, j1 - j0))
    for di in range(size):
        for dj in range(size):
            out += padded[di : di + out.shape[0], dj : dj + out.shape[1]]
    return out / (size * size)


def _symmetric_pad(a: np.ndarray, pad) -> np.ndarray:
    """``np.pad(mode="symmetric")`` that also works when a pad is wider than the array."""
    for axis, (before, after) in enumerate(pad):
        while before > 0 or after > 0:
            n = a.shape[axis]
            b, c = min(before, n), min(after, n)
            a = np.pad(a, [(b, c) if k == axis else (0, 0) for k in range(a.ndim)], mode="symmetric")
            before, after = before - b, after - c
    return a


def boundary_tiles(shape, chunks, size: int, rng: np.random.Generator, count: int = 4):
    """Tiles (row range, col range) of about ``size`` pixels a side that straddle chunk
    boundaries, plus the image's first and last corner: where halo bugs show."""
    n, m = shape
    tiles = [((0, min(n, size)), (0, min(m, size))), ((max(0, n - size), n), (max(0, m - size), m))]
    row_edges = np.cumsum(chunks[0])[:-1]
    col_edges = np.cumsum(chunks[1])[:-1]
    for _ in range(count):
        ci = int(rng.choice(row_edges)) if len(row_edges) else int(rng.integers(0, n))
        cj = int(rng.choice(col_edges)) if len(col_edges) else int(rng.integers(0, m))
        i0, j0 = max(0, ci - size // 2), max(0, cj - size // 2)
        tiles.append(((i0, min(n, i0 + size)), (j0, min(m, j0 + size))))
    return tiles


class UniformMatrix:
    """Mixin for workloads on one generated uniform [0, 1) matrix in square chunks (the
    "chunk" choice, :func:`plan_square_chunk`): its shape (``--n`` x ``--n``, or ``--rows`` x
    ``--cols``), the memory estimate (``COPIES`` copies of the input at peak), the data
    description and generation."""

    COPIES = 3

    @staticmethod
    def shape(p) -> tuple[int, int]:
        return (p.n, p.n) if "n" in type(p).model_fields else (p.rows, p.cols)

    def plan(self, p, ctx: Context, minimum: int = 1) -> None:
        plan_square_chunk(ctx, p.chunk, *self.shape(p), np.dtype(p.dtype).itemsize, minimum=minimum)

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """The input (one copy), then ``COPIES - 1`` copies' worth of intermediates and results."""
        rows, cols = self.shape(p)
        one = rows * cols * np.dtype(p.dtype).itemsize
        return {"inputs": one, "intermediates + results": (self.COPIES - 1) * one}

    def describe_data(self, p) -> dict:
        return {"shape": list(self.shape(p)), "dtype": p.dtype, "source": "generated, uniform [0, 1)"}

    def generate(self, p, ctx: Context):
        c = ctx.value("chunk")
        return uniform(p.seed, self.shape(p), (c, c), p.dtype)
