"""The GPU kernels on a CPU: Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) runs the very
``numba.cuda.jit`` kernels that run on a GPU, so a GPU-only bug (indexing, the grid-stride
loop, the halo) shows in CI.

The simulator must be switched on before Numba is imported, so the kernels run in a
subprocess. There the stencil kernel smooths a small image chunk by chunk with
``map_overlap`` (launches of 4 x 4 threads in at most 2 x 2 blocks, so every thread strides
over several pixels), validated exactly as the ``stencil`` workload validates; with no halo
(an off-by-one halo) the same validation must fail. The Lomb-Scargle ``numba.cuda.jit``
kernel runs on a few frequencies against ``scipy.signal.lombscargle``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import functools, json
import numpy as np, dask, dask.array as da
from numba import cuda
from scipy.signal import lombscargle
from gpuscale.kernels import stencil, lombscargle as ls
from gpuscale.workloads import stencil as stencil_workload
from gpuscale.workloads.map_overlap import validate_smoothing

out = {"available": bool(cuda.is_available()),
       "kernel_type": f"{type(stencil._cuda_kernel()).__module__}.{type(stencil._cuda_kernel()).__name__}"}
rng = np.random.default_rng(0)
kernel = functools.partial(stencil.mean3x3_cuda, threads=(4, 4), max_blocks=(2, 2))
with dask.config.set(scheduler="sync"):
    for dtype in ("float64", "float32"):
        img = rng.random((23, 17)).astype(dtype)
        x = da.from_array(img, chunks=(8, 6))
        tol = stencil_workload.TOL[dtype]
        for halo in (1, 0):
            y = x.map_overlap(kernel, depth=halo, boundary="reflect", dtype=img.dtype)
            v = validate_smoothing(y, x, 3, tol, seed=0)
            out[f"stencil {dtype} halo {halo}"] = {"valid": v.valid, "checks": v.to_dict()["checks"],
                                                   "dtype": str(y.compute().dtype)}
    for dtype in ("float64", "float32"):
        t = rng.uniform(0, 100, 40).astype(dtype)
        yv = (np.sin(3.3 * t) + 0.5 * rng.standard_normal(40)).astype(dtype)
        f = np.linspace(0.1, 10, 21).astype(dtype)
        p = ls.pgram_numba_cuda(t, yv, f, threads=4, max_blocks=2)
        ref = lombscargle(t.astype(float), yv.astype(float), f.astype(float))
        out[f"lombscargle {dtype}"] = {"err": float(np.abs(p - ref).max() / ref.max()), "dtype": str(p.dtype)}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def simulated():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_GPUSCALE__")}
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def test_runs_in_the_cuda_simulator(simulated):
    assert simulated["available"] is True  # only the simulator says so on a machine with no GPU
    assert "simulator" in simulated["kernel_type"], simulated["kernel_type"]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cuda_stencil_kernel_validates_across_chunks(simulated, dtype):
    r = simulated[f"stencil {dtype} halo 1"]
    assert r["valid"], r["checks"]
    assert r["dtype"] == dtype


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cuda_stencil_with_an_off_by_one_halo_fails_validation(simulated, dtype):
    r = simulated[f"stencil {dtype} halo 0"]
    assert r["valid"] is False
    assert [c["name"] for c in r["checks"] if not c["ok"]] == ["every pixel vs host mean filter"]


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-4)])
def test_cuda_lombscargle_kernel_matches_scipy(simulated, dtype, tol):
    r = simulated[f"lombscargle {dtype}"]
    assert r["err"] <= tol and r["dtype"] == dtype
