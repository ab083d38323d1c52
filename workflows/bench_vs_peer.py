"""gpuscale's defaults against the plain-Dask / dask-cuda way, row by row, in ONE run.

Rows (sizes of the full mode; ``--smoke`` shrinks everything to seconds on 2 CPU cores):

``svd``       2,000,000 x 1,000 float64 in 10 row blocks: ``da.linalg.svd(x)`` (what a user
              writes) vs ``gpuscale.linalg.svd(x)`` on the same array.
``svd-cpu``   the same on a CPU LocalCluster using every core (NumPy chunks).
``groupby``   100 M rows, 1 M keys, 10 partitions, max/count/mean: only the backend switched
              (``df.groupby("key").agg(spec)``), ``split_out=1`` by hand, ``repartition(1)``
              first, cuDF (or pandas) alone on one worker with no Dask graph, and gpuscale.
``p2p``       one 1 GiB block from worker 0 to worker 1 over tcp and over ucx: the transport's
              own bandwidth, with no graph around it.
``transpose`` (x + x.T).sum() of 40000^2 on 2 GPUs, and again on 4 GPUs where there are 4:
              dask-cuda's ``local_cupy`` way (chunks 4000) over tcp and over ucx, and
              gpuscale's default chunking (the ``transpose_sum`` workload's rule) over ucx.
``scaling``   SVD weak scaling, 2,000,000 x 1,000 per GPU, on 1, 2 and 4 GPUs (as many as the
              machine has), over ucx and over tcp: ``da.linalg.svd`` on a LocalCUDACluster vs
              gpuscale; efficiency t1 / tN per side and protocol.
``groupby-multi`` groupby-agg, 400 M rows, 4 M keys, 40 partitions on 4 GPUs (a shuffle between
              GPUs): only the backend switched vs gpuscale's plan vs gpuscale's shuffle plan
              forced; gpuscale's answer is also validated independently by the ``groupby``
              workload on the same data (every count against ``value_counts``, sampled groups
              recomputed with pandas).
``first``     time to first result: ``gpuscale run groupby`` as a fresh process vs a plain
              Dask script doing the same, process start to validated result; and
              ``gpuscale run groupby --scheduler`` against a running ``gpuscale cluster up``.
              gpuscale's tree and every module a client imports are byte-compiled first, as
              an installed package is.

Each side gets one untimed warm-up round, then ``--rounds`` rounds, alternating sides. Before
every timing the previous result is released and the script waits until the scheduler has
forgotten it (a re-timed ``da.linalg.svd`` once read 0.016 s by finding its last result in
memory). Every timing ends with a device synchronize. Both sides' answers are compared (SVD:
every singular value to 1e-8 x s_max; groupby: every group exactly, means to 1e-9). Rows that
need more GPUs than the machine has are skipped with a message.

    python workflows/bench_vs_peer.py                   # on a GPU machine
    python workflows/bench_vs_peer.py --smoke           # CPU, seconds (CI)
    python workflows/bench_vs_peer.py --rows svd,groupby --json out.json
    python workflows/bench_vs_peer.py --rows scaling,transpose,groupby-multi --max-gpus 4

On the CPU (``--smoke``) the multi-GPU rows run on 1, 2 and 4 single-threaded LocalCluster
workers, so the 4-worker logic is exercised in CI; a GPU machine only changes the count.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import math
import os
import pathlib
import py_compile
import re
import statistics
import subprocess
import sys
import tempfile
import time

import dask
import dask.array as da
import dask.dataframe as dd
import harness
import numpy as np
from distributed import wait

import gpuscale
from gpuscale import machine
from gpuscale.backends import to_host
from gpuscale.runs import runner
from gpuscale.workloads import _frames
from gpuscale.workloads.groupby import AGG, make_partition

FULL = {
    "svd": (2_000_000, 1000, 10),
    "groupby": (100_000_000, 1_000_000, 10),
    "transpose": (40_000, 4000),
    "scaling": (2_000_000, 1000),
    "groupby-multi": (400_000_000, 4_000_000, 40),
    "p2p": 2**30,
}
SMOKE = {
    "svd": (40_000, 50, 10),
    "groupby": (400_000, 10_000, 4),
    "transpose": (2_000, 500),
    "scaling": (20_000, 50),
    "groupby-multi": (400_000, 40_000, 8),
    "p2p": 2**22,
}
COUNTS = (1, 2, 4)
"""Worker (GPU) counts of the multi-worker rows; those over the machine's GPUs are skipped."""


