"""What a session's first DataFrame query costs over its warm runs, and what the session does
as it opens to lower that cost.

Each variant runs in a fresh process: a session on Dask's route (``engine=dask``) opens, and
TPC-H q1 (``dd.read_parquet`` of ``lineitem`` and the query's code, as ``user_queries.py``
writes it) runs three times, each split into build, optimize and compute, each answer checked
against pandas' (kept beside the data, as ``user_queries.py`` keeps it). The variants:

* ``defaults``: the session as it is (rule ``gpu.session-pre-import``: a GPU session's client
  imports cuDF and plans a small Parquet read as the cluster starts; rule ``gpu.frame-kernels``:
  it and then a thread on each worker read a small Parquet file through cuDF and divide);
* ``no-client-plan``: the defaults without the client's small plan;
* ``no-worker-warm``: the defaults without the workers' threads.

    python workflows/first_query.py --backend gpu --data /tmp/qdata --tpch-scale 10 --rounds 3
    python workflows/first_query.py --backend cpu --tpch-scale 0.01 --rounds 1 --json fq.json

Data: ``user_queries.py``'s TPC-H folder (several files per table), made when missing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import harness

VARIANTS = ("defaults", "no-client-plan", "no-worker-warm")


def one(variant: str, backend: str, lineitem: str, answer: str) -> dict:
    """One fresh session's q1, three times: [build, optimize, compute, total] seconds each, and
    what differs from pandas' answer kept in ``answer`` (None: nothing)."""
    import dask.dataframe as dd
    import queries
    from queries import tpch

    import gpuscale
    import gpuscale.backends.family as family
    from gpuscale.backends import gpu

    if variant == "no-client-plan":
        family._first_plan = lambda backend: None
    if variant == "no-worker-warm":
        gpu.GpuFamily.warm_workers = family.Family.warm_workers
    t0 = time.perf_counter()
    with gpuscale.session(backend=backend, engine="dask"):
        opened = time.perf_counter() - t0
        runs, diffs = [], []
        for _ in range(3):
            a = time.perf_counter()
            q = tpch.q1({"lineitem": dd.read_parquet(lineitem)})
            b = time.perf_counter()
            q = q.optimize()
            c = time.perf_counter()
            got = q.compute()
            d = time.perf_counter()
            runs.append([b - a, c - b, d - c, d - a])
            diffs.append(queries.same_answer(got, queries.KeptAnswer(pathlib.Path(answer))))
    diff = next((x for x in diffs if x), None)
    return {"variant": variant, "open_s": opened, "runs": runs, "valid": diff is None, "diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, backend="gpu")
    ap.add_argument("--data", default="/tmp/qdata", help="user_queries.py's data folder")
    ap.add_argument("--tpch-scale", default="10", help="TPC-H scale factor")
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per variant, in alternating order")
    ap.add_argument("--json", default=None, metavar="OUT", help="write every run here")
    ap.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--lineitem", help=argparse.SUPPRESS)
    ap.add_argument("--answer", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.backend, args.lineitem, args.answer)))
        return
    import query_profile
    import user_queries

    (suite, size, folder, _), *_ = query_profile.chosen(
        "tpch:q1", {"tpch": args.tpch_scale}, pathlib.Path(args.data)
    )
    answer = user_queries.references([(suite, size, folder)], needed={(suite.name, size, "q1")}).files
    answer = answer[suite.name, size, "q1"]  # pandas' answer, kept beside the data
    cells = []
    for _ in range(args.rounds):
        for v in VARIANTS:
            cmd = [sys.executable, __file__, "--backend", args.backend, "--one", v, "--answer", str(answer)]
            out = subprocess.run(
                [*cmd, "--lineitem", str(folder / "lineitem")], capture_output=True, text=True, timeout=300
            )
            if out.returncode:
                raise SystemExit(f"first_query.py: variant {v} failed: {out.stderr.strip()[-300:]}")
            cells.append(json.loads(out.stdout.splitlines()[-1]))
    print("q1, seconds: first run (build / optimize / compute), the median warm run, first over warm;")
    print("every answer checked against pandas' (* an answer that differs)")
    for v in VARIANTS:
        for c in (c for c in cells if c["variant"] == v):
            first, warm = c["runs"][0], statistics.median(r[3] for r in c["runs"][1:])
            parts = " / ".join(f"{x:.3f}" for x in first[:3])
            mark = "" if c["valid"] else f"  * {c['diff']}"
            print(f"{v:15} {first[3]:.3f} ({parts})  warm {warm:.3f}  +{first[3] - warm:.3f}{mark}")
    if args.json:
        harness.write(args.json, "first-query", {"backend": args.backend, "cells": cells})


if __name__ == "__main__":
    main()
