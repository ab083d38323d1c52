"""For sweeps on one cluster per backend, with records, a table, charts and resume, use
``gpuscale bench SPEC.yaml --out DIR`` (``workflows/library.yaml`` is the library-large
comparison); this script starts a fresh process per case (start-up included).

Run a matrix of ``gpuscale run ... --json`` commands as real subprocesses and tabulate them.

Each case is the argument string of one ``gpuscale run`` (as a user would type it). Every
command's stdout / stderr is kept under ``--logs``; the table shows validity, median and
min time, warm-up and start-up, the SVD route or groupby plan, and the process's wall time
(process start to validated result).

    python workflows/run_matrix.py --preset gpu-1 --logs /tmp/matrix
    python workflows/run_matrix.py "svd --backend cpu --rows 100000" "groupby --backend cpu"
    python workflows/run_matrix.py --preset library-large     # CPU (all cores) vs GPU per workload

Cases that differ only in ``--backend`` (cpu vs gpu / a family's names) are also paired in a
speedup table: CPU median / GPU median, both validated, in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

BIG_SVD = "--rows 2000000 --cols 1000"
BIG_GROUPBY = "--rows 100000000 --keys 1000000 --partitions 10"
PRESETS = {
    "cpu": ["svd --backend cpu", "groupby --backend cpu", "svd --backend cpu --condition 1e7 --rows 50000 --cols 50"],
    "gpu-1": [
        "svd --backend cupy",
        "groupby --backend cudf",
        f"svd --backend cupy {BIG_SVD}",
        f"groupby --backend cudf {BIG_GROUPBY}",
        f"svd --backend cupy --protocol ucx {BIG_SVD}",
        f"groupby --backend cudf --protocol ucx {BIG_GROUPBY}",
        "svd --backend gpu --condition 1e7 --rows 400000 --cols 200",
        "svd --backend gpu --condition 1e10 --rows 400000 --cols 200",
        "svd --backend gpu --compute-uv --rows 400000 --cols 200",
    ],
    # Every library workload at a size where a GPU has work to do, on the GPU and on every CPU
    # core of the same machine (LocalCluster). Sizes fit one 78 GiB H100 and run in seconds on
    # 16 cores; repeats are few because the CPU side is the slow one.
    "library-large": [f"{case} --backend {b} --repeat 2" for case in (
        "transpose_sum --n 20000",
        "matmul --n 8000",
        "fft --rows 8192 --cols 16384 --axis 0",
        "reduction --rows 40000 --cols 10000 --op std",
        "slice --rows 40000 --cols 10000 --step 3",
        "map_overlap --n 16000 --size 9",
        "stencil --n 16000 --dtype float32",
        "lombscargle --samples 20000 --freqs 200000",
        "merge --rows 20000000 --match-fraction 0.3",
        "shuffle --rows 20000000 --method set_index",
        "shuffle --rows 20000000 --method sort_values",
    ) for b in ("gpu", "cpu")],
    "gpu-2": [
        f"svd --backend cupy --gpus 0,1 {BIG_SVD}",
        f"svd --backend cupy --gpus 0,1 --protocol ucx {BIG_SVD}",
        f"groupby --backend cudf --gpus 0,1 {BIG_GROUPBY}",
        f"groupby --backend cudf --gpus 0,1 --protocol ucx {BIG_GROUPBY}",
        f"svd --backend cupy --gpus 0,1 --protocol ucx --nvlink {BIG_SVD}",
    ],
}


def run_case(case: str, logs: pathlib.Path, i: int, timeout: float, results_dir: str) -> dict:
    cmd = [sys.executable, "-m", "gpuscale", "run", *shlex.split(case), "--json",
           "--results-dir", results_dir]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, e.stdout or "", (e.stderr or "") + f"\ntimed out after {timeout} s"
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    wall = time.perf_counter() - t0
    (logs / f"case{i:02d}.out").write_text(out)
    (logs / f"case{i:02d}.err").write_text(err)
    row = {"case": case, "rc": rc, "wall_s": wall}
    try:
        rec = json.loads(out)
    except json.JSONDecodeError:
        row["error"] = (err.strip().splitlines() or ["no output"])[-1][:200]
        return row
    info = rec.get("info", {})
    plan = info.get("route", {}).get("name") or (
        f"{info['plan'].get('strategy', '')} split_out={info['plan']['split_out']}".strip()
        if "plan" in info else "")
    row.update(valid=rec["valid"], median_s=rec["median_s"], min_s=rec["min_s"],
               warmup_s=rec["warmup_s"], startup_s=rec.get("startup_s"), generate_s=rec["generate_s"],
               plan=plan, workers=rec["cluster"].get("running", {}).get("workers"),
               device=(rec["hardware"]["gpus"] or [{"name": rec["hardware"]["cpu"]["model"]}])[0]["name"],
               checks=[c["name"] for c in rec["validation"]["checks"] if not c["ok"]])
    return row


CPU_NAMES = {"cpu", "numpy", "pandas"}
GPU_NAMES = {"gpu", "cupy", "cudf"}


def speedups(rows: list[dict]) -> list[dict]:
    """Pair cases that differ only in ``--backend`` (a CPU name vs a GPU name)."""
    def split(case):
        args = shlex.split(case)
        if "--backend" not in args:
            return None, case
        i = args.index("--backend")
        backend = args[i + 1] if i + 1 < len(args) else ""
        return backend, shlex.join(args[:i] + args[i + 2:])

    by_case: dict[str, dict[str, dict]] = {}
    for r in rows:
        backend, rest = split(r["case"])
        side = "cpu" if backend in CPU_NAMES else "gpu" if backend in GPU_NAMES else None
        if side and "median_s" in r:
            by_case.setdefault(rest, {})[side] = r
    out = []
    for rest, sides in by_case.items():
        if {"cpu", "gpu"} <= set(sides):
            c, g = sides["cpu"], sides["gpu"]
            out.append({"case": rest, "cpu_s": c["median_s"], "gpu_s": g["median_s"],
                        "speedup": c["median_s"] / g["median_s"], "valid": bool(c["valid"] and g["valid"])})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="argument strings for `gpuscale run`")
    ap.add_argument("--preset", choices=sorted(PRESETS), action="append", default=[])
    ap.add_argument("--logs", default="matrix-logs")
    ap.add_argument("--results-dir", default=os.environ.get("GPUSCALE_RESULTS", "gpuscale-results"))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args(argv)
    cases = list(a.cases) + [c for p in a.preset for c in PRESETS[p]]
    logs = pathlib.Path(a.logs)
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, case in enumerate(cases):
        row = run_case(case, logs, i, a.timeout, a.results_dir)
        rows.append(row)
        status = "valid" if row.get("valid") else ("INVALID" if "valid" in row else f"rc={row['rc']}")
        print(f"[{i + 1}/{len(cases)}] {status:8s} {row['wall_s']:7.1f}s  {case}", file=sys.stderr, flush=True)

    from rich.console import Console
    from rich.table import Table
    t = Table(title="gpuscale run matrix", title_justify="left")
    for col in ("case", "valid", "median", "min", "warm-up", "start-up", "plan/route", "workers", "wall"):
        t.add_column(col)
    for r in rows:
        if "valid" not in r:
            t.add_row(r["case"], f"rc={r['rc']}", r.get("error", ""), "", "", "", "", "", f"{r['wall_s']:.1f} s")
            continue
        t.add_row(r["case"], "yes" if r["valid"] else "NO " + ",".join(r["checks"]), f"{r['median_s']:.4f} s",
                  f"{r['min_s']:.4f} s", ",".join(f"{x:.3f}" for x in r["warmup_s"]),
                  f"{r['startup_s']:.1f} s" if r["startup_s"] is not None else "-", r["plan"],
                  str(r["workers"]), f"{r['wall_s']:.1f} s")
    Console(width=200).print(t)
    pairs = speedups(rows)
    if pairs:
        st = Table(title="CPU vs GPU, same machine, same run (median CPU / median GPU)", title_justify="left")
        for col in ("case", "cpu median", "gpu median", "speedup", "both valid"):
            st.add_column(col)
        for p in pairs:
            st.add_row(p["case"], f"{p['cpu_s']:.4f} s", f"{p['gpu_s']:.4f} s", f"{p['speedup']:.1f}x",
                       "yes" if p["valid"] else "NO")
        Console(width=200).print(st)
    if rows and "device" in rows[0]:
        Console().print(f"device: {rows[0]['device']}")
    if a.json_path:
        pathlib.Path(a.json_path).write_text(json.dumps({"rows": rows, "speedups": pairs}, indent=2, default=str))
    return 0 if all(r.get("valid") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