# ---------------------------------------------------------------------------------------
def measure(s, sides: dict, rounds: int, host, same, once_over_s: float | None = None) -> list[dict]:
    """Warm up every side, then time ``rounds`` alternating rounds; compare answers.
    ``once_over_s``: a side whose warm-up took longer is timed by that one run (a warm-up
    effect of a second is noise there; plain Dask's naive groupby at 400 M rows takes a minute)."""
    baseline = runner.task_count(s.client)
    times = {k: [] for k in sides}
    answers = {}
    once = set()
    for r in range(rounds + 1):
        for label, build in sides.items():
            if label in once:
                continue
            runner.settle(s.client, baseline)
            t, out = runner.timed(s.client, s.family, build)
            if r:
                times[label].append(t)
            elif once_over_s is not None and t > once_over_s and not label.startswith("gpuscale"):
                times[label].append(t)
                once.add(label)
            if r == rounds or label in once:
                answers[label] = host(out)
            del out
    ref_label = next(k for k in sides if k.startswith("gpuscale"))
    ref = answers[ref_label]
    g = statistics.median(times[ref_label])
    rows = []
    for k, v in times.items():
        row = {
            "side": k,
            "median_s": statistics.median(v),
            "min_s": min(v),
            "times_s": v,
            "runs": len(v),
            "vs_gpuscale": statistics.median(v) / g,
            "agrees": bool(same(answers[k], ref)),
        }
        if not row["agrees"]:
            row["disagreement"] = differ(answers[k], ref)
        rows.append(row)
    return rows


def differ(a, b) -> str:
    """What differs between two answers (for the table's note when they disagree)."""
    if hasattr(a, "index") and hasattr(b, "index"):
        parts = [f"{len(a)} vs {len(b)} groups"]
        if a.index.has_duplicates:
            parts.append(f"{int(a.index.duplicated().sum())} duplicated keys")
        common = a.index.intersection(b.index)
        parts.append(
            f"{len(a.index.difference(b.index))} keys only here, "
            f"{len(b.index.difference(a.index))} only in gpuscale's"
        )
        if len(common) and not a.index.has_duplicates:
            for col in a.columns:
                x, y = a.loc[common, col].to_numpy(dtype=float), b.loc[common, col].to_numpy(dtype=float)
                bad = int((~np.isclose(x, y, rtol=1e-9, atol=0)).sum())
                if bad:
                    parts.append(f"{col}: {bad} groups differ")
        return "; ".join(parts)
    return f"{a!r:.60} vs {b!r:.60}"


def s_host(out):
    return np.asarray(to_host(out.compute()), dtype=np.float64)


def s_same(a, b):
    return a.shape == b.shape and float(np.abs(a - b).max()) <= 1e-8 * float(b[0])


def frame_host(out):
    return to_host(out.compute()).sort_index()


def frame_same(a, b):
    if not a.index.equals(b.index):
        return False
    ints = all((a[c].to_numpy() == b[c].to_numpy()).all() for c in [("int64", "max"), ("int64", "count")])
    return ints and np.allclose(
        a[("float64", "mean")].to_numpy(), b[("float64", "mean")].to_numpy(), rtol=1e-9, atol=0
    )


def scalar_host(out):
    return float(np.asarray(to_host(out.compute())))


def scalar_same(a, b):
    return math.isclose(a, b, rel_tol=1e-9)


# ---------------------------------------------------------------------------------------
def _svd_sides(x):
    return {
        "plain da.linalg.svd": lambda: da.linalg.svd(x)[1],
        "gpuscale linalg.svd": lambda: gpuscale.linalg.svd(x).s,
    }


def row_svd(s, sizes, rounds, name="svd"):
    rows, cols, blocks = sizes["svd"]
    x = da.random.default_rng(0).random((rows, cols), chunks=(math.ceil(rows / blocks), cols))
    _, x = runner.timed(s.client, s.family, lambda: x)
    route = gpuscale.linalg.svd(x).route
    res = measure(s, _svd_sides(x), rounds, s_host, s_same)
    return [
        {
            "row": name,
            "size": f"{rows:,} x {cols:,} float64, {blocks} blocks",
            **r,
            "note": f"gpuscale route {route.value}" if r["side"].startswith("gpuscale") else "",
        }
        for r in res
    ]


def _groupby_data(s, rows, keys, parts):
    fam = s.family
    args = _frames.partition_args(rows, parts, fam.array_module, fam.dataframe_module, keys, 0)
    meta = make_partition((0, 0, 0, fam.array_module, fam.dataframe_module, keys, 0))
    df = dd.from_map(make_partition, args, meta=meta, enforce_metadata=False)
    _, df = runner.timed(s.client, s.family, lambda: df)
    return df


def _alone(parts):
    """The library alone: one frame, one groupby, timed inside the task (device synchronized)."""
    from dask.dataframe.dispatch import concat

    frame = concat(list(parts))
    _sync_here()
    t0 = time.perf_counter()
    out = frame.groupby("key").agg(AGG)
    _sync_here()
    return time.perf_counter() - t0, out


def _sync_here():
    try:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    except Exception:  # noqa: BLE001 - no device here: nothing to wait for
        pass


