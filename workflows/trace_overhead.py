"""What tracing costs: the same workload with and without ``trace=DIR``, in one process and on
one cluster, alternating which goes first in every round.

Two ratios (traced / untraced, medians over the rounds):

* ``compute``: the runner's median timed repeat (``Result.median_s``): what tracing adds to
  the work itself (the task stream plugin, the workers' memory sampler, the phase marks);
* ``end to end``: the whole ``Session.run`` call, which for the traced side also includes
  collecting the task stream and transfer logs, Dask's performance report and writing the
  folder (paid once per run, after the timed repeats).

    python workflows/trace_overhead.py --smoke                  # CPU, seconds
    python workflows/trace_overhead.py --backend gpu --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import statistics
import sys
import tempfile
import time

import gpuscale

SIZES = {
    "smoke": {"transpose_sum": {"n": 1500, "chunk": 250}, "shuffle": {"rows": 200_000, "partitions": 8}},
    "cpu": {"transpose_sum": {"n": 6000, "chunk": 1000}, "shuffle": {"rows": 2_000_000, "partitions": 16}},
    "gpu": {
        "transpose_sum": {"n": 40_000, "chunk": 10_000},
        "shuffle": {"rows": 100_000_000, "partitions": 16},
    },
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--protocol", default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--workload", choices=sorted(SIZES["cpu"]), default="transpose_sum")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (each runs both sides)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats per run")
    ap.add_argument("--smoke", action="store_true", help="CPU, small sizes, 2 rounds: a quick check")
    ap.add_argument(
        "--keep",
        default=None,
        help="keep the trace folders under this new folder (default: a temporary folder, removed at the end)",
    )
    ap.add_argument("--json", dest="json_path", default=None, help="also write the numbers as JSON here")
    a = ap.parse_args(argv)
    if a.smoke:
        a.backend = "cpu" if a.backend == "auto" else a.backend
        a.workers = a.workers or 2
        a.rounds = min(a.rounds, 2)
        a.repeat = min(a.repeat, 2)

    rows: list[dict] = []
    with contextlib.ExitStack() as stack:
        keep = (
            pathlib.Path(a.keep)
            if a.keep
            else pathlib.Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscale-trace-overhead-"))
            )
        )
        family, params = measure(a, keep, rows)
    return report(a, family, params, rows, keep if a.keep else None)


def measure(a, keep: pathlib.Path, rows: list[dict]) -> tuple[str, dict]:
    with gpuscale.session(
        a.backend,
        a.protocol,
        workers=a.workers,
        threads_per_worker=1 if a.smoke else None,
        collection=gpuscale.workloads.get(a.workload).collection,
    ) as s:
        size = "smoke" if a.smoke else s.family.name
        params = SIZES[size if size in SIZES else "cpu"][a.workload]
        family = s.family.name
        for rnd in range(a.rounds):
            order = ("untraced", "traced") if rnd % 2 == 0 else ("traced", "untraced")
            for side in order:
                trace = str(keep / f"round{rnd}") if side == "traced" else None
                t0 = time.perf_counter()
                r = s.run(a.workload, repeat=a.repeat, warmup=1, write=False, trace=trace, **params)
                e2e = time.perf_counter() - t0
                rows.append(
                    {
                        "round": rnd,
                        "side": side,
                        "median_s": r.median_s,
                        "end_to_end_s": e2e,
                        "valid": r.valid,
                        "trace": r.trace,
                        "trace_files": sorted(p.name for p in pathlib.Path(r.trace).iterdir())
                        if r.trace
                        else None,
                    }
                )
    return family, params


def report(a, family: str, params: dict, rows: list[dict], keep: pathlib.Path | None) -> int:

    def med(side, key):
        return statistics.median(r[key] for r in rows if r["side"] == side)

    out = {
        "workload": a.workload,
        "params": params,
        "backend": a.backend,
        "family": family,
        "rounds": a.rounds,
        "repeat": a.repeat,
        "rows": rows,
        "untraced": {
            "median_s": med("untraced", "median_s"),
            "end_to_end_s": med("untraced", "end_to_end_s"),
        },
        "traced": {"median_s": med("traced", "median_s"), "end_to_end_s": med("traced", "end_to_end_s")},
    }
    out["compute_ratio"] = out["traced"]["median_s"] / out["untraced"]["median_s"]
    out["end_to_end_ratio"] = out["traced"]["end_to_end_s"] / out["untraced"]["end_to_end_s"]
    out["traces"] = str(keep) if keep else None

    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"tracing overhead: {a.workload} {params} on {family}, medians of {a.rounds} "
        f"alternating round(s)",
        title_justify="left",
    )
    for col in ("", "untraced", "traced", "traced / untraced"):
        t.add_column(col)
    t.add_row(
        "compute (median repeat)",
        f"{out['untraced']['median_s'] * 1e3:.1f} ms",
        f"{out['traced']['median_s'] * 1e3:.1f} ms",
        f"{out['compute_ratio']:.3f}x",
    )
    t.add_row(
        "end to end (Session.run)",
        f"{out['untraced']['end_to_end_s']:.3f} s",
        f"{out['traced']['end_to_end_s']:.3f} s",
        f"{out['end_to_end_ratio']:.3f}x",
    )
    Console().print(t)
    if keep:
        Console().print(f"trace folders: {keep}")
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0 if all(r["valid"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
