"""``uniform_filter`` on a chunk: ``scipy.ndimage`` for NumPy, ``cupyx.scipy.ndimage`` for CuPy,
chosen by the chunk's type.
"""

from __future__ import annotations

import numpy as np
from dask.utils import Dispatch

ndimage_for = Dispatch("ndimage_for")


@ndimage_for.register(np.ndarray)
def _scipy_ndimage(block):
    import scipy.ndimage

    return scipy.ndimage


@ndimage_for.register_lazy("cupy")
def _register_cupy():
    import cupy

    @ndimage_for.register(cupy.ndarray)
    def _cupyx_ndimage(block):
        import cupyx.scipy.ndimage

        return cupyx.scipy.ndimage


def uniform_filter(block, size: int):
    """Mean over a ``size`` x ``size`` window; mirror ("reflect" in ndimage) at the block's
    edges, which ``map_overlap`` trims away."""
    return ndimage_for(block).uniform_filter(block, size=size, mode="reflect")
