"""What TLS costs on the CPU: the same workloads on two clusters of the same shape, one plain
TCP (`cluster.security: off`) and one TLS (`tls`, distributed's Security.temporary), a new
pair each round, the order alternating, so a busy machine's drift hits both sides alike. Prints
one line per workload: the median of each side's per-round medians and the
ratio TLS / plain with the spread of the per-round ratios.

    python workflows/tls_overhead.py                       # svd and groupby, 2 workers x 1 thread
    python workflows/tls_overhead.py --rounds 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gpuscale

WORKLOADS = {
    "svd": {"rows": 1_000_000, "cols": 100},
    "groupby": {"rows": 5_000_000, "keys": 10_000},
    "shuffle": {"rows": 2_000_000},
}
SMOKE = {"svd": {"rows": 50_000, "cols": 10}, "groupby": {"rows": 100_000, "keys": 100}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats per run (their median is the run's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    sizes = SMOKE if args.smoke else WORKLOADS
    times: dict[tuple[str, str], list[float]] = {}
    valid = True
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for side in ("off", "tls") if r % 2 == 0 else ("tls", "off"):
            # one session at a time (a session's client is the process's default one)
            with gpuscale.session(
                backend="cpu", workers=args.workers, threads_per_worker=1, security=side
            ) as s:
                assert s.client.scheduler.address.startswith("tls://" if side == "tls" else "tcp://")
                for name, params in sizes.items():
                    res = s.run(name, repeat=args.repeat, warmup=1, write=False, **params)
                    valid = valid and bool(res.valid) and res.cluster["tls"] == (side == "tls")
                    times.setdefault((name, side), []).append(res.median_s)
    rows = []
    for name in sizes:
        off, on = times[(name, "off")], times[(name, "tls")]
        ratios = [b / a for a, b in zip(off, on)]
        rows.append(
            {
                "workload": name,
                "params": sizes[name],
                "plain_median_s": statistics.median(off),
                "tls_median_s": statistics.median(on),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "rounds": args.rounds,
                "plain_s": off,
                "tls_s": on,
            }
        )
        print(
            f"{name:8s} plain {statistics.median(off):.3f} s  tls {statistics.median(on):.3f} s  "
            f"tls/plain {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}..{max(ratios):.3f}, "
            f"n={args.rounds})"
        )
    out = {
        "workers": args.workers,
        "threads_per_worker": 1,
        "repeat": args.repeat,
        "valid": valid,
        "rows": rows,
        "wall_s": time.perf_counter() - t0,
    }
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)
    if not valid:
        raise SystemExit("a run did not validate (or ran on the wrong side)")


if __name__ == "__main__":
    main()
