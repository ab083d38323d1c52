"""GPU tests: skipped (by conftest) unless CuPy + dask-cuda + a visible GPU are present.
Run only these on a GPU machine with ``pytest -m gpu``."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest

import gpuscale
from gpuscale import machine
from gpuscale.routes import linalg

pytestmark = pytest.mark.gpu

needs_ucx = pytest.mark.skipif(
    importlib.util.find_spec("distributed_ucxx") is None, reason="distributed-ucxx is not installed"
)


def assert_gpu_record(r, workers: int = 1):
    assert r.family == "gpu"
    assert r.valid, r.validation
    assert r.cluster["cls"] == "dask_cuda.LocalCUDACluster"
    assert r.cluster["rmm"]["external_libs"] == ["cupy"]
    assert r.cluster["kwargs"]["rmm_allocator_external_lib_list"] == ["cupy"]
    assert r.cluster["running"]["workers"] == workers
    assert "cupy" in r.knobs["pre_import"]
    assert r.path and pathlib.Path(r.path).is_file()
    d = json.loads(pathlib.Path(r.path).read_text())
    assert d["family"] == "gpu" and d["hardware"]["gpus"]


def test_svd_cupy_over_tcp(tmp_path):
    r = gpuscale.run(
        "svd",
        backend="cupy",
        protocol="tcp",
        cluster_settings={"gpus": "0"},
        rows=200_000,
        cols=50,
        repeat=1,
        warmup=0,
        results_dir=str(tmp_path),
    )
    assert_gpu_record(r)
    assert r.backend == "cupy" and r.protocol == "tcp"
    assert r.cluster["gpus"] == [0]
    assert r.validation["method"]


def test_svd_cupy_known_spectrum_and_uv(tmp_path):
    r = gpuscale.run(
        "svd",
        backend="cupy",
        protocol="tcp",
        cluster_settings={"gpus": "0"},
        rows=100_000,
        cols=40,
        condition=1e7,
        compute_uv=True,
        repeat=1,
        warmup=0,
        results_dir=str(tmp_path),
    )
    assert_gpu_record(r)
    assert r.info["route"]["name"] == "cholqr2"


def test_groupby_cudf(tmp_path):
    r = gpuscale.run(
        "groupby",
        backend="cudf",
        protocol="tcp",
        cluster_settings={"gpus": "0"},
        rows=1_000_000,
        keys=1_000,
        repeat=1,
        warmup=0,
        results_dir=str(tmp_path),
    )
    assert_gpu_record(r)
    assert r.backend == "cudf"
    assert r.knobs["shuffle_method"] == "tasks"


def test_groupby_cudf_split_out_uses_the_task_shuffle(tmp_path):
    r = gpuscale.run(
        "groupby",
        backend="cudf",
        cluster_settings={"gpus": "0"},
        rows=1_000_000,
        keys=10_000,
        split_out=2,
        repeat=1,
        warmup=0,
        results_dir=str(tmp_path),
    )
    assert_gpu_record(r)
    assert r.choices["shuffle_method"]["value"] == "tasks"


def test_linalg_svd_on_cupy_chunks():
    cupy = pytest.importorskip("cupy")
    xm = np.random.default_rng(0).standard_normal((20_000, 30))
    x = da.from_array(cupy.asarray(xm), chunks=(5_000, 30))
    ref = np.linalg.svd(xm, compute_uv=False)
    for route in ("auto", "gram", "cholqr2", "tsqr"):
        res = linalg.svd(x, route=route, compute_uv=True)
        assert type(res.s._meta).__module__.startswith("cupy"), route
        assert type(res.u._meta).__module__.startswith("cupy"), route
        s, u, vt = (cupy.asnumpy(a) for a in dask.compute(res.s, res.u, res.vt))
        assert np.abs(s - ref).max() / ref[0] <= 1e-10, route
        assert np.linalg.norm((u * s) @ vt - xm) / np.linalg.norm(xm) <= 1e-10, route


def test_cli_run_svd_on_gpu(tmp_path):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "run",
            "svd",
            "--backend",
            "gpu",
            "--gpus",
            "0",
            "--rows",
            "200000",
            "--cols",
            "50",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--json",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["family"] == "gpu" and d["valid"] is True


def run_cli_json(tmp_path, *args):
    """One `gpuscale run ... --json` in its own process (UCX is set up once per process, so
    each UCX cluster gets a fresh one, as it does for a user)."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "run",
            *args,
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--json",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@needs_ucx
def test_groupby_over_ucx(tmp_path):
    d = run_cli_json(
        tmp_path,
        "groupby",
        "--backend",
        "gpu",
        "--protocol",
        "ucx",
        "--gpus",
        "0",
        "--rows",
        "1000000",
        "--keys",
        "1000",
    )
    assert d["valid"] is True and d["family"] == "gpu" and d["protocol"] == "ucx"
    assert d["cluster"]["running"]["scheduler"].startswith("ucx")
    assert d["cluster"]["rmm"]["external_libs"] == ["cupy"]


