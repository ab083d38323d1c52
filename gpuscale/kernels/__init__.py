"""Compute kernels that the seed workloads run on each chunk.

Each kernel module holds plain-Python kernel bodies and the factories that compile them:
``numba.njit`` for NumPy chunks, ``numba.cuda.jit`` and CuPy ``RawKernel`` for CuPy chunks.
Nothing here imports Numba or CuPy at module level; a factory imports them the first time it
is called in a process (on a worker, when the first task runs) and caches what it compiled,
once per dtype.

Which kernel runs on a chunk is chosen by the chunk's type (``dask.utils.Dispatch``, the
same mechanism as :func:`gpuscale.backends.to_host`), never by a backend name.

* :mod:`.stencil`: the 3x3 mean smoothing of a 2-D image (one thread per pixel on a GPU);
* :mod:`.lombscargle`: the Lomb-Scargle periodogram (one thread per frequency on a GPU);
* :mod:`.filters`: ``uniform_filter`` from ``scipy.ndimage`` / ``cupyx.scipy.ndimage``.
"""
