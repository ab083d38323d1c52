"""Compute kernels the built-in workloads run on each chunk.

Each module holds plain-Python kernel bodies and the factories that compile them (``numba.njit``
for NumPy chunks, ``numba.cuda.jit`` and CuPy ``RawKernel`` for CuPy chunks), chosen by the
chunk's type (``dask.utils.Dispatch``). Numba and CuPy are imported on a factory's first call in
a process, and each compiled kernel is cached per dtype.

* :mod:`.stencil`: the 3x3 mean smoothing of a 2-D image;
* :mod:`.lombscargle`: the Lomb-Scargle periodogram;
* :mod:`.filters`: ``uniform_filter`` from ``scipy.ndimage`` / ``cupyx.scipy.ndimage``.
"""