def row_groupby(s, sizes, rounds):
    rows, keys, parts = sizes["groupby"]
    df = _groupby_data(s, rows, keys, parts)
    gres = gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows)
    sides = {
        "plain, backend switched only": lambda: df.groupby("key").agg(AGG),
        "plain, split_out=1 by hand": lambda: df.groupby("key").agg(AGG, split_out=1),
        "plain, repartition(1) first": lambda: (
            df.repartition(npartitions=1).groupby("key").agg(AGG, split_out=1)
        ),
        "gpuscale groupby_agg": lambda: (
            gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows).result
        ),
    }
    res = measure(s, sides, rounds, frame_host, frame_same)
    # the library alone, on one worker, no graph: concatenate there first, then time only the groupby
    one = s.client.persist(df.repartition(npartitions=1))
    runner.timed(s.client, s.family, lambda: one)
    part = one.to_delayed()[0]
    alone = []
    for _ in range(rounds + 1):
        fut = s.client.compute(dask.delayed(_alone)([part]))
        t, out = fut.result()
        alone.append(t)
        del fut, out
    ref = next(r for r in res if r["side"].startswith("gpuscale"))
    med = statistics.median(alone[1:])
    res.append(
        {
            "side": f"{s.family.dataframe_module} alone (one frame, no Dask)",
            "median_s": med,
            "min_s": min(alone[1:]),
            "times_s": alone[1:],
            "vs_gpuscale": med / ref["median_s"],
            "agrees": True,
        }
    )
    return [
        {
            "row": "groupby",
            "size": f"{rows:,} rows, {keys:,} keys, {parts} partitions",
            **r,
            "note": f"plan {gres.decision.value}" if r["side"].startswith("gpuscale") else "",
        }
        for r in res
    ]


def _transpose(x):
    return (x + x.T).sum()


def _workers(n: int, ngpus: int) -> dict:
    """Session keywords for ``n`` workers: GPUs 0..n-1, or n single-threaded CPU workers."""
    return {"gpus": ",".join(str(i) for i in range(n))} if ngpus else {"workers": n, "threads_per_worker": 1}


def _open(backend, proto, n, ngpus, collection="array"):
    """A session, or the reason there is none (e.g. ucx not installed on the CPU machine)."""
    try:
        return gpuscale.session(backend, proto, collection=collection, **_workers(n, ngpus)), None
    except gpuscale.UserError as e:
        return None, str(e)


def _gpuscale_square_chunk(s, n: int, itemsize: int) -> int:
    """The ``transpose_sum`` workload's own chunk rule on this cluster (not a copy of it)."""
    from gpuscale.workloads import Context
    from gpuscale.workloads._arrays import plan_square_chunk

    return plan_square_chunk(Context(s.family, s.spec, s.client), None, n, n, itemsize)


def row_transpose(sizes, rounds, backend, n_workers, ngpus):
    n, chunk = sizes["transpose"]
    out = []
    for proto in ("tcp", "ucx"):
        sess, why = _open(backend, proto, n_workers, ngpus)
        if sess is None:
            out.append({"row": "transpose", "side": f"{proto}, {n_workers} workers", "skipped": why})
            continue
        with sess as s:
            x = da.random.default_rng(0).random((n, n), chunks=(chunk, chunk))
            _, x = runner.timed(s.client, s.family, lambda: x)
            sides = {f"plain local_cupy chunks {chunk}, {proto}": lambda: _transpose(x)}
            if proto == "ucx":
                side = _gpuscale_square_chunk(s, n, x.dtype.itemsize)
                y = x.rechunk((side, side))
                _, y = runner.timed(s.client, s.family, lambda: y)
                sides = {f"gpuscale chunks {side}, ucx": lambda: _transpose(y), **sides}
            else:
                sides = {"gpuscale (same chunks), tcp": lambda: _transpose(x), **sides}
            for r in measure(s, sides, rounds, scalar_host, scalar_same):
                out.append({"row": "transpose", "size": f"{n:,}^2 float64, {n_workers} workers", **r})
    return out


