"""What the backend audit costs: each workload with and without the audit (``Session.run(...,
audit=False)``), in one process and on one cluster per workload, alternating which side goes
first in every round.

Per workload, two ratios (audited / not audited, medians over the rounds):

* ``compute``: the runner's median timed repeat (``Result.median_s``): the per-task cost of the
  audit's worker plugin (its ``transition`` hook) inside the timed work; the target is under 3%
  (ratio < 1.03) on svd and groupby;
* ``end to end``: the whole ``Session.run`` call, which for the audited side also includes
  registering the plugin and two ``client.run`` collections (outside the timed repeats).

Also, with no cluster: the hook's own cost per call (``hook``), timed on the worker-side
plugin with real ``TaskState`` objects (a task to memory with two dependencies, and any other
transition): deterministic where the ratios above carry the machine's noise.

``transpose_sum-small-chunks`` (many tiny tasks) is a stress case for the per-task cost, shown
but not part of the target (run it with ``--workloads svd,groupby,transpose_sum-small-chunks``).

    python workflows/audit_overhead.py --smoke                  # CPU, seconds
    python workflows/audit_overhead.py --backend cpu --rounds 7 --json out.json
    python workflows/audit_overhead.py --backend gpu --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import harness

import gpuscale

SIZES = {
    "smoke": {
        "svd": ("svd", {"rows": 100_000, "cols": 50}),
        "groupby": ("groupby", {"rows": 200_000, "keys": 1_000}),
        "transpose_sum-small-chunks": ("transpose_sum", {"n": 1_000, "chunk": 50}),
    },
    "cpu": {
        "svd": ("svd", {"rows": 1_000_000, "cols": 100}),
        "groupby": ("groupby", {"rows": 4_000_000, "keys": 100_000}),
        "transpose_sum-small-chunks": ("transpose_sum", {"n": 4_000, "chunk": 100}),
    },
    "gpu": {
        "svd": ("svd", {"rows": 2_000_000, "cols": 1000}),
        "groupby": ("groupby", {"rows": 100_000_000, "keys": 1_000_000}),
        "transpose_sum-small-chunks": ("transpose_sum", {"n": 20_000, "chunk": 500}),
    },
}
TARGET = 1.03


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", protocol=True, workers=True)
    ap.add_argument(
        "--workloads", default="svd,groupby", help=f"comma-separated, of: {', '.join(SIZES['cpu'])}"
    )
    ap.add_argument(
        "--size",
        choices=sorted(SIZES),
        default=None,
        help="sizes (default: smoke with --smoke, else the family's: cpu or gpu)",
    )
    harness.add_common(ap, repeat=3, warmup=1, rounds=5)
    ap.add_argument("--smoke", action="store_true", help="CPU, small sizes, 2 rounds: a quick check")
    a = ap.parse_args(argv)
    if a.smoke:
        a.backend = "cpu" if a.backend == "auto" else a.backend
        a.workers = a.workers or 2
        a.rounds = min(a.rounds, 2)
        a.repeat = min(a.repeat, 2)
        a.size = a.size or "smoke"
    names = [w.strip() for w in a.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in SIZES["cpu"]]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {', '.join(SIZES['cpu'])}")
    cases = [measure(a, name) for name in names]
    return report(a, cases, hook_cost())


def hook_cost(calls: int = 200_000) -> dict:
    """Microseconds per call of AuditPlugin.transition: a task to memory (two dependencies of
    the same family) and any other transition (returns at once)."""
    import types

    import numpy as np
    from distributed.worker_state_machine import TaskState

    from gpuscale.audit import AuditPlugin

    deps = []
    for i in range(2):
        d = TaskState(key=("dep-0", i))
        d.type, d.nbytes = np.ndarray, 1000
        deps.append(d)
    tasks = {}
    for i in range(1000):
        t = TaskState(key=("add-0", i))
        t.type, t.nbytes, t.dependencies = np.ndarray, 1000, set(deps)
        tasks[t.key] = t
    plugin = AuditPlugin({"numpy": "cpu", "pandas": "cpu", "cupy": "gpu", "cudf": "gpu"})
    plugin.setup(types.SimpleNamespace(state=types.SimpleNamespace(tasks=tasks)))
    keys = list(tasks)
    rounds = max(1, calls // len(keys))
    out = {}
    for name, start, finish in (("memory_us", "executing", "memory"), ("other_us", "ready", "executing")):
        t0 = time.perf_counter()
        for _ in range(rounds):
            for k in keys:
                plugin.transition(k, start, finish)
        out[name] = (time.perf_counter() - t0) / (rounds * len(keys)) * 1e6
    return out


def measure(a, case: str) -> dict:
    """Both sides on one session, in alternating rounds."""
    workload = SIZES["cpu"][case][0]
    collection = gpuscale.workloads.get(workload).collection

    def notes(res):
        return {
            "audit_tasks": res.audit["tasks"] if res.audit else None,
            "audit_clean": res.audit["clean"] if res.audit else None,
        }

    sides = [
        harness.session_side(name, a.repeat, a.warmup, run_kw=lambda _, on=on: {"audit": on}, notes=notes)
        for name, on in (("plain", False), ("audited", True))
    ]
    with gpuscale.session(
        a.backend,
        a.protocol,
        workers=a.workers,
        collection=collection,
        threads_per_worker=1 if a.smoke else None,
    ) as s:
        size = a.size or (s.family.name if s.family.name in SIZES else "cpu")
        params = SIZES[size][case][1]
        study = harness.Study(sides, [(workload, params)], key=lambda _: case, rounds=a.rounds)
        cells = study.run(env=s)
        family = s.family.name
        workers = len(s.client.scheduler_info(n_workers=-1)["workers"])
    bad = {k: c["error"] for k, c in cells.items() if "error" in c}
    if bad:
        raise SystemExit(f"audit_overhead: {'; '.join(f'{k}: {e}' for k, e in bad.items())}")
    plain, audited = cells[f"{case}|plain"], cells[f"{case}|audited"]
    rows = [
        {
            "round": i,
            "audited": on,
            "median_s": r["median_s"],
            "end_to_end_s": r["wall_s"],
            "valid": r["valid"],
            "audit_tasks": r["audit_tasks"],
            "audit_clean": r["audit_clean"],
        }
        for on, c in ((False, plain), (True, audited))
        for i, r in enumerate(c["rounds"])
    ]

    def med(c, key):
        return statistics.median(harness.per_round(c, key))

    out = {
        "case": case,
        "workload": workload,
        "params": params,
        "family": family,
        "workers": workers,
        "rows": rows,
        "plain": {"median_s": med(plain, "median_s"), "end_to_end_s": med(plain, "wall_s")},
        "audited": {"median_s": med(audited, "median_s"), "end_to_end_s": med(audited, "wall_s")},
        "tasks_per_run": statistics.median(x["audit_tasks"] for x in rows if x["audited"])
        / (a.warmup + a.repeat + 1),
        "compute": harness.ratio(plain, audited),
    }
    out["compute_ratio"] = out["audited"]["median_s"] / out["plain"]["median_s"]
    out["end_to_end_ratio"] = out["audited"]["end_to_end_s"] / out["plain"]["end_to_end_s"]
    out["clean"] = all(x["audit_clean"] for x in rows if x["audited"])
    return out


def report(a, cases: list[dict], hook: dict) -> int:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"backend audit overhead: medians of {a.rounds} alternating round(s), {a.repeat} timed "
        f"repeat(s) each (target: compute ratio < {TARGET} on svd and groupby)",
        title_justify="left",
    )
    for col in (
        "case",
        "params",
        "family",
        "tasks / run",
        "compute plain",
        "compute audited",
        "ratio",
        "end to end plain",
        "end to end audited",
        "ratio",
        "audit",
    ):
        t.add_column(col)
    for c in cases:
        t.add_row(
            c["case"],
            ", ".join(f"{k}={v}" for k, v in c["params"].items()),
            c["family"],
            f"{c['tasks_per_run']:.0f}",
            f"{c['plain']['median_s'] * 1e3:.1f} ms",
            f"{c['audited']['median_s'] * 1e3:.1f} ms",
            f"{c['compute_ratio']:.3f}x ({harness.ratio_text(c['compute'])})",
            f"{c['plain']['end_to_end_s']:.3f} s",
            f"{c['audited']['end_to_end_s']:.3f} s",
            f"{c['end_to_end_ratio']:.3f}x",
            "clean" if c["clean"] else "FOREIGN CHUNKS",
        )
    Console(width=200).print(t)
    Console(width=200).print(
        f"hook: {hook['memory_us']:.2f} us per task that reaches memory (two dependencies), "
        f"{hook['other_us']:.3f} us per other transition (a task makes about five)"
    )
    out = {
        "backend": a.backend,
        "rounds": a.rounds,
        "repeat": a.repeat,
        "target_ratio": TARGET,
        "cases": cases,
        "hook": hook,
    }
    if a.json:
        harness.write(a.json, "audit_overhead", out)
    return 0 if all(x["valid"] is not False for c in cases for x in c["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