_SESSIONS_BACK_TO_BACK = """
import json, os
import numpy as np
import dask.dataframe as dd
import pynvml
import gpuscale
from gpuscale.errors import UserError

def holders(pids):  # which of pids hold GPU 0 (other processes there are not the session's)
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return sorted({p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)} & pids)

def one(protocol):
    try:
        with gpuscale.session(backend="gpu", gpus="0", protocol=protocol) as s:
            workers = set(s.client.run(os.getpid).values())
            a = dd.from_dict({"k": np.arange(2_000_000), "v": np.ones(2_000_000)}, npartitions=4)
            b = dd.from_dict({"k": np.arange(0, 2_000_000, 2), "w": np.ones(1_000_000)}, npartitions=2)
            out = a.merge(b, on="k").compute()
            ok = type(out).__module__.startswith("cudf") and len(out) == 1_000_000
            held = bool(holders(workers))
    except UserError as e:
        return {"protocol": protocol, "refused": str(e), "fix": e.fix}
    return {"protocol": protocol, "answer": ok, "workers_held_gpu": held, "after": holders(workers)}

for protocol in ("tcp", "tcp", "ucx", "tcp"):
    print(json.dumps(one(protocol)), flush=True)
"""


@needs_ucx
def test_sessions_close_their_workers_and_after_ucx_the_next_starts_or_is_refused_by_version():
    """Sessions back to back on GPU 0 in one process, each fetching a cuDF answer from its
    workers: each closes only once its worker processes have exited, so a TCP session follows a
    TCP session. After a UCX session, what comes next depends on the UCX installed ("UCX before
    1.22 keeps the workers' pools mapped" in docs/decisions.md): from 1.22 the process lets go of its
    worker's RMM pool and the next session starts; before it the process still maps the pool
    until it exits, and the next session is refused in one line that names this process, the
    UCX cluster and a new process as the fix. A fresh process runs them: a pool it kept would
    refuse every later test here."""
    import ucxx

    from gpuscale.cluster import protocols

    out = subprocess.run(
        [sys.executable, "-c", _SESSIONS_BACK_TO_BACK], capture_output=True, text=True, timeout=300
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 4, out.stdout + out.stderr[-3000:]
    for r in rows[:3]:
        assert r.get("answer") and r["workers_held_gpu"] and r["after"] == [], r
    last = rows[3]
    if protocols.ucx_keeps_sent_memory(ucxx.get_ucx_version()):
        assert "this process holds" in last.get("refused", ""), last
        assert last["fix"].startswith("a UCX cluster earlier in this process"), last
    else:
        assert last.get("answer") and last["workers_held_gpu"] and last["after"] == [], last


@needs_ucx
@pytest.mark.skipif(len(machine.gpus()) < 2, reason="needs at least 2 GPUs")
def test_svd_two_gpus_over_ucx(tmp_path):
    d = run_cli_json(
        tmp_path,
        "svd",
        "--backend",
        "gpu",
        "--protocol",
        "ucx",
        "--gpus",
        "0,1",
        "--rows",
        "400000",
        "--cols",
        "50",
    )
    assert d["valid"] is True and d["family"] == "gpu"
    assert d["cluster"]["gpus"] == [0, 1]
    assert d["cluster"]["running"]["workers"] == 2


@pytest.mark.skipif(len(machine.gpus()) < 2, reason="needs at least 2 GPUs")
def test_a_groupby_run_takes_one_gpu_of_several_and_svd_takes_every_gpu(tmp_path):
    """Rule gpus.work on a machine of several GPUs: `gpuscale run groupby` with no --gpus starts
    one worker on the first GPU, says why in its record, and is valid; svd keeps every visible
    GPU; --gpus wins."""
    visible = [g["index"] for g in machine.gpus()]
    d = run_cli_json(tmp_path, "groupby", "--backend", "gpu", "--rows", "2000000", "--keys", "1000")
    assert d["valid"] is True and d["cluster"]["gpus"] == visible[:1]
    assert d["cluster"]["running"]["workers"] == 1
    assert d["explained"]["cluster"]["gpus"]["rule_id"] == "gpus.work", d["explained"]["cluster"]["gpus"]
    plan = gpuscale.explain("groupby", backend="gpu", rows=2_000_000, keys=1000)
    assert plan["cluster"]["gpus"] == visible[:1]
    assert plan["explained"]["cluster"]["gpus"]["rule_id"] == "gpus.work"
    assert gpuscale.explain("svd", backend="gpu", rows=400_000, cols=50)["cluster"]["gpus"] == visible
    both = gpuscale.explain(
        "groupby", backend="gpu", cluster_settings={"gpus": "0,1"}, rows=2_000_000, keys=1000
    )
    assert both["cluster"]["gpus"] == [0, 1]


def test_gpu_run_against_cluster_up_runs_in_the_cluster(tmp_path):
    """`gpuscale run W --scheduler ADDRESS` against a GPU cluster kept up: the runner runs on
    the GPU worker (chunks on the device, audit clean) and this process imports no chunk
    library at all (no cuDF, CuPy, pandas: the 2 s of imports a first result paid)."""
    from test_in_cluster import run_probe

    from gpuscale.runs import serve

    sched = tmp_path / "scheduler.json"  # TLS by default: its credentials are written beside it
    with serve.up(backend="gpu", collection="dataframe", gpus="0", scheduler_file=sched) as served:
        assert served.address.startswith("tls://")
        for workload, size in (
            ("groupby", ("--rows", "10000000", "--keys", "100000")),
            ("svd", ("--rows", "400000", "--cols", "50")),
        ):
            rec, imported = run_probe(
                tmp_path,
                "run",
                workload,
                "--backend",
                "gpu",
                "--scheduler-file",
                sched,
                *size,
                "--repeat",
                "2",
                "--warmup",
                "0",
                "--json",
                "--results-dir",
                tmp_path / "res",
            )
            assert rec["valid"] is True and rec["family"] == "gpu", rec["validation"]
            assert rec["info"]["runner"]["where"] == "cluster", rec["info"]["runner"]
            assert rec["audit"]["clean"] is True, rec["audit"]["foreign"]
            kinds = rec["audit"]["kinds"]
            assert kinds.get("cudf" if workload == "groupby" else "cupy", 0) > 0 and not kinds.get(
                "pandas"
            ), kinds
            assert not any(imported.values()), imported


def test_groupby_route_dtypes_same_on_one_and_several_workers():
    """One worker runs cuDF's own aggregation (``_whole``), several run partial + combine:
    the result's columns and dtypes must not depend on the worker count."""
    cudf = pytest.importorskip("cudf")
    from gpuscale.routes import dataframe as routes

    rs = np.random.default_rng(0)
    frame = cudf.DataFrame(
        {
            "key": rs.integers(0, 50, 10_000),
            "int64": rs.integers(0, 100, 10_000),
            "float64": rs.random(10_000),
        }
    )
    spec = {"int64": ["max", "count", "sum", "min"], "float64": ["mean", "sum", "max"]}
    one = routes._whole([frame], ["key"], spec)
    halves = [frame.iloc[:5_000], frame.iloc[5_000:]]
    several = routes._combine([routes._partial([h], ["key"], spec) for h in halves], ["key"], spec)
    assert list(one.columns) == list(several.columns)
    assert dict(one.dtypes) == dict(several.dtypes), (dict(one.dtypes), dict(several.dtypes))
    ref = frame.to_pandas().groupby("key").agg(spec)
    assert dict(one.dtypes) == dict(ref.dtypes), (dict(one.dtypes), dict(ref.dtypes))


def _allocate_on_the_device(seed):
    import cupy

    return int(cupy.empty(2**50, dtype=cupy.uint8)[:1].sum()) + seed  # 1 PiB: the allocator refuses


def test_a_gpu_worker_out_of_device_memory_ends_the_run_in_one_line_and_cluster_up_takes_the_next(tmp_path):
    """A task whose device allocation fails (a real one: 1 PiB through CuPy and RMM) on a GPU
    cluster kept up (`gpuscale cluster up`): one line naming the device memory, what was asked
    and the fix; the worker is still up, and the next run on the same cluster is valid and its
    record holds the device measurement."""
    from gpuscale import workloads
    from gpuscale.errors import UserError
    from gpuscale.runs import serve

    @gpuscale.workload(
        "greedy_gpu",
        params={"seed": 0},
        validate=lambda result: True,
        generate=lambda p: da.ones(2, chunks=2),
    )
    def greedy(data, p, ctx):
        return dask.delayed(_allocate_on_the_device)(p.seed, dask_key_name=f"greedy-gpu-{p.seed}")

    sched = tmp_path / "scheduler.json"
    try:
        with serve.up(backend="gpu", gpus="0", scheduler_file=sched):
            with gpuscale.session(backend="gpu", scheduler_file=str(sched)) as s:
                before = set(s.client.scheduler_info(n_workers=-1)["workers"])
                with pytest.raises(UserError) as e:
                    s.run("greedy_gpu", repeat=1, warmup=0, write=False)
                msg = str(e.value)
                assert "\n" not in msg and msg.startswith(
                    "greedy_gpu: a worker ran out of device memory during the run ("
                ), msg
                assert msg.endswith("the cluster is still up for the next run"), msg
                assert set(s.client.scheduler_info(n_workers=-1)["workers"]) == before
                r = s.run("svd", rows=200_000, cols=50, repeat=1, warmup=0, write=False)
                assert r.valid is True
                got = r.memory["measured"]
                assert got["memory"] == "device", got
                assert (got["peak_bytes"] or 0) >= 200_000 * 50 * 8, got
    finally:
        workloads.unregister("greedy_gpu")


def test_finished_synchronizes_a_cupy_block_in_a_fresh_process():
    """On a GPU, ``backends.finished`` in a process that imported only a route's module (a
    worker running the svd's spectrum task) dispatches a CuPy block to the GPU family's
    synchronize, not to the host identity."""
    pytest.importorskip("cupy")
    code = (
        "import cupy\nimport gpuscale.routes.linalg\nfrom gpuscale.backends import convert, finished\n"
        "x = finished(cupy.ones(3))\n"
        "print(convert.finished_by_type.dispatch(cupy.ndarray).__name__, float(x.sum()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["_cupy_finished", "3.0"], out.stdout


def test_gpu_workers_run_gpuscales_preload_beside_dask_cudas():
    """dask-cuda gives its workers a preload of its own (``dask_cuda.initialize``), which
    overrides ``distributed.worker.preload``; gpuscale's goes in as the keyword, so every GPU
    worker runs it: a process group of its own (Ctrl-C or ``timeout`` reaches only this process,
    which closes the workers, and no worker prints a traceback), over TCP and UCX alike."""
    import os

    protocols = ["tcp"] + (["ucx"] if importlib.util.find_spec("distributed_ucxx") else [])
    for protocol in protocols:
        with gpuscale.session(backend="gpu", gpus="0", protocol=protocol) as s:
            groups = s.client.run(os.getpgrp)
            names = s.client.run(lambda dask_worker: sorted(p.name for p in dask_worker.preloads))
        assert groups and all(g != os.getpgrp() for g in groups.values()), (protocol, groups)
        assert all("gpuscale.cluster.detach" in n and "dask_cuda.initialize" in n for n in names.values()), (
            names
        )


def test_a_gpu_session_compiles_the_kernels_of_cudf_divisions_as_it_opens(tmp_path, monkeypatch):
    # CuPy keeps compiled kernels in CUPY_CACHE_DIR: an empty one is a machine that has compiled none
    kernels = tmp_path / "kernels"
    monkeypatch.setenv("CUPY_CACHE_DIR", str(kernels))

    def wait_for_the_warm_up():
        import threading

        for t in threading.enumerate():
            if t.name == "gpuscale-warm":
                t.join(timeout=300)

    def divide_as_a_query_does():
        import cudf

        frame = cudf.DataFrame({"sum": np.arange(1.0, 50_001.0), "count": np.arange(1, 50_001)})
        (frame["sum"] / frame["count"]).sum()
        (frame["count"] // frame["count"]).sum()
        (frame.iloc[:0]["sum"] / frame.iloc[:0]["count"]).sum()

    def compiled():
        return sorted(p.name for p in kernels.rglob("*") if p.is_file())

    with gpuscale.session(backend="gpu") as s:
        s.client.run(wait_for_the_warm_up)
        warmed = compiled()
        s.client.run(divide_as_a_query_does)
        after = compiled()
    assert len(warmed) >= 6, warmed  # the two-pass all/any reductions and the elementwise checks
    assert after == warmed, set(after) - set(warmed)