def _make_block(module: str, nbytes: int, seed: int):
    import importlib

    xp = importlib.import_module(module)
    a = xp.full(nbytes // 8, float(seed))
    _sync_here()
    return a


def _first_element(a) -> float:
    return float(a[:1].sum())


def row_p2p(sizes, rounds, backend, ngpus):
    """One block sent from worker 0 to worker 1, timed from the request to the dependent
    task's answer: the transport's point-to-point bandwidth (the tcp vs ucx question without
    a scheduler-heavy graph around it)."""
    nbytes = sizes["p2p"]
    out = []
    for proto in ("tcp", "ucx"):
        sess, why = _open(backend, proto, 2, ngpus)
        if sess is None:
            out.append({"row": "p2p", "side": proto, "skipped": why})
            continue
        with sess as s:
            w0, w1 = sorted(s.client.scheduler_info(n_workers=-1)["workers"])[:2]
            times = []
            for r in range(rounds + 2):  # two untimed rounds: connections and IPC handles
                f = s.client.submit(_make_block, s.family.array_module, nbytes, r, workers=[w0], pure=False)
                wait(f)
                t0 = time.perf_counter()
                got = s.client.submit(_first_element, f, workers=[w1], allow_other_workers=False).result()
                dt = time.perf_counter() - t0
                assert got == float(r)
                if r >= 2:
                    times.append(dt)
                del f
            med = statistics.median(times)
            out.append(
                {
                    "row": "p2p",
                    "size": f"{nbytes / 2**30:.2f} GiB, worker 0 -> worker 1",
                    "side": f"{s.family.array_module} block over {proto}",
                    "median_s": med,
                    "min_s": min(times),
                    "times_s": times,
                    "vs_gpuscale": None,
                    "agrees": True,
                    "bandwidth_GiBps": nbytes / med / 2**30,
                    "note": f"{nbytes / med / 2**30:.2f} GiB/s",
                }
            )
    return out


def row_scaling(sizes, rounds, backend, counts, ngpus):
    """Weak scaling: the same rows per worker on each count, both sides, each protocol."""
    rows, cols = sizes["scaling"]
    res = []
    for proto in ("ucx", "tcp"):
        by_count: dict[int, list[dict]] = {}
        for n in counts:
            sess, why = _open(backend, proto, n, ngpus)
            if sess is None:
                res.append({"row": "scaling", "side": f"{proto}, {n} workers", "skipped": why})
                break
            with sess as s:
                x = da.random.default_rng(0).random((rows * n, cols), chunks=(math.ceil(rows / 5), cols))
                _, x = runner.timed(s.client, s.family, lambda: x)
                by_count[n] = measure(s, _svd_sides(x), rounds, s_host, s_same)
        if len(by_count) < 2:
            continue
        first, last = min(by_count), max(by_count)
        for i, r1 in enumerate(by_count[first]):
            per = {n: by_count[n][i] for n in by_count}
            eff = {n: r1["median_s"] / per[n]["median_s"] for n in per if n != first}
            rN = per[last]
            res.append(
                {
                    "row": "scaling",
                    "size": f"{rows:,} x {cols:,} per worker, {first} -> {last}",
                    "side": f"{r1['side']}, {proto}",
                    "median_s": rN["median_s"],
                    "min_s": rN["min_s"],
                    "times_s": rN["times_s"],
                    "vs_gpuscale": None,
                    "agrees": all(p["agrees"] for p in per.values()),
                    "efficiency": {str(n): e for n, e in eff.items()},
                    "t_by_workers": {str(n): p["median_s"] for n, p in per.items()},
                    "note": ", ".join(f"t{n} {p['median_s']:.4f} s" for n, p in per.items())
                    + "; "
                    + ", ".join(f"eff {first}->{n} {e:.0%}" for n, e in eff.items()),
                }
            )
    return res


def row_groupby_multi(sizes, rounds, backend, n_workers, ngpus):
    """A groupby whose partials must cross workers: naive switch vs gpuscale (its plan and the
    shuffle plan), answers compared, and gpuscale's validated by the workload on the same data."""
    rows, keys, parts = sizes["groupby-multi"]
    size = f"{rows:,} rows, {keys:,} keys, {parts} partitions, {n_workers} workers"
    sess, why = _open(backend, "ucx", n_workers, ngpus, "dataframe")
    proto = "ucx"
    if sess is None:
        sess, proto = (
            gpuscale.session(backend, "tcp", collection="dataframe", **_workers(n_workers, ngpus)),
            "tcp",
        )
    with sess as s:
        df = _groupby_data(s, rows, keys, parts)
        gres = gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows)
        forced = gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows, split_out=n_workers)
        forced_shuffle = forced.decision.numbers["shuffle_method"]
        sides = {
            "plain, backend switched only": lambda: df.groupby("key").agg(AGG),
            f"gpuscale groupby_agg ({gres.decision.value})": lambda: (
                gpuscale.dataframe.groupby_agg(df, "key", AGG, groups=keys, rows=rows).result
            ),
            f"gpuscale shuffle plan forced (split_out={n_workers}, {forced_shuffle})": lambda: (
                gpuscale.dataframe.groupby_agg(
                    df, "key", AGG, groups=keys, rows=rows, split_out=n_workers
                ).result
            ),
        }
        res = measure(s, sides, rounds, frame_host, frame_same)
        sides = df = None  # release the data before the workload makes its own
        rec = s.run("groupby", rows=rows, keys=keys, partitions=parts, repeat=1, warmup=0, write=False)
        checks = "; ".join(f"{c['name']}: {'ok' if c['ok'] else 'FAIL'}" for c in rec.validation["checks"])
    out = []
    for r in res:
        note = ""
        if r["side"].startswith("gpuscale groupby_agg"):
            method = rec.validation["method"]
            note = f"{proto}; plan: {gres.decision.rule}; independent check ({method}): {checks}"
            r["agrees"] = r["agrees"] and rec.valid
        out.append({"row": "groupby-multi", "size": size, **r, "note": note})
    return out


