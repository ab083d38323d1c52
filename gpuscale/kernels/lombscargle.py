"""Lomb-Scargle periodogram of one block of frequencies: four implementations.

For sample times ``t``, values ``y`` and angular frequencies ``f`` (all one dtype), the power
at ``w = f[k]`` is the classic (Lomb 1976, Scargle 1982) one-pass form, as in
``scipy.signal.lombscargle(t, y, f)`` (default ``normalize=False``, no weights, no floating
mean)::

    xc = sum y cos(wt), xs = sum y sin(wt), cc = sum cos^2, ss = sum sin^2, cs = sum cos sin
    tau = atan2(2 cs, cc - ss) / (2 w)
    P = 1/2 [ (c xc + s xs)^2 / (c^2 cc + 2cs cs + s^2 ss)
            + (c xs - s xc)^2 / (c^2 ss - 2cs cs + s^2 cc) ]      with c, s = cos(w tau), sin(w tau)

Sums are accumulated in the data's dtype.

========== ============================================== ==================================
``impl``    what runs                                      chunks
========== ============================================== ==================================
vectorized the formula above in NumPy-API calls (NEP 18)    any (NumPy or CuPy; n x block temps)
numba      ``numba.njit`` loops                             NumPy
numba-cuda ``numba.cuda.jit``, one thread per frequency    CuPy (NumPy in the CUDA simulator)
cupy       CuPy ``RawKernel`` (CUDA C), one thread per f.  CuPy
========== ============================================== ==================================

Compiled kernels are built once per dtype per process and cached (``functools.lru_cache``);
float32 kernels are compiled with fast math (``fastmath=True`` / ``--use_fast_math``),
float64 ones without. ``auto`` takes the first of :data:`AUTO_ORDER` that the chunk type
supports (:func:`impls_for`, a dispatch on the chunk type).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dask.utils import Dispatch

AUTO_ORDER = ("cupy", "numba", "vectorized")
THREADS = 256

cuda = None  # numba.cuda, bound on first use (a module global, so the simulator can swap it)


def _power_one(w, t, y, two, half):
    """The periodogram at one angular frequency (compiled for CPU and as a device function)."""
    xc = xs = cc = ss = cs = half - half
    for j in range(t.shape[0]):
        wt = w * t[j]
        c = math.cos(wt)
        s = math.sin(wt)
        xc += y[j] * c
        xs += y[j] * s
        cc += c * c
        ss += s * s
        cs += c * s
    tau = math.atan2(two * cs, cc - ss) / (two * w)
    ct = math.cos(w * tau)
    st = math.sin(w * tau)
    ct2 = ct * ct
    st2 = st * st
    cst = two * ct * st
    a = ct * xc + st * xs
    b = ct * xs - st * xc
    return half * (a * a / (ct2 * cc + cst * cs + st2 * ss) + b * b / (ct2 * ss - cst * cs + st2 * cc))


def _constants(dtype):
    t = np.dtype(dtype).type
    return t(2.0), t(0.5)


def pgram_vectorized(t, y, f):
    """The formula with array calls; on CuPy blocks NumPy's functions dispatch to CuPy."""
    two, half = _constants(f.dtype)
    wt = f[:, None] * t[None, :]
    c = np.cos(wt)
    s = np.sin(wt)
    xc = c @ y
    xs = s @ y
    cc = (c * c).sum(axis=1)
    ss = (s * s).sum(axis=1)
    cs = (c * s).sum(axis=1)
    del wt, c, s
    tau = np.arctan2(two * cs, cc - ss) / (two * f)
    ct = np.cos(f * tau)
    st = np.sin(f * tau)
    ct2, st2, cst = ct * ct, st * st, two * ct * st
    a = ct * xc + st * xs
    b = ct * xs - st * xc
    return half * (a * a / (ct2 * cc + cst * cs + st2 * ss) + b * b / (ct2 * ss - cst * cs + st2 * cc))


pgram_vectorized.kernel = "NumPy-API array calls"


@functools.lru_cache(maxsize=None)
def _cpu_kernel(dtype: str):
    import numba

    fast = dtype == "float32"
    one = numba.njit(fastmath=fast, nogil=True)(_power_one)

    @numba.njit(fastmath=fast, nogil=True)
    def kernel(t, y, f, out, two, half):
        for k in range(f.shape[0]):
            out[k] = one(f[k], t, y, two, half)

    return kernel


def pgram_numba(t, y, f):
    out = np.empty_like(f)
    _cpu_kernel(f.dtype.name)(t, y, f, out, *_constants(f.dtype))
    return out


pgram_numba.kernel = "numba.njit"


