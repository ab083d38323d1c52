"""How true is the memory estimate? Every library workload at three sizes on one CPU worker:
the estimated peak per worker (baseline + working set + data, :mod:`gpuscale.memory`) against
the measured peak (the worker process's VmHWM over the run), and their ratio (target: 0.5-1.1).

    python workflows/memory_estimate.py --json memory-estimate.json     # CPU, a few minutes
    python workflows/memory_estimate.py --smoke                         # one size each, small
    python workflows/memory_estimate.py --backend gpu --gpus 0 --scale 8 --json gpu.json
    python workflows/memory_estimate.py --backend gpu --gpus 0 --cap 1GB --json gpu-capped.json

On a GPU (``--backend gpu``) the measured peak is the device allocator's during the run and the
estimate is compared without its baseline (:class:`gpuscale.memory_measured.Watch`); ``--scale`` multiplies
the sizes' largest dimension (rows, or n), ``--cap`` sets ``--device-memory-limit`` so the larger
sizes stream or spill and their verdicts' estimates are checked too.

Sizes are workflows/library.yaml's smallest, x1, x2, x4 in elements (the largest that fits a
2 GB worker without spilling); the same session runs them all (one worker, 2 threads, 2 GB).
"""

from __future__ import annotations

import argparse
import json
import sys

from dask.utils import format_bytes

SIZES = {
    "svd": [{"rows": r, "cols": 100} for r in (250_000, 500_000, 1_000_000)],
    "groupby": [{"rows": r, "keys": 10_000} for r in (5_000_000, 10_000_000, 20_000_000)],
    "transpose_sum": [{"n": n} for n in (2000, 4000, 8000)],
    "matmul": [{"n": n} for n in (1000, 2000, 4000)],
    "fft": [{"rows": r, "cols": 4096, "axis": 0} for r in (1024, 2048, 4096)],
    "reduction": [{"rows": r, "cols": 5000, "op": "std"} for r in (5000, 10000, 20000)],
    "slice": [{"rows": r, "cols": 5000, "step": 3} for r in (5000, 10000, 20000)],
    "map_overlap": [{"n": n, "size": 9} for n in (2000, 4000, 8000)],
    "stencil": [{"n": n, "dtype": "float32"} for n in (2000, 4000, 8000)],
    "merge": [{"rows": r, "match_fraction": 0.3} for r in (1_000_000, 2_000_000, 4_000_000)],
    "shuffle": [{"rows": r} for r in (1_000_000, 2_000_000, 4_000_000)],
}


def scaled(params: dict, scale: float) -> dict:
    """``params`` with its largest dimension (rows, else n) times ``scale``."""
    if scale == 1:
        return params
    key = "rows" if "rows" in params else "n"
    return {**params, key: int(params[key] * scale)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--workloads", default=",".join(SIZES))
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--gpus", default=None, help="GPU family: which GPUs (one worker each)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply each size's rows (or n) by this")
    ap.add_argument("--cap", default=None, help="GPU family: --device-memory-limit for the session")
    a = ap.parse_args(argv)
    import gpuscale

    rows = []
    if a.backend == "cpu":
        settings = {"workers": 1, "threads_per_worker": 2, "memory_limit": "2GB"}
    else:
        settings = {k: v for k, v in (("gpus", a.gpus), ("device_memory_limit", a.cap)) if v}
    with gpuscale.session(backend=a.backend, **settings) as s:
        for wl in a.workloads.split(","):
            for params in SIZES[wl][:1] if a.smoke else SIZES[wl]:  # smoke: the smallest size
                params = scaled(params, a.scale)
                try:
                    r = s.run(wl, repeat=1, warmup=0, write=False, **params)
                except gpuscale.UserError as e:  # refused by the memory check: a row, not the end
                    rows.append(
                        {
                            "workload": wl,
                            "params": params,
                            "verdict": "does not fit",
                            "refused": str(e),
                            "ratio": None,
                        }
                    )
                    print(f"{wl:14} {json.dumps(params):48} refused: {e}", flush=True)
                    continue
                except Exception as e:  # noqa: BLE001 - a run that fails is a row of the table, not the end
                    rows.append(
                        {
                            "workload": wl,
                            "params": params,
                            "error": f"{type(e).__name__}: {e}"[:300],
                            "ratio": None,
                        }
                    )
                    print(
                        f"{wl:14} {json.dumps(params):48} failed: {type(e).__name__}: {str(e)[:200]}",
                        flush=True,
                    )
                    continue
                m = r.memory or {}
                meas = m.get("measured") or {}
                row = {
                    "workload": wl,
                    "params": params,
                    "verdict": m.get("verdict"),
                    "estimate_bytes": m.get("estimate_bytes"),
                    "estimated_peak": m.get("peak_bytes"),
                    "compared_with": meas.get("estimated_peak_bytes"),
                    "measured_peak": meas.get("peak_bytes"),
                    "ratio": meas.get("peak_over_estimate"),
                    "spilled_bytes": meas.get("spilled_bytes"),
                    "valid": r.valid,
                }
                rows.append(row)
                print(
                    f"{wl:14} {json.dumps(params):48} {row['verdict'] or '':12} est "
                    f"{format_bytes(row['compared_with'] or row['estimated_peak'] or 0):>10} "
                    f"measured {format_bytes(row['measured_peak'] or 0):>10}  ratio {row['ratio']}  "
                    f"valid {r.valid}",
                    flush=True,
                )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    inside = sum(0.5 <= x <= 1.1 for x in ratios)
    refused = sum(1 for r in rows if r.get("refused"))
    print(
        f"{inside} of {len(ratios)} within 0.5-1.1"
        + (f"; {refused} refused by the memory check" if refused else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
