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
import itertools
import pathlib
import statistics
import sys
import tempfile

import harness

import gpuscale

SIZES = {
    "smoke": {"transpose_sum": {"n": 1500, "chunk": 250}, "shuffle": {"rows": 200_000, "partitions": 8}},
    "cpu": {"transpose_sum": {"n": 6000, "chunk": 1000}, "shuffle": {"rows": 2_000_000, "partitions": 16}},
    "gpu": {
        "transpose_sum": {"n": 40_000, "chunk": 10_000},
        "shuffle": {"rows": 100_000_000, "partitions": 16},
    },
}
SIDES = ("untraced", "traced")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", protocol=True, workers=True)
    ap.add_argument("--workload", choices=sorted(SIZES["cpu"]), default="transpose_sum")
    harness.add_common(ap, repeat=3, warmup=1, rounds=5)
    ap.add_argument("--smoke", action="store_true", help="CPU, small sizes, 2 rounds: a quick check")
    ap.add_argument(
        "--keep",
        default=None,
        help="keep the trace folders under this new folder (default: a temporary folder, removed at the end)",
    )
    a = ap.parse_args(argv)
    if a.smoke:
        a.backend = "cpu" if a.backend == "auto" else a.backend
        a.workers = a.workers or 2
        a.rounds = min(a.rounds, 2)
        a.repeat = min(a.repeat, 2)

    with contextlib.ExitStack() as stack:
        keep = (
            pathlib.Path(a.keep)
            if a.keep
            else pathlib.Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscale-trace-overhead-"))
            )
        )
        family, params, cells = measure(a, keep)
    return report(a, family, params, cells, keep if a.keep else None)


def measure(a, keep: pathlib.Path) -> tuple[str, dict, dict]:
    """Both sides in one session, in alternating rounds; the traced side writes round N's
    folder under ``keep``."""
    folders = (str(keep / f"round{n}") for n in itertools.count())

    def notes(res):
        files = sorted(p.name for p in pathlib.Path(res.trace).iterdir()) if res.trace else None
        return {"trace": res.trace, "trace_files": files}

    sides = [
        harness.session_side("untraced", a.repeat, a.warmup, notes=notes),
        harness.session_side(
            "traced", a.repeat, a.warmup, run_kw=lambda _: {"trace": next(folders)}, notes=notes
        ),
    ]
    with gpuscale.session(
        a.backend,
        a.protocol,
        workers=a.workers,
        threads_per_worker=1 if a.smoke else None,
        collection=gpuscale.workloads.get(a.workload).collection,
    ) as s:
        size = "smoke" if a.smoke else s.family.name
        params = SIZES[size if size in SIZES else "cpu"][a.workload]
        study = harness.Study(sides, [(a.workload, params)], key=lambda c: c[0], rounds=a.rounds)
        return s.family.name, params, study.run(env=s)


def report(a, family: str, params: dict, cells: dict, keep: pathlib.Path | None) -> int:
    bad = {k: c["error"] for k, c in cells.items() if "error" in c}
    if bad:
        print(f"trace_overhead: {'; '.join(f'{k}: {e}' for k, e in bad.items())}", file=sys.stderr)
        return 1
    untraced, traced = (cells[f"{a.workload}|{side}"] for side in SIDES)
    rows = [
        {
            "round": i,
            "side": side,
            "median_s": r["median_s"],
            "end_to_end_s": r["wall_s"],
            "valid": r["valid"],
            "trace": r["trace"],
            "trace_files": r["trace_files"],
        }
        for side, c in zip(SIDES, (untraced, traced))
        for i, r in enumerate(c["rounds"])
    ]

    def med(c, key):
        return statistics.median(harness.per_round(c, key))

    out = {
        "workload": a.workload,
        "params": params,
        "backend": a.backend,
        "family": family,
        "rounds": a.rounds,
        "repeat": a.repeat,
        "rows": rows,
        "untraced": {"median_s": med(untraced, "median_s"), "end_to_end_s": med(untraced, "wall_s")},
        "traced": {"median_s": med(traced, "median_s"), "end_to_end_s": med(traced, "wall_s")},
        "compute": harness.ratio(untraced, traced),
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
        f"{out['compute_ratio']:.3f}x ({harness.ratio_text(out['compute'])} over the rounds)",
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
    if a.json:
        harness.write(a.json, "trace_overhead", out)
    return 0 if all(r["valid"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