PLAIN_SCRIPT = """
import sys, time
t0 = time.perf_counter()
import dask, dask.dataframe as dd
from distributed import Client, LocalCluster, wait
sys.path.insert(0, {root!r})
from gpuscale.workloads.groupby import make_partition, AGG
if __name__ == "__main__":
    backend = {backend!r}
    if backend == "gpu":
        from dask_cuda import LocalCUDACluster as C
        kw = {{}}
        mods = ("cupy", "cudf")
    else:
        C = LocalCluster
        kw = {{}}  # distributed's own split of the cores, as a user writes it
        mods = ("numpy", "pandas")
    with C(**kw) as cluster, Client(cluster) as client:
        rows, keys, parts = {rows}, {keys}, {parts}
        args = [(i, i * (rows // parts), rows // parts, *mods, keys, 0) for i in range(parts)]
        df = dd.from_map(make_partition, args, meta=make_partition((0, 0, 0, *mods, keys, 0)))
        df = df.persist(); wait(df)
        res = df.groupby("key").agg(AGG, split_out=1).compute()
        assert int(res[("int64", "count")].sum()) == rows
        print(time.perf_counter() - t0)
"""


CLIENT_MODULES = "gpuscale.cli.run_callback", "gpuscale.runs.remote", "distributed"


def _compile_client_modules(root: str) -> int:
    """Byte-compile the sources of every module a ``gpuscale run --scheduler`` client imports
    (found by importing :data:`CLIENT_MODULES` in a fresh process), as an installed package
    has them: an image installed without byte code compiles them at every start, which
    measures the image, not gpuscale. Returns how many were compiled; unwritable ones are left."""
    code = (
        "import importlib, sys\n"
        f"for m in {CLIENT_MODULES!r}: importlib.import_module(m)\n"
        "print('\\n'.join(f for f in (getattr(m, '__file__', None) for m in list(sys.modules.values())) "
        "if f and f.endswith('.py')))"
    )
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    done = 0
    for source in p.stdout.split():
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(source, doraise=True)
            done += 1
    return done


CLIENT_IMPORTS = (
    "distributed",
    "rmm",
    "distributed_ucxx",
    "pynvml",
    "dask",
    "numpy",
    "pydantic",
    "gpuscale.config",
    "gpuscale.api",
)
"""The modules whose import a client's first call reports (``client_imports_s``): distributed,
the GPU modules distributed imports wherever they are installed, and gpuscale's heaviest."""


def import_split(stderr: str) -> dict[str, float]:
    """Seconds of ``python -X importtime``'s imports (cumulative, the first import of each):
    ``total`` over the top-level ones, then each of :data:`CLIENT_IMPORTS` imported."""
    split: dict[str, float] = {"total": 0.0}
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", line)
        if not m:
            continue
        seconds, depth, name = int(m[1]) / 1e6, len(m[2]), m[3]
        if depth == 1:
            split["total"] += seconds
        if name in CLIENT_IMPORTS and name not in split:
            split[name] = seconds
    return {k: round(v, 4) for k, v in split.items()}


