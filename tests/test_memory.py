"""Larger than memory: the memory check's three verdicts, each with real
LocalClusters and the real CLI: fits (nothing spilled), fits with spilling (data 3 x the
worker's memory completes, validates and is never killed; the record says what spilled and the
measured peak beside the estimate), does not fit (one line with the numbers and the fix,
before any work); the spill knobs in ``explain``."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import files_under

import gpuscale

ONE = ("--backend", "cpu", "--workers", "1", "--threads-per-worker", "1", "--repeat", "1", "--warmup", "0")
MB = 10**6
MiB = 2**20


def run_json(cli, tmp_path, *args, env=None, timeout=600):
    p = cli("run", *args, *ONE, "--json", "--results-dir", tmp_path / "res", env=env, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "KilledWorker" not in p.stderr and "exceeded 95% memory budget" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_a_run_that_fits_spills_nothing_and_records_its_peak(cli, tmp_path):
    r = run_json(cli, tmp_path, "svd", "--rows", "100000", "--cols", "50", "--memory-limit", "1GB")
    m = r["memory"]
    assert r["validation"]["valid"] is True
    assert m["verdict"] == "fits" and m["baseline_source"].startswith("measured")
    meas = m["measured"]
    assert meas["spilled_bytes"] == 0
    # the worker really held the 40 MB matrix: its peak is over baseline + data, under the limit
    assert 40 * MB < meas["peak_bytes"] < 1000 * MB
    assert 0.3 < meas["peak_over_estimate"] < 1.5, meas


@pytest.mark.slow
@pytest.mark.parametrize(
    "workload, args",
    [
        ("svd", ("--rows", "1500000", "--cols", "100")),  # 1.2 GB of float64
        ("groupby", ("--rows", "50000000", "--keys", "1000")),  # 1.2 GB of rows
    ],
    ids=["svd", "groupby"],
)
def test_three_times_the_workers_memory_spills_and_validates(cli, tmp_path, workload, args):
    r = run_json(cli, tmp_path, workload, *args, "--memory-limit", "400MB")
    m = r["memory"]
    assert r["validation"]["valid"] is True, r["validation"]
    assert m["estimate_bytes"] >= 3 * 400 * MB - 1
    assert m["verdict"] == "spills" and m["spill_bytes_per_worker"] > 700 * MB
    meas = m["measured"]
    assert meas["spilled_bytes"] > 800 * MB  # it really went to disk
    assert meas["peak_bytes"] < 0.95 * 400 * MB  # never near the nanny's kill line
    assert 0.4 < meas["peak_over_estimate"] < 1.25, meas
    assert not r["info"].get("disturbed_repeats"), r["info"]  # no worker lost or restarted
    if workload == "groupby":  # a worker's partitions would not fit concatenated: the tree
        assert r["info"]["plan"]["strategy"] == "tree", r["info"]["plan"]
        assert "not per-worker" in r["info"]["plan"]["reason"]


@pytest.mark.parametrize(
    "workload, args",
    [
        ("transpose_sum", ("--n", "7000")),  # 392 MB of float64, x + x.T: 3 blocks per task
        ("map_overlap", ("--n", "6000")),  # 288 MB, halo-padded blocks
    ],
    ids=["transpose_sum", "map_overlap"],
)
def test_array_blocks_are_capped_so_a_spilling_run_loses_no_worker(cli, tmp_path, workload, args):
    """2 workers x 400 MB: before the chunk budget was capped by worker memory, transpose_sum
    took 98 MB blocks and a worker was killed at 95 % (the run was valid only after the restart),
    and map_overlap's workers died four times (KilledWorker) under a looser check."""
    p = cli(
        "run",
        workload,
        *args,
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "400MB",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "exceeded 95% memory budget" not in p.stderr and "KilledWorker" not in p.stderr, p.stderr[-3000:]
    r = json.loads(p.stdout)
    m = r["memory"]
    assert r["validation"]["valid"] is True and m["verdict"] == "spills", m
    assert m["measured"]["spilled_bytes"] > 0 and m["measured"]["peak_bytes"] < 0.95 * 400 * MB
    assert "capped" in r["explained"]["workload"]["chunk"]["rule"]
    assert not r["info"].get("disturbed_repeats"), r["info"]


def test_the_boundary_case_spills_or_streams_instead_of_being_killed(cli, tmp_path):
    """The issue's case: 2 workers x 300 MB, svd 300000 x 100 (240 MB), killed before; now it
    "either runs or is refused by the check, never killed". A worker at ~70 MiB at start plus
    its growth leaves no room to hold the target's worth of data under the pause line, so the
    generated matrix streams (a check that let it spill is also a valid outcome: then bytes
    went to disk): valid, nothing killed, the peak under the nanny's line; where the workers
    start larger (no room even for the blocks) it is refused in one line before any work."""
    p = cli(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "300MB",
        "--rows",
        "300000",
        "--cols",
        "100",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=300,
    )
    assert "KilledWorker" not in p.stderr and "exceeded 95% memory budget" not in p.stderr, p.stderr[-3000:]
    if p.returncode == 2:  # a machine whose workers start larger: no room even for the blocks
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "give each worker at least" in lines[0], p.stderr
        assert files_under(tmp_path / "res") == []
        return
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    m = r["memory"]
    assert r["validation"]["valid"] is True and m["verdict"] in ("spills", "streams"), m
    assert m["measured"]["peak_bytes"] < 0.95 * 300 * MB
    if m["verdict"] == "spills":  # it did spill: more than the data per worker went to disk and back
        assert m["measured"]["spilled_bytes"] > 120 * MB, m


@pytest.mark.slow
def test_six_times_the_memory_of_two_small_workers_is_admitted_and_validates(cli, tmp_path):
    """Two workers of 300 MB, an svd of 1.68 GiB: the check admits it (it completes, peaking
    near 180 MiB per worker) and no worker is lost."""
    p = cli("run", "svd", "--backend", "cpu", "--rows", "2250000", "--cols", "100", "--workers", "2",
            "--threads-per-worker", "1", "--memory-limit", "300MB", "--repeat", "1", "--warmup", "0",
            "--json", "--results-dir", tmp_path / "res", timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["validation"]["valid"] is True and r["memory"]["verdict"] == "spills", r["memory"]["verdict"]
    assert r["memory"]["measured"]["peak_bytes"] < 0.95 * 300 * MB
    assert not r["info"].get("disturbed_repeats"), r["info"]


def test_a_run_near_its_workers_pause_line_is_admitted_and_validates(cli, tmp_path):
    """Workers of 270 MB (near the 256 MiB least): a started worker, its growth and the data
    kept come near their pause line. It completes, so the check admits it and no worker is
    lost (rule memory.pause-line)."""
    p = cli("run", "svd", "--backend", "cpu", "--workers", "2", "--threads-per-worker", "1",
            "--memory-limit", "270MB", "--rows", "300000", "--cols", "100", "--compute-uv",
            "--repeat", "1", "--warmup", "0", "--json", "--results-dir", tmp_path / "res",
            timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["validation"]["valid"] is True and r["memory"]["fits"] is True, r["memory"]["verdict"]
    assert r["memory"]["measured"]["peak_bytes"] < 0.95 * 270 * MB
    assert not r["info"].get("disturbed_repeats"), r["info"]


def test_what_can_neither_fit_nor_stream_is_refused_before_any_work(cli, tmp_path):
    """Workers of 270 MB, tasks of 3,000 columns: a started worker and one task's blocks are
    over their pause line, so nothing can be held, spilled or streamed: refused in one line
    naming the memory each worker would need."""
    p = cli("run", "svd", "--backend", "cpu", "--workers", "2", "--threads-per-worker", "1",
            "--memory-limit", "270MB", "--rows", "300000", "--cols", "3000", "--compute-uv",
            "--results-dir", tmp_path / "res")  # fmt: skip
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: "), p.stderr
    assert (
        "would pause" in lines[0] and "give each worker at least" in lines[0] and "--memory-limit" in lines[0]
    )
    assert files_under(tmp_path / "res") == []


@pytest.fixture
def small_spill_space(tmp_path):
    """dask's temporary-directory on a 64 MB tmpfs: the workers' spill space (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounts a small tmpfs (root)")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(small)], check=True)
    try:
        yield {"DASK_TEMPORARY_DIRECTORY": str(small)}
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_spill_space_too_small_does_not_fit(cli, tmp_path, small_spill_space):
    """1.2 GB of your own matrix (a file cannot be made again, so it cannot stream) cannot spill
    into 64 MB: refused with the free space and the fix, before any work."""
    import numpy as np

    x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype="float64", shape=(1_500_000, 100))
    for i in range(0, 1_500_000, 250_000):
        x[i : i + 250_000] = 1.0 + i
    x.flush()
    del x
    p = cli(
        "run",
        "svd",
        "--input",
        tmp_path / "x.npy",
        *ONE,
        "--memory-limit",
        "400MB",
        "--results-dir",
        tmp_path / "res",
        env=small_spill_space,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert "would spill to disk" in lines[0] and "free there" in lines[0] and "free disk space" in lines[0]
    assert files_under(tmp_path / "res") == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "workload, args, says",
    [
        ("svd", ("--rows", "1500000", "--cols", "100"), "generated block by block"),
        ("groupby", ("--rows", "50000000", "--keys", "1000"), "aggregates each partition as it is made"),
    ],
    ids=["svd", "groupby"],
)
def test_what_fits_neither_way_streams_and_validates(cli, tmp_path, small_spill_space, workload, args, says):
    """1.2 GB of generated data, 64 MB to spill into: svd's matrix is generated block by block
    in every pass, groupby's frame made and aggregated partition by partition under the tree
    plan, so the run streams (nothing but blocks in flight and partials held) and validates
    instead of being refused; the record says so."""
    r = run_json(cli, tmp_path, workload, *args, "--memory-limit", "400MB", env=small_spill_space)
    m = r["memory"]
    assert r["validation"]["valid"] is True, r["validation"]
    assert m["verdict"] == "streams" and says in m["streams"]
    assert r["explained"]["workload"]["data_residency"]["value"] == "streamed"
    if workload == "groupby":
        assert r["explained"]["workload"]["groupby_strategy"]["value"] == "tree"
    else:
        assert m["measured"]["peak_bytes"] < 0.95 * 400 * MB  # blocks in flight may still spill a while


def test_explain_shows_the_spill_knobs_and_the_verdict(cli):
    p = cli(
        "explain",
        "svd",
        "--json",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "400MB",
        "--rows",
        "1500000",
        "--cols",
        "100",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    c = d["explained"]["cluster"]
    assert c["spill_to"]["value"] == "disk"
    target = c["memory_target_fraction"]
    assert target["source"] == "rule" and 0.05 <= target["value"] < 0.6 and "baseline" in target["rule"]
    assert d["cluster"]["dask_config"] == {
        "distributed.worker.memory.target": target["value"],
        "gpuscale-pre-import": ["dask.array"],  # the workers' own knob, beside the spill target
    }
    assert "temporary-directory" in c["spill_directory"]["rule"]
    chunk = d["choices"]["chunk_rows"]
    assert "capped" in chunk["rule"] and "worker memory" in chunk["rule"]
    m = d["memory"]
    assert m["verdict"] == "spills" and m["baseline_source"].startswith("assumed")
    assert m["parts"] == {"inputs": 1_200_000_000, "intermediates": 0, "results": 0}
    text = cli(
        "explain",
        "svd",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "400MB",
        "--rows",
        "1500000",
        "--cols",
        "100",
        env={"COLUMNS": "300"},
    ).stdout
    assert "fits with spilling" in text


def test_a_gpu_family_spills_to_host_unless_told_not_to():
    """Planned only (no GPU needed): dask-cuda's default spills above 0.8 of the device to
    host; --device-memory-limit 0 turns it off (the data must fit 0.9 of the device); a size
    is a share of the device."""
    from gpuscale import memory
    from gpuscale.backends import registry

    class Spec:
        threads_per_worker = 1
        memory_limit_bytes = 64 * 2**30
        kwargs: dict = {}

    gpu = next(f for f in registry.families() if f.name == "gpu")
    device = 80 * 2**30
    b = memory.planned(Spec(), gpu, [device])
    assert b.spill_to == "host" and b.fractions["spill"] == 0.8 and b.memory == "device"
    assert b.spill_space >= 64 * 2**30  # the host buffer, then disk
    Spec.kwargs = {"device_memory_limit": 0}
    b = memory.planned(Spec(), gpu, [device])
    assert b.spill_to is None and b.fractions["spill"] == 0.9
    Spec.kwargs = {"device_memory_limit": "16GiB"}
    b = memory.planned(Spec(), gpu, [device])
    assert b.spill_to == "host" and b.fractions["spill"] == 0.2
    assert memory.target_fraction(device, 1, gpu)[0] is None  # distributed's target is a host rule


def test_a_family_that_streams_first_streams_what_would_spill():
    """The verdict's rule: with the same budget and data, a family that spills first (the CPU's)
    spills, one whose ``stream_first`` says streaming is cheaper (the GPU's) streams a workload
    that can stream, and still spills one that cannot; the record names why."""
    from gpuscale import memory
    from gpuscale.backends import registry

    class Blocks:  # estimate_memory / task_bytes / streams: what assess asks of a workload
        def __init__(self, can_stream):
            self.can_stream = can_stream

        def estimate_memory(self, p, ctx):
            return {"inputs": 3 * 2**30}

        def task_bytes(self, p, ctx):
            return 16 * 2**20

        def streams(self, p, ctx):
            return "made block by block" if self.can_stream else None

        def stream_block_bytes(self, p, ctx):
            return 8 * 2**20

    gpu = next(f for f in registry.families() if f.name == "gpu")
    cpu = next(f for f in registry.families() if f.name == "cpu")
    assert gpu.stream_first and cpu.stream_first is None

    def budget(family):
        return memory.Budget(
            workers=1,
            limit=2**30,
            baseline=100 * 2**20,
            baseline_source="test",
            threads=1,
            fractions=dict(memory.DEFAULT_FRACTIONS),
            spill_to="disk",
            spill_space=2**40,
            memory=family.memory,
            stream_first=family.stream_first,
        )

    assert memory.assess(Blocks(True), None, None, budget(cpu))["verdict"] == "spills"
    streamed = memory.assess(Blocks(True), None, None, budget(gpu))
    assert streamed["verdict"] == "streams" and "streamed rather than spilled" in streamed["streams"]
    assert "streams instead" in streamed["rule"]
    # beside its running task a worker holds the blocks made ahead of their consumers: two at one
    # thread (distributed's root-task queuing, worker-saturation 1.1)
    assert streamed["made_ahead_bytes"] == 2 * 8 * 2**20 and "made ahead" in streamed["streams"]
    assert streamed["peak_bytes"] == 100 * 2**20 + 16 * 2**20 + 2 * 8 * 2**20
    import dask

    with dask.config.set({"distributed.scheduler.worker-saturation": "inf"}):  # no queuing: all made at once
        assert memory.assess(Blocks(True), None, None, budget(gpu))["verdict"] == "spills"
    assert memory.assess(Blocks(False), None, None, budget(gpu))["verdict"] == "spills"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "workload, args",
    [
        ("svd", ("--rows", "3750000", "--cols", "100")),  # 3 GB of float64
        ("groupby", ("--rows", "125000000", "--keys", "1000")),  # 3 GB of rows
    ],
    ids=["svd", "groupby"],
)
def test_a_capped_gpu_streams_three_times_its_cap_of_generated_data_and_validates(
    cli, tmp_path, workload, args
):
    """Generated data 3 x the device's cap: made block by block in every pass (the GPU family
    streams what would spill), valid, the record saying so."""
    from conftest import gpu_probe

    ok, why = gpu_probe()
    if not ok:
        pytest.skip(f"no usable GPU: {why}")
    p = cli(
        "run",
        workload,
        *args,
        "--backend",
        "gpu",
        "--gpus",
        "0",
        "--device-memory-limit",
        "1GB",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["validation"]["valid"] is True, r["validation"]
    m = r["memory"]
    assert m["verdict"] == "streams" and "streamed rather than spilled" in m["streams"], m
    assert r["explained"]["workload"]["data_residency"]["value"] == "streamed"
    # the record's device measurement: the run allocated at its peak far less than its 3 GB of data
    got = m["measured"]
    assert got["memory"] == "device" and 0 < got["peak_bytes"] < 2 * 10**9, got
    assert got["peak_over_estimate"] > 0 and got["spilled_bytes"] == 0, got
    assert r["explained"]["cluster"]["device_memory_limit"]["value"] == "1GB"


@pytest.mark.gpu
@pytest.mark.parametrize("workload, way", [("svd", "dask-cuda"), ("groupby", "cudf")])
def test_a_capped_gpu_spills_three_times_its_cap_of_a_file_to_host_and_validates(
    cli, tmp_path, workload, way
):
    """A file 3 x the device's cap cannot be made again: it is read once and spills device ->
    host the way --device-spill says; valid, and explain names the way."""
    from conftest import gpu_probe

    ok, why = gpu_probe()
    if not ok:
        pytest.skip(f"no usable GPU: {why}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows"))
    import spill_gpu

    if workload == "svd":
        path = tmp_path / "x.npy"
        spill_gpu.write_npy(str(path), 3_750_000, 100, 3)
        extra = ()
    else:
        path = tmp_path / "frame"
        spill_gpu.write_parquet(str(path), 125_000_000, 1000, 3)
        extra = ("--by", "key", "--agg", "int64:sum;float64:mean")
    p = cli(
        "run",
        workload,
        "--input",
        path,
        *extra,
        "--backend",
        "gpu",
        "--gpus",
        "0",
        "--device-memory-limit",
        "1GB",
        "--device-spill",
        way,
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--json",
        "--results-dir",
        tmp_path / "res",
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["validation"]["valid"] is True, r["validation"]
    assert r["memory"]["verdict"] == "spills" and r["memory"]["budget"]["spill_to"] == "host", r["memory"]
    assert r["explained"]["cluster"]["device_spill"]["value"] == way
    # what spilled, as the record measured it: more than the data beyond the 1 GB cap went to host
    got = r["memory"]["measured"]
    moved = got["workers"][next(iter(got["workers"]))]
    assert got["memory"] == "device" and got["peak_bytes"] > 0, got
    assert got["spilled_bytes"] > 10**9, got
    if way == "dask-cuda":
        assert moved["device_to_host_bytes"] > 0, moved
    else:  # cuDF's spill manager is there and was read (dask-cuda moves whole outputs on top of it)
        assert "cudf_device_to_host_bytes" in moved, moved
    if workload == "groupby":  # the frame is 3 x the cap: partials in a tree, not all of it concatenated
        assert r["explained"]["workload"]["groupby_strategy"]["value"] == "tree", r["explained"]["workload"]
        assert got["peak_bytes"] < 3 * 10**9, got


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_a_session_of_dask_cudas_spilling_after_one_of_cudfs_in_the_same_process_is_valid(tmp_path):
    """cuDF's spilling is turned on in this process for a session whose workers spill with cuDF
    (to read their frames), and off again for the next one, whose workers do not: otherwise the
    frames this process sends them (a shuffle's meta) are spillable ones they cannot rebuild,
    and the worker is lost (seen on an H200: ``spill_gpu.py``, cudf at 1.5 x then dask-cuda at 3 x
    the cap)."""
    from conftest import gpu_probe

    ok, why = gpu_probe()
    if not ok:
        pytest.skip(f"no usable GPU: {why}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflows"))
    import cudf
    import spill_gpu
    from cudf.core.buffer import spill_manager

    path = tmp_path / "frame"
    spill_gpu.write_parquet(str(path), 62_500_000, 1000, 3)
    args = {
        "by": "key",
        "agg": {"int64": "sum", "float64": ["mean"]},
        "repeat": 1,
        "warmup": 0,
        "write": False,
    }
    for way, spills_here in (("cudf", True), ("dask-cuda", False)):
        with gpuscale.session(backend="gpu", gpus="0", device_memory_limit="1GB", device_spill=way) as s:
            assert cudf.get_option("spill") is spills_here
            assert (spill_manager.get_global_manager() is not None) is spills_here
            r = s.run("groupby", data=str(path), **args)
            assert r.valid, (way, r.validation)
            assert r.memory["verdict"] == "spills", r.memory


def _ctx(threads=2, validate=None, **choices):
    """A planning context (no cluster): one CPU worker of ``threads`` threads, 2 GB, ``choices``."""
    from gpuscale import memory, workloads
    from gpuscale.backends import registry
    from gpuscale.decision import Decision

    class Spec:
        workers = 1
        threads_per_worker = threads

    cpu = next(f for f in registry.families() if f.name == "cpu")
    budget = memory.Budget(
        workers=1,
        limit=2 * 10**9,
        baseline=200 * 2**20,
        baseline_source="test",
        threads=threads,
        fractions=dict(memory.DEFAULT_FRACTIONS),
        spill_to="disk",
    )
    return workloads.Context(
        cpu,
        Spec(),
        choices={k: Decision(v, "test") for k, v in choices.items()},
        memory=budget,
        validate=validate,
    )


def test_map_overlap_counts_the_padded_blocks_and_the_filter_output():
    """Every chunk grows by the halo on each side (Dask's stored padded blocks; the results keep
    their padded base); one filter task holds its padded output (two blocks on the one-chunk
    route, which pads inside the task and stores no padded block)."""
    from gpuscale.workloads import registry

    wl = registry.get("map_overlap")()
    p = wl.parse({"n": 8000, "size": 9})
    parts = wl.estimate_memory(p, _ctx(chunk=4000))
    padded = (8000 + 2 * 4 * 2) ** 2 * 8
    assert parts == {"inputs": 8000**2 * 8, "intermediates": padded, "results": padded}
    assert wl.task_bytes(p, _ctx(chunk=4000)) == 4008**2 * 8
    one = wl.estimate_memory(p, _ctx(chunk=8000))
    assert one["intermediates"] == 0 and one["results"] == 8008**2 * 8
    assert wl.task_bytes(p, _ctx(chunk=8000)) == 2 * 8008**2 * 8


def test_reduction_std_counts_two_float64_temporaries_per_task():
    """std's chunk step holds A - mean and its square; the partials are small (no second copy
    of the array)."""
    from gpuscale.workloads import registry

    wl = registry.get("reduction")()
    p = wl.parse({"rows": 20000, "cols": 5000, "op": "std"})
    ctx = _ctx(chunk=4096)
    assert wl.task_bytes(p, ctx) == 2 * 4096 * 4096 * 8
    parts = wl.estimate_memory(p, ctx)
    assert parts["inputs"] == 20000 * 5000 * 8 and parts["intermediates"] + parts["results"] < 2**20
    assert (
        wl.task_bytes(wl.parse({"rows": 20000, "cols": 5000, "op": "sum"}), _ctx(validate="off", chunk=4096))
        == 0
    )


@pytest.mark.parametrize(
    "name, params", [("shuffle", {"rows": 4_000_000}), ("merge", {"rows": 4_000_000, "match_fraction": 0.3})]
)
def test_a_p2p_shuffle_counts_its_shards_and_transfer_copies(name, params):
    """Dask's P2P (two threads): the shards in its comm buffer and (up to 100 MiB) its storage
    buffer, and each transfer task's copies; the one-task route (one thread) keeps four copies
    (merge) or five (shuffle's sort)."""
    from gpuscale.workloads import registry

    wl = registry.get(name)()
    p = wl.parse(params)
    rows = params["rows"] * (2 if name == "merge" else 1)
    ctx = _ctx(partitions=2, right_partitions=2, shuffle_method=None)
    parts = wl.estimate_memory(p, ctx)
    assert parts["shuffle_buffers"] == rows * 32 + 100 * 2**20  # held outside the spill buffer
    assert wl.task_bytes(p, ctx) == 2_000_000 * (24 + 3 * 32)
    one = _ctx(threads=1, partitions=2, right_partitions=2, shuffle_method=None)
    copies = {"shuffle": 5, "merge": 4}[name]  # the sort's gather map and reordered copy (H200: 4.77 x)
    assert wl.task_bytes(p, one) == 0 and wl.estimate_memory(p, one)["peak"] == copies * rows * 16


def test_groupby_counts_the_full_checks_concatenated_frame():
    from gpuscale.workloads import registry

    wl = registry.get("groupby")()
    ctx = _ctx(partitions=2, groupby_strategy="tree")
    assert wl.estimate_memory(wl.parse({"rows": 5_000_000}), ctx)["validation"] == 2 * 5_000_000 * 24
    assert wl.estimate_memory(wl.parse({"rows": 10_000_000}), ctx)["validation"] == 0
    assert (
        wl.estimate_memory(wl.parse({"rows": 5_000_000}), _ctx(validate="off", partitions=2))["validation"]
        == 0
    )


def _allocate_a_petabyte(seed):
    import numpy as np

    return np.empty(2**50, dtype=np.uint8)[:1].sum() + seed  # NumPy refuses: MemoryError


def test_a_worker_that_runs_out_of_memory_ends_the_run_in_one_line_and_the_cluster_takes_the_next(
    cpu_session,
):
    """A task whose allocation fails on its worker (a real MemoryError: NumPy asked for 1 PiB;
    on a GPU CuPy's / RMM's, the same type) ends the run with one line naming the memory, what
    was asked, the check's estimate and the fix; the worker is still up and the same session's
    next run is valid."""
    import dask
    import dask.array

    import gpuscale
    from gpuscale import workloads
    from gpuscale.errors import UserError

    @gpuscale.workload(
        "greedy",
        params={"seed": 0},
        validate=lambda result: True,
        generate=lambda p: dask.array.ones(2, chunks=2),
    )
    def greedy(data, p, ctx):
        return dask.delayed(_allocate_a_petabyte)(p.seed, dask_key_name=f"greedy-{p.seed}")

    try:
        before = set(cpu_session.client.scheduler_info(n_workers=-1)["workers"])
        with pytest.raises(UserError) as e:
            cpu_session.run("greedy", repeat=1, warmup=0, write=False)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(
            "greedy: a worker ran out of host memory during the run (MemoryError: Unable to allocate 1.00 PiB"
        ), msg
        assert "; use smaller sizes, more memory per worker" in msg and msg.endswith(
            "the cluster is still up for the next run"
        )
        assert set(cpu_session.client.scheduler_info(n_workers=-1)["workers"]) == before  # no worker died
        r = cpu_session.run("svd", rows=2_000, cols=10, repeat=1, warmup=0, write=False)
        assert r.valid is True
    finally:
        workloads.unregister("greedy")


def test_p2p_buffers_cannot_spill_so_a_worker_too_small_for_them_is_refused():
    """P2P's shuffle buffers are held outside the spill buffer: they count with the working set.
    Counted as spillable data, this merge would be admitted (the data beyond the target would go
    to disk); on real 2 x 400 MB workers a merge admitted that way paused and resumed for 15
    minutes."""
    from gpuscale import memory
    from gpuscale.workloads import registry

    wl = registry.get("merge")()
    p = wl.parse({"rows": 3_000_000})
    ctx = _ctx(partitions=4, right_partitions=4, shuffle_method=None)
    b = memory.Budget(
        workers=1,
        limit=900 * 2**20,
        baseline=200 * 2**20,
        baseline_source="test",
        threads=2,
        fractions={**memory.DEFAULT_FRACTIONS, "target": 0.3},
        spill_to="disk",
    )
    h = memory.assess(wl, p, ctx, b)
    parts = wl.estimate_memory(p, ctx)
    assert h["held_bytes"] == parts["shuffle_buffers"] + parts["validation"] > 0
    assert h["verdict"] == "does not fit" and "what cannot spill" in str(memory.error("merge", h))
    pause = int(b.limit * b.fractions["pause"] * memory.PAUSE_MARGIN[b.memory])
    spillable = b.baseline + h["working_set_bytes"]  # the same estimate with everything spillable
    assert spillable + memory.kept_bytes(b.to_dict(), h["estimate_bytes"]) <= pause
    # with room for the buffers it spills the data as before
    roomy = dataclasses.replace(b, limit=2 * 10**9)
    assert memory.assess(wl, p, ctx, roomy)["verdict"] in ("fits", "spills")


def test_run_refuses_what_explain_refuses_before_its_cluster_starts(cli, tmp_path):
    """75 M rows grouped on 2 x 300 MB workers: `explain` says the run would stop before starting
    work, and `run` with the same flags stops with that same line, before any worker starts (it
    used to start, lose workers at 95 % and end in KilledWorker)."""
    flags = [
        "groupby",
        "--rows",
        "75000000",
        "--keys",
        "100000",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "300MB",
        "--backend",
        "cpu",
    ]
    e = cli("explain", *flags, "--json")
    assert e.returncode == 0, e.stderr
    said = [
        n for n in json.loads(e.stdout)["notes"] if n.startswith("the run would stop before starting work: ")
    ]
    assert len(said) == 1
    started = time.monotonic()
    p = cli("run", *flags, "--results-dir", tmp_path / "res", timeout=120)
    assert p.returncode == 2, p.stderr[-3000:]
    assert p.stderr.splitlines() == [
        "gpuscale: error: " + said[0].removeprefix("the run would stop before starting work: ")
    ]
    assert time.monotonic() - started < 30 and files_under(tmp_path / "res") == []


def test_worker_limits_adding_up_past_the_machine_are_refused(cli):
    from gpuscale import machine

    quarter = str(machine.cpu()["memory_bytes"] // 4)
    for command in ("explain", "run"):
        p = cli(
            command,
            "transpose_sum",
            "--backend",
            "cpu",
            "--n",
            "2000",
            "--workers",
            "8",
            "--memory-limit",
            quarter,
        )
        assert p.returncode == 2, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and "more than this machine's" in lines[0] and "8 worker(s) x" in lines[0], (
            p.stderr
        )


def test_workers_killed_under_a_task_end_in_one_line(tmp_path):
    """A task past its worker's limit (the check skipped): the nanny restarts the worker, the
    scheduler gives up (KilledWorker), and the run ends in one line naming it, not 'unexpected'."""
    import importlib

    import dask
    import hungry

    from gpuscale.workloads import registry

    if registry.registered("hungry") is None:
        importlib.reload(hungry)
    try:
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            with pytest.raises(gpuscale.UserError) as e:
                gpuscale.run(
                    "hungry",
                    backend="cpu",
                    repeat=1,
                    warmup=0,
                    memory_check=False,
                    results_dir=str(tmp_path / "res"),
                    cluster_settings={"workers": 1, "threads_per_worker": 1, "memory_limit": "300MB"},
                )
    finally:  # registered for this test only: others compare the registry with a fresh process's
        registry.unregister("hungry")
    text = str(e.value)
    assert "hungry: the workers running" in text and "died 1 time(s)" in text and "--memory-limit" in text
    logs = files_under(tmp_path / "res")
    # no record was written; Dask's warnings, when the worker logged any before it died, went to
    # the log file (whether it logs before the kill depends on the timing)
    assert all(f.parent.name == "logs" for f in logs), logs


def test_at_the_boundary_the_least_limit_the_check_names_completes_and_one_mib_less_is_refused(cli, tmp_path):
    """Generated groupby with 100,000 keys on 2 x 1-thread workers: at 325 MB the check
    admitted it (streams) and the fast check's one task that gathered every partition's counts
    (or the tree's upper combines) pushed a worker past 95 %: killed 4 times. Now a combine's
    partials are in the working set: refused in one line before any work, naming the least
    --memory-limit the same check admits (`explain` names the same); at that limit the run
    completes and validates with every worker under the nanny's line, and 1 MiB less is refused."""
    flags = [
        "groupby",
        "--rows",
        "6000000",
        "--keys",
        "100000",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--backend",
        "cpu",
        "--repeat",
        "1",
        "--warmup",
        "0",
    ]
    e = cli("explain", *flags, "--memory-limit", "325MB", "--json")
    assert e.returncode == 0, e.stderr
    need = json.loads(e.stdout)["memory"]["need_limit_bytes"]
    started = time.monotonic()
    p = cli("run", *flags, "--memory-limit", "325MB", "--results-dir", tmp_path / "res", timeout=120)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert (
        len(lines) == 1 and f"give each worker at least {need / 2**20:.2f} MiB (--memory-limit)" in lines[0]
    ), lines
    assert time.monotonic() - started < 30 and files_under(tmp_path / "res") == []
    less = cli("run", *flags, "--memory-limit", f"{need // 2**20 - 1}MiB", "--results-dir", tmp_path / "less")
    assert less.returncode == 2 and len(less.stderr.splitlines()) == 1, less.stderr[-3000:]
    assert files_under(tmp_path / "less") == []
    ok = cli(
        "run",
        *flags,
        "--memory-limit",
        f"{need // 2**20}MiB",
        "--json",
        "--results-dir",
        tmp_path / "ok",
        timeout=300,
    )
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr[-3000:]
    r = json.loads(ok.stdout)
    m = r["memory"]
    assert r["validation"]["valid"] is True and m["verdict"] in ("fits", "spills", "streams"), m
    assert max(w["peak_bytes"] for w in m["measured"]["workers"].values()) < 0.95 * need


def test_a_run_no_limit_on_this_machine_admits_says_so_instead_of_naming_one(cli, tmp_path):
    """The least limit is searched only up to this machine's memory over the workers (limits
    adding up past it are refused anyway): past it the line says no --memory-limit admits it."""
    p = cli(
        "run",
        "groupby",
        "--rows",
        "2000000000",
        "--keys",
        "100000000",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--memory-limit",
        "300MB",
        "--backend",
        "cpu",
        "--results-dir",
        tmp_path / "res",
    )
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "no --memory-limit up to this machine's" in lines[0], lines
    assert "give each worker at least" not in lines[0] and files_under(tmp_path / "res") == []


def test_the_libraries_a_worker_imports_before_joining_count_once_in_its_baseline():
    # the growth a worker's first tasks add counts the chunk library's imports: what the
    # pre-import put into the worker at start is taken off its measured start, not added twice
    from gpuscale import memory_measured

    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1, collection="dataframe") as s:
        (state,) = s.client.run(memory_measured.worker_state).values()
        budget = memory_measured.measure(s.client, s.family, s.family.worker_memory(s.client), s.spec)
    assert state["pre_imported"] > 50 * MiB  # dask.dataframe, pandas, pyarrow
    start = budget.baseline - s.family.knobs.worker_growth_bytes
    assert abs(start - (state["rss"] - state["pre_imported"])) < 8 * MiB, (start, state)
    assert "less the" in budget.baseline_source and "imported before joining" in budget.baseline_source
