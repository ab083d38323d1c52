"""What TLS costs on the CPU: the same workloads on two clusters of the same shape, one plain
TCP (`cluster.security: off`) and one TLS (`tls`, distributed's Security.temporary), a new
pair each round, the order alternating, so a busy machine's drift hits both sides alike. Prints
one line per workload: the median of each side's per-round medians and the ratio TLS / plain
with its interval over the rounds, "not significant" where the rounds cannot tell the sides
apart.

    python workflows/tls_overhead.py                       # svd and groupby, 2 workers x 1 thread
    python workflows/tls_overhead.py --rounds 7 --json out.json

Exit 1 when a run did not validate (or ran on the wrong side).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import harness

import gpuscale

WORKLOADS = {
    "svd": {"rows": 1_000_000, "cols": 100},
    "groupby": {"rows": 5_000_000, "keys": 10_000},
    "shuffle": {"rows": 2_000_000},
}
SMOKE = {"svd": {"rows": 50_000, "cols": 10}, "groupby": {"rows": 100_000, "keys": 100}}
SIDES = {"plain": "off", "tls": "tls"}


def side(name: str, args) -> harness.Side:
    """A session of ``args.workers`` one-thread workers with ``security`` set for the side (one
    session at a time: a session's client is the process's default one)."""
    security = SIDES[name]
    return harness.session_side(
        name,
        args.repeat,
        args.warmup,
        check=lambda case, res: None if res.cluster["tls"] == (security == "tls") else f"ran without {name}",
        open=lambda _: gpuscale.session(
            backend="cpu", workers=args.workers, threads_per_worker=1, security=security
        ),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_common(ap, repeat=3, warmup=1, rounds=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    args = ap.parse_args(argv)
    sizes = SMOKE if args.smoke else WORKLOADS
    t0 = time.perf_counter()
    study = harness.Study(
        [side(n, args) for n in SIDES], list(sizes.items()), key=lambda c: c[0], rounds=args.rounds
    )
    cells = study.run()
    rows = []
    for name in sizes:
        plain, tls = cells[f"{name}|plain"], cells[f"{name}|tls"]
        if "error" in plain or "error" in tls:
            print(f"{name:8s} {plain.get('error') or tls.get('error')}")
            continue
        r = harness.ratio(plain, tls)
        rows.append(
            {
                "workload": name,
                "params": sizes[name],
                "plain_median_s": statistics.median(harness.per_round(plain)),
                "tls_median_s": statistics.median(harness.per_round(tls)),
                **r,
                "rounds": args.rounds,
                "plain_s": harness.per_round(plain),
                "tls_s": harness.per_round(tls),
            }
        )
        print(
            f"{name:8s} plain {rows[-1]['plain_median_s']:.3f} s  tls {rows[-1]['tls_median_s']:.3f} s  "
            f"tls/plain {harness.ratio_text(r)} (n={args.rounds})"
        )
    valid = len(rows) == len(sizes) and all(c.get("valid") for c in cells.values())
    out = {
        "workers": args.workers,
        "threads_per_worker": 1,
        "repeat": args.repeat,
        "valid": valid,
        "rows": rows,
        "cells": cells,
        "wall_s": time.perf_counter() - t0,
    }
    if args.json:
        harness.write(args.json, "tls_overhead", out)
    if not valid:
        bad = [f"{k}: {c.get('error') or c.get('diff')}" for k, c in cells.items() if not c.get("valid")]
        print(f"a run did not validate: {'; '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