def row_first(sizes, backend, smoke, rounds=1):
    """Process start to validated result: the plain script and a fresh ``gpuscale run``, in
    ``rounds`` alternating rounds (each call a fresh process), then against a running cluster."""
    rows, keys, parts = sizes["groupby"]
    out = []
    with tempfile.TemporaryDirectory() as d:
        script = pathlib.Path(d) / "plain_first.py"
        root = str(pathlib.Path(__file__).resolve().parent.parent)
        # both sides import gpuscale from this tree: byte-compiled first, as `pip install .` leaves
        # it (else each process compiles it again where PYTHONDONTWRITEBYTECODE is set), and so
        # is every module a client imports, wherever it is installed
        compileall.compile_dir(str(pathlib.Path(root) / "gpuscale"), quiet=1)
        _compile_client_modules(root)
        script.write_text(
            PLAIN_SCRIPT.format(
                root=root, backend="gpu" if backend == "gpu" else "cpu", rows=rows, keys=keys, parts=parts
            )
        )
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        cmds = {
            "plain Dask script (process start to result)": [sys.executable, str(script)],
            "gpuscale run groupby --repeat 1 --warmup 0 (process start to validated result)": [
                sys.executable,
                "-m",
                "gpuscale",
                "run",
                "groupby",
                "--backend",
                backend,
                "--rows",
                str(rows),
                "--keys",
                str(keys),
                "--partitions",
                str(parts),
                "--repeat",
                "1",
                "--warmup",
                "0",
                "--json",
                "--results-dir",
                d,
            ],
        }
        gpuscale_cmd = cmds[next(k for k in cmds if k.startswith("gpuscale"))]

        def call(label, cmd) -> tuple[float, bool, str]:
            """One fresh process: (seconds, exit 0, what its record says of its time)."""
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=d, timeout=600)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                return wall, False, (p.stderr.strip().splitlines() or [""])[-1][:120]
            if not label.startswith("gpuscale"):
                return wall, True, ""
            rec = json.loads(p.stdout)
            runner = rec["info"].get("runner", {})
            where = ""
            if runner.get("where") == "cluster":
                trip, connect = runner.get("round_trip_s", 0), runner.get("client_connect_s", 0)
                checked = (rec["cluster"].get("preflight") or {}).get("seconds", 0)
                ready, close = runner.get("client_age_s"), runner.get("client_close_s", 0)
                rest = wall - trip - connect - checked - close - (ready or 0)
                if ready is None:
                    before, after = "", "process start, imports, the record"
                else:
                    before, after = f"process start to connecting {ready:.2f} s, ", "the record, exit"
                where = (
                    f"runner in the cluster {runner.get('runner_s', 0):.2f} s of {trip:.2f} s round "
                    f"trip; the client: {before}connect {connect:.2f} s, preflight {checked:.2f} s, "
                    f"close {close:.2f} s, the rest ({after}) {rest:.2f} s; "
                )
            return (
                wall,
                True,
                (
                    f"{where}start-up {rec['startup_s']:.2f} s, generate {rec['generate_s']:.2f} s, "
                    f"first run {rec['times_s'][0]:.3f} s, validate {rec['validate_s']:.2f} s"
                ),
            )

        def imports(cmd) -> dict[str, float]:
            """One more call under ``-X importtime``: its imports' seconds (``total``: every
            top-level import) and those of the modules named in :data:`CLIENT_IMPORTS`."""
            argv = [cmd[0], "-X", "importtime", *cmd[1:]]
            p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=d, timeout=600)
            return import_split(p.stderr)

        def row(side, calls, median_s):
            out.append(
                {
                    "row": "first",
                    "backend": backend,
                    "size": f"{rows:,} rows, {keys:,} keys",
                    "side": side,
                    "median_s": median_s,
                    "min_s": min(c[0] for c in calls),
                    "times_s": [c[0] for c in calls],
                    "vs_gpuscale": None,
                    "agrees": all(c[1] for c in calls),
                    "note": calls[-1][2],
                }
            )

        def timed_run(label, cmd, times=1):
            calls = [call(label, cmd) for _ in range(times)]
            row(label, calls, calls[0][0])
            if times > 1:
                row(
                    label.replace("first call", f"median of {times} calls"),
                    calls,
                    statistics.median(c[0] for c in calls),
                )

        # the fresh processes first, in alternating rounds: a running cluster holds its GPUs'
        # memory (the RMM pool), which a second cluster on the same GPUs cannot have
        fresh: dict[str, list] = {label: [] for label in cmds}
        for i in range(rounds):
            for label in list(cmds) if i % 2 == 0 else list(reversed(cmds)):
                fresh[label].append(call(label, cmds[label]))
        for label, calls in fresh.items():
            side = label if rounds == 1 else label.replace(")", f"; median of {rounds} rounds)")
            row(side, calls, statistics.median(c[0] for c in calls))
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuscale",
                "cluster",
                "up",
                "--backend",
                backend,
                "--for",
                "dataframe",
                "--json",
                "--scheduler-file",
                "scheduler.json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=d,
        )
        address = None
        for line in up.stdout:  # the JSON line; libraries may print before it
            try:
                address = json.loads(line)["scheduler"]
                break
            except (ValueError, KeyError, TypeError):
                continue
        if address:
            timed_run(
                "gpuscale run groupby --scheduler, first call (a running `gpuscale cluster up`, runner "
                "in the cluster, the default; process start to validated result)",
                [*gpuscale_cmd, "--scheduler-file", "scheduler.json"],
                times=3,
            )
            split = imports([*gpuscale_cmd, "--scheduler-file", "scheduler.json"])
            said = ", ".join(f"{k} {v:.2f}" for k, v in split.items() if k != "total")
            for r in out[-2:]:
                r["client_imports_s"] = split
                r["note"] += f"; the client's imports {split['total']:.2f} s ({said}; cumulative)"
            timed_run(
                "gpuscale run groupby --scheduler --no-in-cluster (runner in this process; process "
                "start to validated result)",
                [*gpuscale_cmd, "--scheduler-file", "scheduler.json", "--no-in-cluster"],
            )
        if address:
            subprocess.run(
                [sys.executable, "-m", "gpuscale", "cluster", "down", "--scheduler-file", "scheduler.json"],
                env=env,
                cwd=d,
                capture_output=True,
                timeout=60,
            )
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
        if not address:
            out.append(
                {"row": "first", "side": "gpuscale run --scheduler", "skipped": "cluster up gave no address"}
            )
    return out


# ---------------------------------------------------------------------------------------
def _med(results, row, prefix, size_has=""):
    for r in results:
        if (
            r.get("row") == row
            and "skipped" not in r
            and r["side"].startswith(prefix)
            and size_has in r.get("size", "")
        ):
            return r["median_s"]
    return None


