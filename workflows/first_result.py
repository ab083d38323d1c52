"""Time from a command's start to its result, for small work: each side is a new process, timed
from its start until it exits with its answer checked.

Sides:

* ``default``: ``gpuscale run WORKLOAD --backend cpu`` as a user types it;
* ``processes``: the same with ``--processes yes`` (worker processes whatever the size);
* ``plain-dask`` (groupby only): a script as Dask's docs write it: ``LocalCluster()``, a
  client, a groupby mean of as many rows (made with NumPy, two partitions) computed once, its
  answer compared with pandas.

Every side's process exits 0 with its answer valid, or the cell is an error.

    python workflows/first_result.py --repeat 5
    python workflows/first_result.py --workload svd --sides default,processes
    python workflows/first_result.py --size "--rows 6000000" --sides default,processes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import harness

SIDES = ("default", "processes", "plain-dask")

PLAIN = """
import sys
import dask, dask.dataframe as dd, numpy as np, pandas as pd
from distributed import Client, LocalCluster
if __name__ == "__main__":
    rows = int(sys.argv[1])
    with LocalCluster() as cluster, Client(cluster):
        rng = np.random.default_rng(0)
        pdf = pd.DataFrame({"key": rng.integers(0, 10000, rows), "x": rng.random(rows)})
        df = dd.from_pandas(pdf, npartitions=2)
        got = df.groupby("key").x.mean().compute().sort_index()
    want = pdf.groupby("key").x.mean().sort_index()
    sys.exit(0 if np.allclose(got.to_numpy(), want.to_numpy()) else 1)
"""


def _gpuscale(workload: str, extra: list[str], out: str):
    cmd = [
        sys.executable,
        "-m",
        "gpuscale",
        "run",
        workload,
        "--backend",
        "cpu",
        "--json",
        "--results-dir",
        out,
    ]

    def run() -> dict:
        p = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return json.loads(p.stdout)

    def check(r: dict) -> tuple[bool, str]:
        return bool(r["valid"]), f"start-up {r['startup_s']:.2f} s, work {r['median_s']:.3f} s a repeat"

    return run, check


def _plain(rows: int):
    def run() -> int:
        p = subprocess.run(
            [sys.executable, "-c", PLAIN, str(rows)], capture_output=True, text=True, timeout=300
        )
        return p.returncode

    return run, lambda rc: (rc == 0, "exit 0, answer equal to pandas" if rc == 0 else f"exit {rc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="groupby", help="the gpuscale workload, at its default size")
    ap.add_argument("--size", default="", metavar="FLAGS", help='its sizes instead, e.g. "--rows 6000000"')
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated: {', '.join(SIDES)}")
    harness.add_common(ap, repeat=5, warmup=1)
    a = ap.parse_args()
    sides = harness.pick_sides(a.sides, SIDES, list(SIDES))
    out = tempfile.mkdtemp(prefix="first-result-")
    builders = {
        "default": lambda: _gpuscale(a.workload, a.size.split(), out),
        "processes": lambda: _gpuscale(a.workload, [*a.size.split(), "--processes", "yes"], out),
        "plain-dask": lambda: _plain(2_000_000),
    }
    cells: dict[str, dict] = {}
    for name in sides:
        if name == "plain-dask" and (a.workload != "groupby" or a.size):
            continue
        run, check = builders[name]()
        try:
            times, got = harness.bench_once(run, a.repeat, a.warmup)
            ok, note = check(got)
            cells[name] = harness.cell(times, None if ok else note, note=note)
        except Exception as e:  # noqa: BLE001 - a side that fails is a cell that says so
            cells[name] = harness.error_cell(e)
    print(f"{a.workload} {a.size or 'at its default size'}, start to result, {os.cpu_count()} core(s):")
    for name, c in cells.items():
        text = f"{c['median_s']:.2f} s  ({c['note']})" if "error" not in c else f"error: {c['error']}"
        print(f"  {name:<11} {text}")
    if "default" in cells:
        for name in cells:
            if name != "default":
                r = harness.ratio(cells["default"], cells[name])
                print(f"  {name} / default: {harness.ratio_text(r)}")
    if a.json:
        d = {"workload": a.workload, "size": a.size, "cells": cells, "at": time.time()}
        harness.write(a.json, "first-result", d)


if __name__ == "__main__":
    main()
