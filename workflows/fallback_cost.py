"""What the host fallback's wrappers cost code that never falls back, and what a fallback costs.

1. Building: the time to build a chain of DataFrame calls (a mask, an assign, a rename, a
   groupby mean: the client's work, nothing computed) in a session of ``--backend`` with the
   wrappers in place (``convert``) and with the session's block off (``host_collections.scope(
   family, "off")``: Dask's own calls), alternating, ``--repeat`` times each; medians and the
   added microseconds per wrapped call.
2. A fallback (``--backend auditdevice`` only: the test family, with ``rename`` made to raise):
   the same chain computed with its rename run on the host vs computed on the family with no
   failing call, medians, and the bytes the audit names each way.

    PYTHONPATH=.:tests python workflows/fallback_cost.py --backend auditdevice
    python workflows/fallback_cost.py --backend gpu          # 1: the wrappers' cost on a GPU session
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import dask

import gpuscale
from gpuscale.backends import host_collections

CALLS = 6  # wrapped calls in chain(): __gt__, __getitem__, assign, rename, groupby, __getitem__ + mean


def frame():
    return dask.datasets.timeseries(
        end="2000-01-08", freq="10s", seed=0, dtypes={"id": int, "name": "string", "x": float, "y": float}
    )


def chain(df, rename: bool = True):
    out = df[df.x > 0].assign(z=df.x * df.y)
    out = out.rename(columns={"id": "ID"}) if rename else out
    return out.groupby("name").z.mean()


def build_cost(s, repeat: int) -> dict:
    df = frame()
    on, off = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        chain(df, rename=False)
        on.append(time.perf_counter() - t0)
        with host_collections.scope(s.family, "off"):
            t0 = time.perf_counter()
            chain(df, rename=False)
            off.append(time.perf_counter() - t0)
    a, b = statistics.median(on), statistics.median(off)
    return {"wrapped_ms": a * 1e3, "plain_ms": b * 1e3, "per_call_us": (a - b) / CALLS * 1e6}


def fallback_cost(s, repeat: int) -> dict:
    falls, native, moved = [], [], None
    for _ in range(repeat):
        with warnings.catch_warnings(), s.audit(phase="fallback") as a:
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            chain(frame()).compute()
            falls.append(time.perf_counter() - t0)
        moved = a.summary["fallbacks"]
        t0 = time.perf_counter()
        chain(frame(), rename=False).compute()
        native.append(time.perf_counter() - t0)
    return {
        "fallback_s": statistics.median(falls),
        "native_s": statistics.median(native),
        "bytes_to_host": sum(f["bytes_to_host"] for f in moved),
        "bytes_to_device": sum(f["bytes_to_device"] for f in moved),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auditdevice")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    if args.backend == "auditdevice":
        import auditfam

        os.environ[auditfam.UNSUPPORTED] = "rename"  # before the workers start: they inherit it
        auditfam.register_device()
    with gpuscale.session(backend=args.backend, workers=2, threads_per_worker=1) as s:
        failing = os.environ.pop("AUDITFAM_UNSUPPORTED", None)  # building asks only the client's TagFrame:
        b = build_cost(s, args.repeat)  # no call fails, nothing falls back
        if failing is not None:
            os.environ["AUDITFAM_UNSUPPORTED"] = failing
        print(
            f"building the chain: {b['wrapped_ms']:.2f} ms wrapped vs {b['plain_ms']:.2f} ms plain "
            f"({b['per_call_us']:+.1f} us per wrapped call), {args.backend}"
        )
        if args.backend == "auditdevice":
            f = fallback_cost(s, max(3, args.repeat // 4))
            print(
                f"computing it: {f['fallback_s']:.3f} s with the rename on the host vs {f['native_s']:.3f} s "
                f"on the family; moved {f['bytes_to_host']:,} B to the host, {f['bytes_to_device']:,} B back"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