def targets(results) -> list[dict]:
    """The performance targets, read off this run's rows (absent rows give no line). Absolute-time
    targets are H200 figures; the ratios hold on any GPU."""
    out = []

    def add(what, value, ok, target):
        if value is not None:
            out.append({"target": what, "value": value, "ok": bool(ok), "limit": target})

    g = _med(results, "svd", "gpuscale")
    p = _med(results, "svd", "plain")
    add("svd: gpuscale time (H200 target)", g, g is not None and g <= 0.15, "<= 0.15 s")
    add("svd: plain / gpuscale", p and g and p / g, p and g and p / g >= 6, ">= 6x")
    g, p = _med(results, "svd-cpu", "gpuscale"), _med(results, "svd-cpu", "plain")
    add("svd-cpu: plain / gpuscale", p and g and p / g, p and g and p / g >= 4, ">= 4x")
    g = _med(results, "groupby", "gpuscale")
    naive = _med(results, "groupby", "plain, backend switched")
    alone = next(
        (r["median_s"] for r in results if r.get("row") == "groupby" and "alone" in r.get("side", "")), None
    )
    add("groupby: gpuscale time (H200 target)", g, g is not None and g <= 0.06, "<= 0.06 s")
    add(
        "groupby: naive switch / gpuscale",
        naive and g and naive / g,
        naive and g and naive / g >= 40,
        ">= 40x",
    )
    add(
        "groupby: gpuscale / library alone",
        alone and g and g / alone,
        alone and g and g / alone <= 3,
        "<= 3x",
    )
    for n in (2, 4):
        tag = f", {n} workers"
        tcp = _med(results, "transpose", "plain local_cupy", tag)
        ucx = None
        for r in results:
            if (
                r.get("row") == "transpose"
                and "skipped" not in r
                and r["size"].endswith(tag)
                and r["side"].startswith("plain")
                and r["side"].endswith("ucx")
            ):
                ucx = r["median_s"]
        gs = _med(results, "transpose", "gpuscale chunks", tag)
        add(
            f"transpose {n} workers: tcp / ucx (same chunks)",
            tcp and ucx and tcp / ucx,
            tcp and ucx and tcp / ucx >= 8,
            ">= 8x",
        )
        add(
            f"transpose {n} workers: gpuscale / local_cupy ucx",
            gs and ucx and gs / ucx,
            gs and ucx and gs / ucx <= 0.7,
            "<= 0.7x",
        )
    for r in results:
        if r.get("row") == "scaling" and "skipped" not in r and r["side"].startswith("gpuscale"):
            for n, e in r["efficiency"].items():
                add(f"scaling {r['side']}: efficiency 1 -> {n}", e, e >= 0.9, ">= 90%")
    bw = {
        r["side"].rsplit(" ", 1)[-1]: r["bandwidth_GiBps"]
        for r in results
        if r.get("row") == "p2p" and "skipped" not in r
    }
    if {"tcp", "ucx"} <= set(bw):
        add("p2p: ucx / tcp bandwidth, one block", bw["ucx"] / bw["tcp"], bw["ucx"] / bw["tcp"] >= 8, ">= 8x")
    plain = _med(results, "first", "plain Dask script")
    fresh = _med(results, "first", "gpuscale run groupby --repeat")
    warm = _med(results, "first", "gpuscale run groupby --scheduler, first call")
    cpu = any(r.get("row") == "first" and r.get("backend") == "cpu" for r in results)
    limit = 1.2 if cpu else 1.0
    add(
        f"first result ({'CPU' if cpu else 'GPU'}): fresh gpuscale / plain script",
        fresh and plain and fresh / plain,
        fresh and plain and fresh / plain <= limit,
        f"<= {limit:.2f}x",
    )
    add(
        "first result: gpuscale against a running cluster (time)",
        warm,
        warm is not None and warm <= 1.5,
        "<= 1.5 s",
    )
    for r in results:
        if r.get("row") == "groupby-multi" and r["side"].startswith("gpuscale groupby_agg"):
            add("groupby-multi: gpuscale valid and agrees", 1.0 if r["agrees"] else 0.0, r["agrees"], "valid")
    return out


