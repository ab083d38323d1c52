"""Issue 19 on the GPU: data larger than a capped device, spilled device -> host by dask-cuda.

One GPU session with ``--device-memory-limit CAP`` (the family setting that caps the device);
svd and groupby each at the largest size that fits under the cap ("in memory", 0.6 x CAP of
data), at 1.5 x CAP and at 3 x CAP. Every run is gpuscale's default path (``s.run``: warm-up,
timed repeats, validation) with nothing but the cap set; the table gives the memory verdict,
the median, the time per GB of data and its ratio to the in-memory run (target: <= 3 at 3 x),
and whether the answer validated.

    python workflows/spill_gpu.py --cap 16GB --json spill.json      # on the GPU machine
    python workflows/spill_gpu.py --smoke                           # CPU, seconds (spills to disk)
"""
from __future__ import annotations

import argparse
import json
import sys

from dask.utils import format_bytes, parse_bytes

SVD_COLS = 100
GROUPBY_ROW_BYTES = 24
FACTORS = (0.6, 1.5, 3.0)


def sizes(workload: str, data_bytes: int) -> dict:
    if workload == "svd":
        return {"rows": max(SVD_COLS, data_bytes // (SVD_COLS * 8)), "cols": SVD_COLS}
    return {"rows": data_bytes // GROUPBY_ROW_BYTES, "keys": 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--cap", default="16GB", help="device memory limit (GPU) or host memory limit (CPU)")
    ap.add_argument("--workloads", default="svd,groupby")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--smoke", action="store_true", help="CPU, one 400 MB worker: seconds")
    a = ap.parse_args(argv)
    import gpuscale
    factors = FACTORS
    warmup = 1
    if a.smoke:  # the script works: svd only, in memory and at 1.5 x, no warm-up
        a.backend, a.cap, a.repeat, a.workloads, factors, warmup = "cpu", "400MB", 1, "svd", FACTORS[:2], 0
        settings = {"workers": 1, "threads_per_worker": 1, "memory_limit": a.cap}
    else:
        settings = {"device_memory_limit": a.cap}
    cap = parse_bytes(a.cap)
    rows = []
    with gpuscale.session(backend=a.backend, **settings) as s:
        for wl in a.workloads.split(","):
            base = None
            for f in factors:
                params = sizes(wl, int(f * cap))
                r = s.run(wl, repeat=a.repeat, warmup=warmup, write=False, **params)
                m = r.memory or {}
                gb = m.get("estimate_bytes", 0) / 1e9 if wl == "svd" else params["rows"] * GROUPBY_ROW_BYTES / 1e9
                per_gb = r.median_s / gb
                base = base or per_gb
                row = {"workload": wl, "factor": f, "params": params, "data_gb": round(gb, 2),
                       "verdict": m.get("verdict"), "median_s": round(r.median_s, 4),
                       "s_per_gb": round(per_gb, 4), "vs_in_memory": round(per_gb / base, 2),
                       "valid": r.valid, "generate_s": round(r.generate_s, 2),
                       "measured": {k: v for k, v in (m.get("measured") or {}).items() if k != "workers"}}
                rows.append(row)
                print(f"{wl:8} {f:4.1f} x cap  {format_bytes(int(gb * 1e9)):>10}  {row['verdict'] or '-':12} "
                      f"median {r.median_s:8.4f} s  {per_gb:8.4f} s/GB  x{row['vs_in_memory']:<5} "
                      f"valid {r.valid}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"cap": a.cap, "backend": a.backend, "rows": rows}, fh, indent=1)
    bad = [r for r in rows if r["valid"] is not True]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
