"""3x3 mean smoothing of a 2-D block: ``numba.njit`` on the CPU, ``numba.cuda.jit`` on a GPU.

Both kernels return a block of the input's shape and dtype: every pixel with all eight
neighbours in the block becomes the mean of its 3x3 window (summed in the block's dtype, times
1/9); pixels on the block's edge are copied unchanged (under ``map_overlap(depth=1)`` they are
the halo, trimmed away). The CUDA kernel is grid-stride, one thread per pixel, compiled once per
dtype per process; it runs on CuPy arrays (on CuPy's current stream) and, under
``NUMBA_ENABLE_CUDASIM=1``, on NumPy arrays in Numba's CUDA simulator.

:func:`smooth3x3` picks the kernel by the block's type; ``smooth3x3.dispatch(type).kernel``
names it without running it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dask.utils import Dispatch

THREADS = (32, 8)  # (x: columns, y: rows) per block
MAX_BLOCKS = (65535, 65535)


cuda = None  # numba.cuda, bound on first use (a module global, so the simulator can swap it)


def _mean3x3_cpu(a, out, ninth):
    h, w = a.shape
    for i in range(h):
        for j in range(w):
            if i == 0 or j == 0 or i == h - 1 or j == w - 1:
                out[i, j] = a[i, j]
            else:
                s = (
                    a[i - 1, j - 1]
                    + a[i - 1, j]
                    + a[i - 1, j + 1]
                    + a[i, j - 1]
                    + a[i, j]
                    + a[i, j + 1]
                    + a[i + 1, j - 1]
                    + a[i + 1, j]
                    + a[i + 1, j + 1]
                )
                out[i, j] = s * ninth


def _mean3x3_gpu(a, out, ninth):
    j0, i0 = cuda.grid(2)
    sj, si = cuda.gridsize(2)
    h, w = a.shape
    for i in range(i0, h, si):
        for j in range(j0, w, sj):
            if i == 0 or j == 0 or i == h - 1 or j == w - 1:
                out[i, j] = a[i, j]
            else:
                s = (
                    a[i - 1, j - 1]
                    + a[i - 1, j]
                    + a[i - 1, j + 1]
                    + a[i, j - 1]
                    + a[i, j]
                    + a[i, j + 1]
                    + a[i + 1, j - 1]
                    + a[i + 1, j]
                    + a[i + 1, j + 1]
                )
                out[i, j] = s * ninth


@functools.lru_cache(maxsize=None)
def _cpu_kernel():
    import numba

    return numba.njit(nogil=True)(_mean3x3_cpu)


def mean3x3_numba(a: np.ndarray) -> np.ndarray:
    """3x3 mean of a NumPy block with ``numba.njit`` (compiled once per dtype)."""
    out = np.empty_like(a)
    _cpu_kernel()(a, out, a.dtype.type(1.0 / 9.0))
    return out


mean3x3_numba.kernel = "numba.njit"


@functools.lru_cache(maxsize=None)
def _cuda_kernel():
    global cuda
    from numba import cuda

    return cuda.jit(_mean3x3_gpu)  # compiles on first launch, once per dtype and layout


def launch_config(shape, threads=THREADS, max_blocks=MAX_BLOCKS):
    """One thread per pixel, up to the grid limits (grid-stride covers the rest)."""
    h, w = shape
    blocks = (
        max(1, min(math.ceil(w / threads[0]), max_blocks[0])),
        max(1, min(math.ceil(h / threads[1]), max_blocks[1])),
    )
    return blocks, threads


def mean3x3_cuda(a, stream=0, threads=THREADS, max_blocks=MAX_BLOCKS):
    """3x3 mean of a device block with ``numba.cuda.jit`` (a NumPy block in the simulator).

    ``threads`` / ``max_blocks`` shape the launch; a small ``max_blocks`` makes every thread
    stride over several pixels."""
    a = a if a.flags.c_contiguous else a.copy()  # (a method: NumPy or CuPy) rows that coalesce
    out = np.empty_like(a)  # NEP 18: a CuPy array for a CuPy block
    blocks, threads = launch_config(a.shape, threads, max_blocks)
    _cuda_kernel()[blocks, threads, stream](a, out, a.dtype.type(1.0 / 9.0))
    return out


mean3x3_cuda.kernel = "numba.cuda.jit"


smooth3x3 = Dispatch("smooth3x3")
smooth3x3.register(np.ndarray)(mean3x3_numba)


@smooth3x3.register_lazy("cupy")
def _register_cupy():
    import cupy

    def mean3x3_cupy_stream(a):
        from numba import cuda

        stream = cuda.external_stream(cupy.cuda.get_current_stream().ptr)
        return mean3x3_cuda(a, stream=stream)

    mean3x3_cupy_stream.kernel = mean3x3_cuda.kernel
    smooth3x3.register(cupy.ndarray)(mean3x3_cupy_stream)


def smooth_block(block):
    """What ``map_overlap`` calls on each padded block (a module function: pickles by name)."""
    return smooth3x3(block)


def kernel_for(array_type) -> str:
    """The name of the kernel that runs on chunks of ``array_type``."""
    return smooth3x3.dispatch(array_type).kernel