def describe_device(ngpus: int) -> str:
    gpus = machine.gpus()
    return f"{ngpus} x {gpus[0]['name']}" if gpus and ngpus else machine.cpu()["model"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="CPU-sized inputs (CI)")
    ap.add_argument("--rows", default="svd,svd-cpu,groupby,p2p,transpose,scaling,groupby-multi,first")
    ap.add_argument(
        "--max-gpus",
        type=int,
        default=None,
        help="use at most this many GPUs (default: all; on the CPU: 4 workers)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu-rounds", type=int, default=1, help="rounds for the slow svd-cpu row")
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args(argv)
    wanted = a.rows.split(",")
    sizes = SMOKE if a.smoke else FULL
    ngpus = len(machine.gpus())
    if a.max_gpus is not None:
        ngpus = min(ngpus, a.max_gpus)
    have = ngpus if ngpus else ((a.max_gpus or max(COUNTS)) if a.smoke else 0)
    counts = [n for n in COUNTS if n <= have]
    gpu_backend = "gpu" if ngpus else "cpu"
    results: list[dict] = []
    skipped: list[str] = []
    if ngpus == 0 and not a.smoke:
        skipped.append("no GPU here: the GPU rows run on the CPU family (use --smoke for CI sizes)")

    def save(goals=None):
        """The JSON so far, rewritten after every row: a run cut short keeps what it measured."""
        if a.json_path:
            harness.write(
                a.json_path,
                "bench_vs_peer",
                {
                    "device": describe_device(ngpus),
                    "versions": machine.versions(),
                    "smoke": a.smoke,
                    "complete": goals is not None,
                    "results": results,
                    "skipped": skipped,
                    "targets": goals or [],
                },
            )

    def note(rows):
        results.extend(rows)
        for r in rows:
            if "skipped" not in r:
                print(
                    f"[bench] {r['row']} {r['side']}: median {r['median_s']:.4f} s, agrees {r['agrees']}",
                    file=sys.stderr,
                    flush=True,
                )
        save()

    if {"svd", "groupby"} & set(wanted):
        kw = {"gpus": "0"} if ngpus else {"workers": 2, "threads_per_worker": 1}
        with gpuscale.session(gpu_backend, **kw) as s:
            if "svd" in wanted:
                note(row_svd(s, sizes, a.rounds))
            if "groupby" in wanted:
                note(row_groupby(s, sizes, a.rounds))
    if "svd-cpu" in wanted and (ngpus or a.smoke):
        with gpuscale.session("cpu", collection="array") as s:
            note(row_svd(s, sizes, a.cpu_rounds, name="svd-cpu"))

    def need(row, n):
        if have >= n:
            return True
        skipped.append(f"{row}: needs {n} GPUs, this machine has {ngpus}")
        return False

    if "p2p" in wanted and need("p2p", 2):
        note(row_p2p(sizes, a.rounds, gpu_backend, ngpus))
    if "transpose" in wanted:
        for n in (2, 4):
            if need(f"transpose on {n}", n):
                note(row_transpose(sizes, a.rounds, gpu_backend, n, ngpus))
    if "scaling" in wanted and need("scaling", 2):
        note(row_scaling(sizes, a.rounds, gpu_backend, counts, ngpus))
    if "groupby-multi" in wanted and need("groupby-multi", 4):
        note(row_groupby_multi(sizes, a.rounds, gpu_backend, 4, ngpus))
    if "first" in wanted:
        note(row_first(sizes, gpu_backend, a.smoke, a.rounds))

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    device = describe_device(ngpus)
    v = machine.versions()
    t = Table(
        title=f"gpuscale vs plain Dask on {device} "
        f"(dask {v.get('dask')}, dask-cuda {v.get('dask-cuda')}, cudf {v.get('cudf')}, "
        f"cupy {v.get('cupy')})",
        title_justify="left",
    )
    for col in ("row", "size", "side", "median", "min", "vs gpuscale", "agrees", "note"):
        t.add_column(col)
    for r in results:
        if "skipped" in r:
            skipped.append(f"{r['row']} {r['side']}: {r['skipped']}")
            continue
        t.add_row(
            r["row"],
            r.get("size", ""),
            escape(r["side"]),
            f"{r['median_s']:.4f} s",
            f"{r['min_s']:.4f} s",
            "" if r["vs_gpuscale"] is None else f"{r['vs_gpuscale']:.2f}x",
            "yes" if r["agrees"] else "NO",
            escape(r.get("note", "") or (f"disagrees: {r['disagreement']}" if r.get("disagreement") else "")),
        )
    console = Console(width=220)
    console.print(t)
    goals = targets(results)
    if goals:
        tt = Table(
            title="targets (absolute times: H200 figures; ratios: any GPU; "
            "CPU smoke runs only check plumbing)",
            title_justify="left",
        )
        for col in ("target", "measured", "limit", "met"):
            tt.add_column(col)
        for g in goals:
            v = g["value"]
            shown = (
                f"{v:.4f} s"
                if "time" in g["target"]
                else f"{v:.0%}"
                if "efficiency" in g["target"]
                else ("valid" if v else "INVALID")
                if g["limit"] == "valid"
                else f"{v:.2f}x"
            )
            tt.add_row(escape(g["target"]), shown, escape(g["limit"]), "yes" if g["ok"] else "NO")
        console.print(tt)
    for msg in skipped:
        console.print(f"skipped: {msg}", markup=False)
    save(goals)
    ran = [r for r in results if "skipped" not in r]
    return 0 if ran and all(r["agrees"] for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
