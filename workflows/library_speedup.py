"""Superseded by ``gpuscale bench workflows/library.yaml --out DIR`` (the same comparison as a
resumable sweep, three sizes per workload, with records, a table, charts and report.html);
kept for the JSON it writes.

CPU vs GPU per workload: the library-large cases (``run_matrix.py``'s preset), each run on
one GPU session and on one CPU session (a LocalCluster on every core), validated both ways,
and a speedup table (CPU median / GPU median), like the seeds' pybench chart.

One cluster per side rather than a fresh process per case (``run_matrix.py --preset
library-large`` does that, and spends most of its time starting clusters). The JSON is
rewritten after every case, so a run cut short keeps what it measured.

    python workflows/library_speedup.py --gpus 0 --json speedup.json          # GPU machine
    python workflows/library_speedup.py --small --json out.json               # CPU only, CI sizes
    python workflows/library_speedup.py --side gpu --side cpu --cases stencil,lombscargle

Exit 0 when every case that ran was valid on every side.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_matrix import PRESETS  # noqa: E402  (the same cases as the CLI preset)

import gpuscale  # noqa: E402

SMALL = {"transpose_sum": "--n 400", "matmul": "--n 300", "fft": "--rows 256 --cols 512 --axis 0",
         "reduction": "--rows 2000 --cols 200 --op std", "slice": "--rows 2000 --cols 200 --step 3",
         "map_overlap": "--n 512 --size 9", "stencil": "--n 512 --dtype float32",
         "lombscargle": "--samples 500 --freqs 2000", "merge": "--rows 20000 --match-fraction 0.3",
         "shuffle": "--rows 20000"}


def parse_flags(tokens: list[str]) -> dict:
    """``--rows 10 --compute-uv`` -> ``{"rows": "10", "compute_uv": True}`` (the workload's
    parameter model converts the strings)."""
    out, i = {}, 0
    while i < len(tokens):
        key = tokens[i].lstrip("-").replace("-", "_")
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out[key], i = tokens[i + 1], i + 2
        else:
            out[key], i = True, i + 1
    return out


def cases(small: bool, only: set[str] | None) -> list[tuple[str, str, dict]]:
    """(label, workload, params) of the library-large preset, without --backend / --repeat."""
    seen, out = set(), []
    for case in PRESETS["library-large"]:
        tokens = shlex.split(case)
        name, flags = tokens[0], parse_flags(tokens[1:])
        flags.pop("backend", None)
        flags.pop("repeat", None)
        if small:
            small_flags = parse_flags(shlex.split(SMALL[name]))
            for k in ("method",):  # keep what tells the variants apart
                if k in flags:
                    small_flags[k] = flags[k]
            flags = small_flags
        label = " ".join([name] + [f"--{k.replace('_', '-')} {v}" for k, v in flags.items()])
        if label in seen or (only and name not in only):
            continue
        seen.add(label)
        out.append((label, name, flags))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="CI sizes")
    ap.add_argument("--gpus", default=None, help="GPUs of the GPU side (default: all)")
    ap.add_argument("--cpu-workers", type=int, default=None, help="CPU side's workers (default: the family's)")
    ap.add_argument("--side", action="append", choices=("gpu", "cpu"), help="default: gpu, then cpu")
    ap.add_argument("--cases", default=None, help="workload names to keep, comma-separated")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)
    sides = a.side or ["gpu", "cpu"]
    todo = cases(a.small, set(a.cases.split(",")) if a.cases else None)
    rows: list[dict] = []
    meta: dict[str, dict] = {}

    def save(final: bool = False):
        if a.json_path:
            tmp = pathlib.Path(a.json_path + ".part")
            tmp.write_text(json.dumps({"sides": meta, "rows": rows, "speedups": speedups(rows),
                                       "complete": final}, indent=2, default=str))
            tmp.replace(a.json_path)

    for side in sides:
        kw = {}
        if side == "gpu" and a.gpus is not None:
            kw["gpus"] = a.gpus
        if side == "cpu" and a.cpu_workers is not None:
            kw["workers"] = a.cpu_workers
        t0 = time.perf_counter()
        with gpuscale.session(backend=side, **kw) as s:
            spec = s.spec
            meta[side] = {"family": s.family.name, "workers": len(s.client.scheduler_info()["workers"]),
                          "threads": sum(w["nthreads"] for w in s.client.scheduler_info()["workers"].values()),
                          "cluster": spec.cluster_class if hasattr(spec, "cluster_class") else None,
                          "startup_s": time.perf_counter() - t0}
            for label, name, params in todo:
                try:
                    r = s.run(name, repeat=a.repeat, warmup=1, write=False, **params)
                    row = {"case": label, "side": side, "valid": r.valid, "median_s": r.median_s,
                           "min_s": r.min_s, "generate_s": r.generate_s, "validate_s": r.validate_s,
                           "choices": {k: v.get("value") for k, v in r.choices.items()}}
                except Exception as e:  # noqa: BLE001 - one failing case must not hide the rest
                    row = {"case": label, "side": side, "valid": False, "error": f"{type(e).__name__}: {e}"}
                rows.append(row)
                print(f"[speedup] {side} {label}: " + (f"{row['median_s']:.4f} s valid {row['valid']}"
                      if "median_s" in row else row["error"]), file=sys.stderr, flush=True)
                save()
    save(final=True)

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    m = gpuscale.machine
    gpus = m.gpus()
    title = (f"CPU vs GPU per workload: gpu side {meta.get('gpu', {}).get('workers', '-')} x "
             f"{gpus[0]['name'] if gpus else 'no GPU'}, cpu side {meta.get('cpu', {}).get('threads', '-')} threads on "
             f"{m.cpu()['model']} ({'CI sizes' if a.small else 'library-large sizes'}, median of {a.repeat} after a warm-up)")
    t = Table(title=title, title_justify="left")
    for col in ("case", "gpu", "cpu", "cpu / gpu", "valid"):
        t.add_column(col)
    for sp in speedups(rows):
        t.add_row(escape(sp["case"]), _fmt(sp.get("gpu_s")), _fmt(sp.get("cpu_s")),
                  f"{sp['speedup']:.1f}x" if sp.get("speedup") else "-",
                  "yes" if sp["valid"] else "NO" + (f" ({escape(sp['error'][:80])})" if sp.get("error") else ""))
    Console(width=200).print(t)
    return 0 if rows and all(r["valid"] for r in rows) else 1


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4f} s"


def speedups(rows: list[dict]) -> list[dict]:
    by_case: dict[str, dict] = {}
    for r in rows:
        d = by_case.setdefault(r["case"], {"case": r["case"], "valid": True})
        d["valid"] = d["valid"] and bool(r.get("valid"))
        if "error" in r:
            d["error"] = r["error"]
        if "median_s" in r:
            d[f"{r['side']}_s"] = r["median_s"]
    for d in by_case.values():
        if d.get("gpu_s") and d.get("cpu_s") and d["valid"]:
            d["speedup"] = d["cpu_s"] / d["gpu_s"]
    return list(by_case.values())


if __name__ == "__main__":
    sys.exit(main())
