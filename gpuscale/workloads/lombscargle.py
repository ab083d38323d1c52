"""``lombscargle``: the Lomb-Scargle periodogram of an unevenly sampled signal, distributed
over chunks of frequencies (every task gets all samples and one block of frequencies).

Data: ``samples`` times uniform in [0, ``SPAN``) seconds, values y = sin(w0 t) + 0.5 noise with
w0 = fmin + 0.37 (fmax - fmin); ``freqs`` angular frequencies (rad/s, as
``scipy.signal.lombscargle`` takes them) evenly spaced over [fmin, fmax]; all in ``--dtype``.

``--impl`` picks the kernel (:mod:`gpuscale.kernels.lombscargle`): ``vectorized`` (NumPy-API
calls, any chunks), ``numba`` (``numba.njit``, NumPy chunks), ``numba-cuda``
(``numba.cuda.jit``, CuPy chunks), ``cupy`` (CuPy ``RawKernel``, CuPy chunks); ``auto`` takes
``cupy`` on CuPy chunks, ``numba`` on NumPy chunks. GPU kernels are compiled once per dtype
per worker and cached; float32 kernels use fast math.

Validation against ``scipy.signal.lombscargle`` (defaults: power, no floating mean) run in
float64 on host copies of the same inputs; every frequency when samples x freqs <=
``FULL_CHECK_WORK``, else ``FULL_CHECK_WORK / samples`` random frequencies plus the peak:

* max |P - P_scipy| / max P_scipy <= ``TOL[dtype]``: 1e-9 for float64; for float32
  max(1e-3, 1e-6 x fmax x SPAN) (:func:`tolerance`; see docs/decisions.md, rule
  ``lombscargle.float32-tolerance``);
* the peak is at the injected frequency w0, within the resolution max(2 pi / SPAN, 2 grid steps);
* 0 <= P <= sum y^2 (Cauchy-Schwarz bounds each of the two terms by sum y^2 / 2).
"""

from __future__ import annotations

import math
from typing import Literal

import dask
import dask.array as da
import numpy as np
from pydantic import Field, PositiveInt, field_validator

from ..errors import UserError
from ..kernels import lombscargle as kernels
from . import Check, Context, Output, Params, Validation, Workload, register
from ._arrays import array_module, host, max_error
from .base import Dtype, block_field, dtype_field, seed_field

SPAN = 100.0
NOISE = 0.5
FULL_CHECK_WORK = 10_000_000
REFERENCE_BATCH = 1_000_000  # samples x freqs per SciPy call (SciPy builds dense n x f arrays)
TOL = {"float64": 1e-9, "float32": 1e-3}
FLOAT32_PER_RADIAN = 1e-6


class LombScargleParams(Params):
    samples: int = Field(5_000, ge=2, description="number of (unevenly spaced) samples")
    freqs: PositiveInt = Field(50_000, description="number of angular frequencies")
    fmin: float = Field(0.01, description="lowest angular frequency, rad/s (> 0)")
    fmax: float = Field(10.0, description="highest angular frequency, rad/s")
    impl: Literal["auto", "vectorized", "numba", "numba-cuda", "cupy"] = Field(
        "auto", description="kernel: auto, vectorized (NumPy API), numba (CPU), numba-cuda or cupy (GPU)"
    )
    chunk: PositiveInt | None = block_field(
        "frequencies per chunk", "one block per thread; vectorized: also within the backend's chunk size"
    )
    dtype: Dtype = dtype_field()
    seed: int = seed_field()

    @field_validator("fmin", "fmax")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0 or not math.isfinite(v):
            raise ValueError(
                "angular frequencies must be positive and finite (P(-w) = P(w), and w = 0 has no phase)"
            )
        return v


def tolerance(p) -> float:
    """``TOL[dtype]``; for float32 at least ``FLOAT32_PER_RADIAN`` x fmax x SPAN, since the
    rounding of every phase w t grows with w t."""
    if p.dtype == "float32":
        return max(TOL["float32"], FLOAT32_PER_RADIAN * p.fmax * SPAN)
    return TOL[p.dtype]


def signal_frequency(p) -> float:
    return p.fmin + 0.37 * (p.fmax - p.fmin)