@functools.lru_cache(maxsize=None)
def _cuda_kernel(dtype: str):
    global cuda
    from numba import cuda

    fast = dtype == "float32"
    one = cuda.jit(device=True, fastmath=fast)(_power_one)

    @cuda.jit(fastmath=fast)
    def kernel(t, y, f, out, two, half):
        k0 = cuda.grid(1)
        for k in range(k0, f.shape[0], cuda.gridsize(1)):
            out[k] = one(f[k], t, y, two, half)

    return kernel


def pgram_numba_cuda(t, y, f, stream=0, threads=THREADS, max_blocks=None):
    """Grid-stride, one thread per frequency; ``max_blocks`` caps the grid (default: enough
    blocks for one thread per frequency)."""
    t, y, f = (a if a.flags.c_contiguous else a.copy() for a in (t, y, f))
    out = np.empty_like(f)  # NEP 18: CuPy for CuPy blocks
    blocks = max(1, math.ceil(f.shape[0] / threads))
    if max_blocks:
        blocks = min(blocks, max_blocks)
    _cuda_kernel(f.dtype.name)[blocks, threads, stream](t, y, f, out, *_constants(f.dtype))
    return out


def _pgram_numba_cuda_on_cupy(t, y, f):
    import cupy
    from numba import cuda as numba_cuda

    stream = numba_cuda.external_stream(cupy.cuda.get_current_stream().ptr)
    return pgram_numba_cuda(t, y, f, stream=stream)


pgram_numba_cuda.kernel = _pgram_numba_cuda_on_cupy.kernel = "numba.cuda.jit"

_CUDA_SOURCE = r"""
extern "C" __global__ void lombscargle(const int n, const int nf, const T* __restrict__ t,
                                       const T* __restrict__ y, const T* __restrict__ f,
                                       T* __restrict__ out) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < nf; k += blockDim.x * gridDim.x) {
        const T w = f[k];
        T xc = 0, xs = 0, cc = 0, ss = 0, cs = 0;
        for (int j = 0; j < n; ++j) {
            T s, c;
            SINCOS(w * t[j], &s, &c);
            xc += y[j] * c;
            xs += y[j] * s;
            cc += c * c;
            ss += s * s;
            cs += c * s;
        }
        const T tau = ATAN2((T)2 * cs, cc - ss) / ((T)2 * w);
        T st, ct;
        SINCOS(w * tau, &st, &ct);
        const T ct2 = ct * ct, st2 = st * st, cst = (T)2 * ct * st;
        const T a = ct * xc + st * xs, b = ct * xs - st * xc;
        out[k] = (T)0.5 * (a * a / (ct2 * cc + cst * cs + st2 * ss)
                           + b * b / (ct2 * ss - cst * cs + st2 * cc));
    }
}
"""
_C_TYPES = {"float32": ("float", "sincosf", "atan2f"), "float64": ("double", "sincos", "atan2")}


def cuda_source(dtype: str) -> str:
    ctype, sincos, atan2 = _C_TYPES[dtype]
    return f"#define T {ctype}\n#define SINCOS {sincos}\n#define ATAN2 {atan2}\n" + _CUDA_SOURCE


@functools.lru_cache(maxsize=None)
def _raw_kernel(dtype: str):
    import cupy

    options = ("--use_fast_math",) if dtype == "float32" else ()
    return cupy.RawKernel(cuda_source(dtype), "lombscargle", options=options)


def pgram_cupy(t, y, f):
    import cupy

    t, y, f = (cupy.ascontiguousarray(a) for a in (t, y, f))
    out = cupy.empty_like(f)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks = max(1, min(math.ceil(f.shape[0] / THREADS), 32 * sms))
    _raw_kernel(f.dtype.name)(
        (blocks,), (THREADS,), (np.int32(t.shape[0]), np.int32(f.shape[0]), t, y, f, out)
    )
    return out


pgram_cupy.kernel = "cupy.RawKernel"

impls_for = Dispatch("lombscargle_impls")


@impls_for.register(object)
def _any(array_type=None):
    return {"vectorized": pgram_vectorized}


@impls_for.register(np.ndarray)
def _numpy(array_type=None):
    return {"numba": pgram_numba, "vectorized": pgram_vectorized}


@impls_for.register_lazy("cupy")
def _register_cupy():
    import cupy

    @impls_for.register(cupy.ndarray)
    def _cupy(array_type=None):
        return {"cupy": pgram_cupy, "numba-cuda": _pgram_numba_cuda_on_cupy, "vectorized": pgram_vectorized}


def supported(array_type) -> dict:
    """``{impl name: function}`` for chunks of ``array_type``."""
    return impls_for.dispatch(array_type)()


def resolve(impl: str, array_type) -> str:
    """The implementation ``impl`` names (``auto``: the best the chunk type supports)."""
    have = supported(array_type)
    if impl == "auto":
        return next(name for name in AUTO_ORDER if name in have)
    return impl


def periodogram_block(t, y, f, impl: str):
    """What each task runs: the periodogram of one block of frequencies."""
    return supported(type(f))[impl](t, y, f)
