"""Every built-in workload (and a few route variants) run once on one cluster, each with its
backend audit: one summary table (valid, clean, tasks by chunk library, foreign prefixes with
their fix, prefixes allowed by design, host <-> device changes), then the full audit table of
every run that was not clean. One cluster for all, so a GPU machine spends its time on the
work, not on starting clusters (``gpuscale run ... --strict-backend`` per workload is the CLI
way; ``tests/test_audit.py`` proves that path).

    python workflows/audit_workloads.py --backend gpu --gpus 0,1 --json audit.json
    python workflows/audit_workloads.py --backend cpu --small          # seconds, CI

Exit 0 when every run was valid and clean.
"""

from __future__ import annotations

import argparse
import sys

import harness

import gpuscale
from gpuscale import workloads
from gpuscale.records import report

VARIANTS = [
    ("svd", {"condition": 1e6}),
    ("svd", {"route": "tsqr", "compute_uv": True}),
    ("groupby", {"split_out": 2}),
    ("groupby", {"rows": 4_000_000, "keys": 2_000_000}),
]
SMALL = {
    "svd": {"rows": 20_000, "cols": 20},
    "groupby": {"rows": 20_000, "keys": 500},
    "transpose_sum": {"n": 400},
    "matmul": {"n": 400},
    "fft": {"rows": 200, "cols": 512},
    "reduction": {"rows": 2000, "cols": 200},
    "slice": {"rows": 2000, "cols": 200},
    "map_overlap": {"n": 512},
    "stencil": {"n": 512},
    "merge": {"rows": 20_000, "right_rows": 5000},
    "shuffle": {"rows": 20_000},
    "lombscargle": {"samples": 500, "freqs": 2000},
}


def cases(small: bool) -> list[tuple[str, dict]]:
    out = [(name, {}) for name in workloads.names()] + VARIANTS
    if not small:
        return out
    shrunk = []
    for name, params in out:
        allowed = set(workloads.get(name).Params.model_fields)
        base = {k: v for k, v in SMALL.get(name, {}).items() if k in allowed}
        extra = {k: v for k, v in params.items() if k not in ("rows", "keys")}
        shrunk.append((name, {**base, **extra}))
    return shrunk


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "auto", gpus=True, workers=True)
    ap.add_argument("--small", action="store_true", help="CI sizes")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)
    kw = {k: v for k, v in (("gpus", a.gpus), ("workers", a.workers)) if v is not None}
    rows: list[dict] = []
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=220)
    with gpuscale.session(backend=a.backend, **kw) as s:
        family = s.family.name
        for name, params in cases(a.small):
            label = " ".join([name] + [f"--{k.replace('_', '-')} {v}" for k, v in params.items()])
            try:
                r = s.run(
                    name,
                    repeat=a.repeat,
                    warmup=1,
                    results_dir=a.results_dir,
                    write=a.results_dir is not None,
                    **params,
                )
            except Exception as e:  # noqa: BLE001 - one failing case must not hide the others
                rows.append(
                    {"case": label, "valid": False, "clean": False, "error": f"{type(e).__name__}: {e}"}
                )
                print(f"[audit] {label}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                continue
            aud = r.audit
            rows.append(
                {
                    "case": label,
                    "valid": r.valid,
                    "clean": aud["clean"],
                    "median_s": r.median_s,
                    "tasks": aud["tasks"],
                    "kinds": aud["kinds"],
                    "foreign": aud["foreign"],
                    "allowed": aud["allowed"],
                    "transfer_count": aud["transfer_count"],
                    "transfer_bytes": aud["transfer_bytes"],
                    "audit": aud,
                }
            )
            print(f"[audit] {label}: valid {r.valid}, clean {aud['clean']}", file=sys.stderr, flush=True)
            if a.json_path:  # what ran so far survives a cut-short run
                harness.write(a.json_path, "audit_workloads", {"family": family, "rows": rows})
    t = Table(
        title=f"backend audit of every workload on the {family} family "
        f"({'CI sizes' if a.small else 'default sizes'}, generate + warm-up + {a.repeat} repeats)",
        title_justify="left",
    )
    for col in (
        "case",
        "valid",
        "clean",
        "tasks",
        "chunks by library",
        "foreign (fix)",
        "allowed by design",
        "family changes",
    ):
        t.add_column(col)
    for r in rows:
        if "error" in r:
            t.add_row(escape(r["case"]), "ERROR", "", "", "", escape(r["error"][:120]), "", "")
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in r["kinds"].items() if n)
        foreign = (
            "; ".join(f"{f['prefix']} {f['tasks']}x {f['type']} ({f['fix']})" for f in r["foreign"]) or "none"
        )
        allowed = "; ".join(f"{x['prefix']} {x['tasks']}x {x['type']}" for x in r["allowed"]) or "none"
        t.add_row(
            escape(r["case"]),
            "yes" if r["valid"] else "NO",
            "yes" if r["clean"] else "NO",
            str(r["tasks"]),
            kinds,
            escape(foreign),
            escape(allowed),
            f"{r['transfer_count']} ({r['transfer_bytes'] / 2**20:.1f} MiB)",
        )
    console.print(t)
    for r in rows:
        if "error" not in r and not r["clean"]:
            console.print(report.audit_table(r["audit"], r["case"]))
    ok = bool(rows) and all(r.get("valid") and r.get("clean") for r in rows)
    if a.json_path:
        harness.write(a.json_path, "audit_workloads", {"family": family, "rows": rows, "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