@register
class LombScargle(Workload):
    name = "lombscargle"
    description = "Lomb-Scargle periodogram over chunks of frequencies (--impl picks the kernel)"
    collection = "array"
    Params = LombScargleParams

    def check(self, p) -> None:
        if p.fmax <= p.fmin:
            raise UserError(
                f"lombscargle --fmax {p.fmax:g} must be above --fmin {p.fmin:g}",
                "give a band with --fmin < --fmax (angular frequencies, rad/s)",
            )
        if p.chunk is not None and p.chunk > p.freqs:
            raise UserError(
                f"lombscargle --chunk {p.chunk} is more than --freqs {p.freqs}",
                f"use --chunk <= {p.freqs} (or leave it out)",
            )

    def plan(self, p, ctx: Context) -> None:
        chunk_type = array_module(ctx).ndarray
        have = kernels.supported(chunk_type)
        if p.impl != "auto" and p.impl not in have:
            raise UserError(
                f"lombscargle --impl {p.impl} does not run on {ctx.family.array_module} "
                f"chunks (backend {ctx.family.name})",
                f"use --impl {' | '.join(['auto', *have])}, or a backend whose chunks it runs on",
            )
        impl = kernels.resolve(p.impl, chunk_type)
        ctx.choose(
            "impl",
            impl,
            "flag" if p.impl != "auto" else "rule",
            f"auto: first of {', '.join(kernels.AUTO_ORDER)} that runs on {ctx.family.array_module} chunks"
            if p.impl == "auto"
            else None,
        )
        ctx.choose("kernel", have[impl].kernel, "rule", f"--impl {impl}")
        ctx.choose(
            "fast_math",
            p.dtype == "float32" and impl != "vectorized",
            "rule",
            "compiled kernels use fast math for float32 only",
        )
        if p.chunk is not None:
            ctx.choose("chunk", p.chunk, "flag")
            return
        by_threads = math.ceil(p.freqs / ctx.total_threads)
        if impl != "vectorized":  # a compiled kernel holds no samples x freqs temporaries
            ctx.choose(
                "chunk",
                by_threads,
                "rule",
                f"{p.freqs} freqs / {ctx.total_threads} threads (a kernel needs no temporaries; "
                "large blocks keep a GPU busy)",
            )
            return
        itemsize = np.dtype(p.dtype).itemsize
        by_bytes = max(1, ctx.knobs.chunk_bytes // (4 * p.samples * itemsize))
        ctx.choose(
            "chunk",
            min(by_bytes, by_threads),
            "rule",
            f"min({ctx.family.name} chunk budget {ctx.knobs.chunk_bytes / 2**20:.0f} MiB / "
            f"(4 temporaries x {p.samples} samples x {itemsize} B) = {by_bytes}, "
            f"{p.freqs} freqs / {ctx.total_threads} threads = {by_threads})",
        )

    def estimate_bytes(self, p, ctx: Context) -> int:
        itemsize = np.dtype(p.dtype).itemsize
        return (
            2 * p.freqs * itemsize
            + 2 * p.samples * itemsize * ctx.total_threads
            + min(ctx.knobs.chunk_bytes, 4 * p.samples * p.freqs * itemsize)
        )

    def describe_data(self, p) -> dict:
        return {
            "samples": p.samples,
            "freqs": p.freqs,
            "band_rad_s": [p.fmin, p.fmax],
            "dtype": p.dtype,
            "source": f"generated, sin({signal_frequency(p):g} t) + {NOISE} noise over {SPAN:g} s",
        }

    def generate(self, p, ctx: Context):
        rng = da.random.default_rng(p.seed)
        t = rng.uniform(0.0, SPAN, p.samples, chunks=p.samples)
        y = da.sin(signal_frequency(p) * t) + NOISE * rng.standard_normal(p.samples, chunks=p.samples)
        step = (p.fmax - p.fmin) / max(1, p.freqs - 1)
        f = da.arange(p.freqs, chunks=ctx.value("chunk"), dtype=np.float64) * step + p.fmin
        return {"t": t.astype(p.dtype), "y": y.astype(p.dtype), "f": f.astype(p.dtype)}

    def compute(self, data, p, ctx: Context) -> Output:
        impl = ctx.value("impl")
        pgram = da.blockwise(
            kernels.periodogram_block,
            "i",
            data["t"],
            "j",
            data["y"],
            "j",
            data["f"],
            "i",
            impl=impl,
            concatenate=True,
            dtype=np.dtype(p.dtype),
            meta=data["f"]._meta,
        )
        return Output({"power": pgram})

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        from scipy.signal import lombscargle

        power, t, y, f = (
            host(a) for a in dask.compute(out.collections["power"], data["t"], data["y"], data["f"])
        )
        t, y, f = (a.astype(np.float64) for a in (t, y, f))
        power64 = power.astype(np.float64)
        if power.shape != f.shape or not np.isfinite(power).all():
            return Validation(
                "shape and finiteness", [Check("shape and finite", False, str(power.shape), str(f.shape))]
            )
        if p.samples * p.freqs <= FULL_CHECK_WORK:
            idx = np.arange(p.freqs)
            what = "every frequency"
        else:
            k = max(1, FULL_CHECK_WORK // p.samples)
            pick = np.random.default_rng(p.seed + 13).choice(p.freqs, size=min(k, p.freqs), replace=False)
            idx = np.unique(np.append(pick, int(np.argmax(power64))))
            what = f"{len(idx)} sampled frequencies + the peak"
        batch = max(1, REFERENCE_BATCH // p.samples)
        ref = np.concatenate(
            [np.atleast_1d(lombscargle(t, y, f[idx[i : i + batch]])) for i in range(0, len(idx), batch)]
        )
        tol = tolerance(p)
        err = max_error(power64[idx], ref)
        detail = f"max |P - P_scipy| / max P_scipy ({p.dtype})"
        checks = [Check.within(f"vs scipy.signal.lombscargle ({what})", err, tol, detail)]
        w0 = signal_frequency(p)
        peak = float(f[int(np.argmax(power64))])
        resolution = max(2 * math.pi / SPAN, 2 * (p.fmax - p.fmin) / max(1, p.freqs - 1))
        if p.fmin <= w0 <= p.fmax:
            checks.append(
                Check(
                    "peak at the injected frequency",
                    abs(peak - w0) <= resolution,
                    peak,
                    f"{w0:.6g} +- {resolution:.3g}",
                    "rad/s",
                )
            )
        bound = float((y * y).sum())
        slack = tol * bound
        ok = bool((power64 >= -slack).all() and (power64 <= bound + slack).all())
        checks.append(Check("0 <= P <= sum y^2", ok, float(power64.max()), bound))
        return Validation(f"scipy.signal.lombscargle in float64 ({what}) + peak + bounds", checks)
