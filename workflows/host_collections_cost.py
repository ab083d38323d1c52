"""What the session's conversion of host collections costs: a ``dd.from_pandas`` frame converted
on the workers by the session (``session.host-collections: convert``) vs the same frame
converted by hand with Dask's ``.to_backend(<the family's backend>)`` (``"cudf"`` on the GPU).

Both run on one cluster, alternating, ``--repeat`` times each; each is timed from the call to
``dd.from_pandas`` until its partitions are in memory on the workers (``persist`` + ``wait``),
split into the client's part (building the collection) and the cluster's part. The by-hand run
builds its frame inside ``host_collections.scope(family, "off")`` (Dask's own behaviour), so only
the conversion differs. Both results are checked: every partition of the family's type (the
backend audit, clean for the session; the by-hand run's ``frompandas`` tasks output pandas
partitions, which it lists) and the same column sums as pandas. Prints the medians and the
ratio (session / by hand), and with ``--json`` writes them.

    python workflows/host_collections_cost.py --backend gpu                 # 1 GB on one GPU
    python workflows/host_collections_cost.py --backend cpu --gb 0.02       # proves it runs (no-op)

On the CPU family the session converts nothing (NumPy and pandas are its own) and
``to_backend("pandas")`` returns the frame: the ratio is about 1 and says only that the script
works.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import dask.dataframe as dd
import harness
import numpy as np
import pandas as pd
from distributed import futures_of, wait

import gpuscale
from gpuscale.backends import host_collections

COLUMNS = 5  # key (int64) + 4 float64 columns: 40 bytes a row


def make_frame(nbytes: float, seed: int = 0) -> pd.DataFrame:
    rows = max(1, int(nbytes // (8 * COLUMNS)))
    rng = np.random.default_rng(seed)
    data = {"key": rng.integers(0, 1000, rows, dtype=np.int64)}
    for c in "abcd":
        data[c] = rng.random(rows)
    return pd.DataFrame(data)


def timed(build, client) -> tuple[float, float, object]:
    t0 = time.perf_counter()
    ddf = build()
    t1 = time.perf_counter()
    ddf = client.persist(ddf)
    wait(ddf)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, ddf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_cluster(ap, "gpu", workers=True)
    ap.add_argument("--gb", type=float, default=1.0, help="size of the pandas frame in GB (1e9 bytes)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", dest="json_path", default=None)
    a = ap.parse_args(argv)
    # from_pandas puts the frame in the graph, both ways: distributed says so once per persist
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)

    t0 = time.perf_counter()
    pdf = make_frame(a.gb * 1e9)
    print(
        f"pandas frame: {len(pdf):,} rows x {pdf.shape[1]} columns, {pdf.memory_usage().sum() / 1e9:.3f} GB "
        f"(made in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    expected = pdf[list("abcd")].sum().to_numpy()
    times: dict[str, list[tuple[float, float]]] = {"session": [], "by_hand": []}
    checks: dict[str, dict] = {}
    with gpuscale.session(backend=a.backend, workers=a.workers) as s:
        fam = s.family
        print(
            f"{fam.name} family, {len(s.client.scheduler_info(n_workers=-1)['workers'])} worker(s); "
            f"by hand: .to_backend({fam.dataframe_backend!r})",
            flush=True,
        )

        def session_way():
            return dd.from_pandas(pdf, npartitions=a.partitions)  # converted by the session

        def by_hand():
            with host_collections.scope(fam, "off"):
                ddf = dd.from_pandas(pdf, npartitions=a.partitions)
            return ddf.to_backend(fam.dataframe_backend)

        for i in range(a.repeat):
            order = (
                (("session", session_way), ("by_hand", by_hand))
                if i % 2 == 0
                else (("by_hand", by_hand), ("session", session_way))
            )
            for label, build in order:
                with s.audit(phase=label) as audit:
                    client_s, cluster_s, ddf = timed(build, s.client)
                    sums = np.asarray(gpuscale.backends.to_host(ddf[list("abcd")].sum().compute()))
                    kinds = partition_types(ddf, s.client)
                times[label].append((client_s, cluster_s))
                checks[label] = {
                    "sums_match": bool(np.allclose(sums, expected, rtol=1e-9)),
                    "partition_types": kinds,
                    "audit_clean": audit.summary["clean"],
                    "foreign": [
                        f"{f['prefix']}: {f['tasks']} x {f['type']}" for f in audit.summary["foreign"]
                    ],
                    "conversions": [
                        {k: c[k] for k in ("function", "where", "converted_blocks", "bytes")}
                        for c in audit.summary["conversions"]
                    ],
                }
                print(
                    f"  {label:8} client {client_s:7.3f} s  cluster {cluster_s:7.3f} s  total "
                    f"{client_s + cluster_s:7.3f} s",
                    flush=True,
                )
                del ddf
                time.sleep(0.2)  # let the workers release the partitions

    med = {
        k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in times.items()
    }
    tot = {k: c + w for k, (c, w) in med.items()}
    ratio = tot["session"] / tot["by_hand"] if tot["by_hand"] else float("nan")
    print(
        f"\nmedian of {a.repeat}: session {tot['session']:.3f} s (client {med['session'][0]:.3f} + cluster "
        f"{med['session'][1]:.3f}); by hand {tot['by_hand']:.3f} s (client {med['by_hand'][0]:.3f} + cluster "
        f"{med['by_hand'][1]:.3f}); ratio session / by hand = {ratio:.2f}"
    )
    for label, c in checks.items():
        print(
            f"  {label}: partitions {c['partition_types']}, sums match: {c['sums_match']}, audit clean: "
            f"{c['audit_clean']}{' ' + str(c['foreign']) if c['foreign'] else ''}"
        )
    ok = (
        all(c["sums_match"] for c in checks.values())
        and checks["session"]["audit_clean"]
        and all(
            t.partition(".")[0] == fam.dataframe_module for c in checks.values() for t in c["partition_types"]
        )
    )
    if a.json_path:
        harness.write(
            a.json_path,
            "host_collections_cost",
            {
                "backend": a.backend,
                "family": fam.name,
                "rows": len(pdf),
                "gb": a.gb,
                "partitions": a.partitions,
                "repeat": a.repeat,
                "times_s": times,
                "median_s": {k: {"client": c, "cluster": w, "total": c + w} for k, (c, w) in med.items()},
                "ratio_session_over_by_hand": ratio,
                "checks": checks,
                "ok": ok,
            },
        )
    print("ok" if ok else "NOT OK")
    return 0 if ok else 1


def partition_types(ddf, client) -> dict[str, int]:
    """Partition type -> count of a persisted collection, read on the workers (only the type
    names come back)."""
    names = client.gather(client.map(_type_name, futures_of(ddf), pure=False))
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return out


def _type_name(part) -> str:
    return f"{type(part).__module__.partition('.')[0]}.{type(part).__name__}"


if __name__ == "__main__":
    sys.exit(main())
