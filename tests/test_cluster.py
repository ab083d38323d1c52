"""Cluster specs (``gpuscale cluster show``, starting nothing) and real cluster lifecycles."""

from __future__ import annotations

import dataclasses
import json
import os

import dask.config
import pytest
from distributed import LocalCluster
from distributed.core import Status

import gpuscale
from gpuscale import UserError, api, backends, cluster
from gpuscale.cluster import protocols

CORES = len(os.sched_getaffinity(0))


def show(cli, *args, env=None) -> dict:
    p = cli("cluster", "show", *args, "--json", env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------------------
# gpuscale cluster show (subprocess)
# ---------------------------------------------------------------------------------------
def test_show_default_fills_the_cores(cli, tmp_path):
    d = show(cli)
    spec = d["spec"]
    assert spec["cls"] == "distributed.LocalCluster"
    assert spec["family"] == d["family"] == "cpu"
    assert spec["protocol"] == "tcp"
    assert spec["workers"] * spec["threads_per_worker"] == CORES
    assert spec["kwargs"]["n_workers"] == spec["workers"]
    assert spec["kwargs"]["threads_per_worker"] == spec["threads_per_worker"]
    assert d["settings"]["protocol"] == "auto"  # resolved by the family's rule: TCP for the CPU
    assert d["sources"]["protocol"] == "default"
    assert list(tmp_path.iterdir()) == []  # starting nothing, writing nothing


@pytest.mark.parametrize("collection", ["array", "dataframe"])
def test_show_for_collection_uses_family_layout(cli, collection):
    spec = show(cli, "--backend", "cpu", "--for", collection)["spec"]
    workers, threads, *_ = backends.select("cpu").family.layout_rule(collection, CORES, 0)
    assert (spec["workers"], spec["threads_per_worker"]) == (workers, threads)
    assert spec["workers"] * spec["threads_per_worker"] <= CORES


def test_show_gpu_ucx_profile_without_a_gpu(cli):
    d = show(cli, "--profile", "gpu-ucx")
    spec = d["spec"]
    assert spec["cls"] == "dask_cuda.LocalCUDACluster"
    assert spec["family"] == "gpu"
    assert spec["protocol"] == "ucx"
    assert spec["kwargs"]["protocol"] == "ucx"
    assert spec["rmm"]["external_libs"] == ["cupy"]
    assert spec["kwargs"]["rmm_allocator_external_lib_list"] == ["cupy"]
    assert spec["rmm"]["pool_size"] == 0.8
    # no transport switch forced: UCX chooses
    assert not any(k.startswith("enable_") for k in spec["kwargs"])
    assert d["profile"].endswith("gpu-ucx.yaml")
    assert d["sources"]["protocol"] == d["sources"]["backend"] == "profile"


def test_show_nvlink_profile_forces_the_switch(cli):
    spec = show(cli, "--profile", "gpu-ucx-nvlink")["spec"]
    assert spec["transports"] == {"enable_nvlink": True}
    assert spec["kwargs"]["enable_nvlink"] is True


def test_show_flags_reflected_with_flag_sources(cli):
    d = show(cli, "--backend", "cpu", "--workers", "2", "--threads-per-worker", "1", "--memory-limit", "1GB")
    spec = d["spec"]
    assert (spec["workers"], spec["threads_per_worker"]) == (2, 1)
    assert spec["memory_limit_bytes"] == 10**9
    for key in ("backend", "cluster.workers", "cluster.threads-per-worker", "cluster.memory-limit"):
        assert d["sources"][key] == "flag", key
    assert d["sources"]["protocol"] == "default"


def test_show_env_var_source(cli):
    d = show(cli, "--backend", "cpu", env={"DASK_GPUSCALE__CLUSTER__WORKERS": "1"})
    assert d["spec"]["workers"] == 1
    assert d["sources"]["cluster.workers"] == "env"
    # and a flag beats it
    d = show(cli, "--backend", "cpu", "--workers", "2", env={"DASK_GPUSCALE__CLUSTER__WORKERS": "1"})
    assert (d["spec"]["workers"], d["sources"]["cluster.workers"]) == (2, "flag")


def test_show_human_readable(cli):
    p = cli("cluster", "show", "--profile", "gpu-ucx")
    assert p.returncode == 0, p.stderr
    assert "dask_cuda.LocalCUDACluster" in p.stdout and "ucx" in p.stdout


def test_show_rmm_pool_size_flag(cli):
    spec = show(cli, "--backend", "gpu", "--rmm-pool-size", "0.5")["spec"]
    assert float(spec["rmm"]["pool_size"]) == 0.5
    assert float(spec["kwargs"]["rmm_pool_size"]) == 0.5


def test_the_async_allocator_setting_reaches_dask_cuda_with_the_pool_as_its_initial_size(cli):
    env = {"DASK_GPUSCALE__CLUSTER__RMM__ALLOCATOR": "async"}
    spec = show(cli, "--backend", "gpu", env=env)["spec"]
    assert spec["kwargs"]["rmm_async"] is True and float(spec["kwargs"]["rmm_pool_size"]) == 0.8
    assert spec["rmm"]["allocator"] == "async"
    spec = show(cli, "--backend", "gpu", "--rmm-pool-size", "none", env=env)["spec"]
    assert spec["kwargs"]["rmm_async"] is True and "rmm_pool_size" not in spec["kwargs"]
    assert "rmm_async" not in show(cli, "--backend", "gpu")["spec"]["kwargs"]


def test_show_rmm_pool_size_none_disables_the_pool(cli):
    spec = show(cli, "--backend", "gpu", "--rmm-pool-size", "none")["spec"]
    assert spec["rmm"] is None
    assert "rmm_pool_size" not in spec["kwargs"]


# ---------------------------------------------------------------------------------------
# Planning in process (starts nothing)
# ---------------------------------------------------------------------------------------
def test_plan_nvlink_over_tcp_is_refused():
    with pytest.raises(UserError, match="NVLink was requested over TCP"):
        api.configure(profile="gpu-tcp", nvlink=True, check=False)


def test_plan_cpu_ignores_ucx_switches_with_a_note():
    _, _, spec = api.configure(backend="cpu", nvlink=True)
    assert spec.cls == "distributed.LocalCluster"
    assert any("ignored here" in n for n in spec.notes)


def test_auto_protocol_of_a_gpu_cluster_is_the_familys_and_a_set_protocol_wins():
    _, _, spec = api.configure(backend="gpu", check=False)
    assert (spec.protocol, spec.choices["protocol"]["rule_id"]) == ("tcp", "protocol.tcp")
    assert spec.kwargs["protocol"] == "tcp"
    _, _, spec = api.configure(backend="gpu", protocol="ucx", check=False)  # yours wins
    assert (spec.protocol, spec.choices["protocol"]["rule_id"]) == ("ucx", "protocol.setting")
    assert spec.kwargs["protocol"] == "ucx"


def test_auto_protocol_falls_back_to_tcp_where_the_familys_transport_is_not_installed(monkeypatch):
    monkeypatch.setitem(
        protocols._PROTOCOLS,
        "absent-test",
        protocols.Protocol(
            "absent-test", "a transport from a module not installed", module="gpuscale_absent_transport"
        ),
    )
    gpu = backends.select("gpu", check=False).family
    family = dataclasses.replace(gpu, knobs=dataclasses.replace(gpu.knobs, protocol="absent-test"))
    proto, why = protocols.choose("auto", "default", family, "cuda", False)
    assert (proto.name, why["rule_id"]) == ("tcp", "protocol.not-installed")


@pytest.fixture
def family_with_own_transport(monkeypatch):
    """The GPU family with a transport that is installed everywhere (a registered Protocol
    without a module), so the rule's every branch runs on any machine."""
    monkeypatch.setitem(
        protocols._PROTOCOLS, "plain-test", protocols.Protocol("plain-test", "test transport")
    )
    gpu = backends.select("gpu", check=False).family
    return dataclasses.replace(gpu, knobs=dataclasses.replace(gpu.knobs, protocol="plain-test"))


@pytest.mark.parametrize(
    "kind, tls, rule_id, chosen",
    [
        ("cuda", False, "protocol.family", "plain-test"),
        ("cuda", True, "protocol.tls", "tcp"),
        ("ssh", False, "protocol.remote", "tcp"),
        ("slurm", False, "protocol.remote", "tcp"),
    ],
)
def test_auto_protocol_rule_by_cluster_kind_and_tls(family_with_own_transport, kind, tls, rule_id, chosen):
    proto, why = protocols.choose("auto", "default", family_with_own_transport, kind, tls)
    assert (proto.name, why["value"], why["rule_id"], why["source"]) == (chosen, chosen, rule_id, "rule")


def test_auto_protocol_of_the_cpu_family_is_tcp():
    _, _, spec = api.configure(backend="cpu")
    assert (spec.protocol, spec.choices["protocol"]["rule_id"]) == ("tcp", "protocol.tcp")


def test_a_cluster_kept_up_for_others_gets_tcp_with_tls_under_auto():
    resolved, selection, _ = api.configure(backend="cpu", check=False)
    spec = cluster.build_spec(resolved, selection.family, served=True)
    assert (spec.protocol, spec.security) == ("tcp", "tls")


def test_plan_existing_scheduler():
    _, _, spec = api.configure(backend="cpu", scheduler="127.0.0.1:8786")
    assert spec.kind == "existing"
    assert spec.scheduler == "tcp://127.0.0.1:8786"
    assert spec.kwargs == {"address": "tcp://127.0.0.1:8786", "timeout": 10.0}
    _, _, spec = api.configure(profile="scheduler", backend="cpu")
    assert spec.scheduler == "tcp://127.0.0.1:8786" and spec.connect_timeout == 10


def test_plan_gpu_workers_and_gpus_checks():
    _, _, spec = api.configure(backend="gpu", check=False, gpus="0,1")
    assert spec.gpus == [0, 1]
    assert spec.kwargs["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert spec.workers == 2
    _, _, spec = api.configure(backend="gpu", check=False, gpus="0,1", workers=1)
    assert spec.gpus == [0] and spec.workers == 1
    with pytest.raises(UserError, match="exceeds the 2 GPU"):
        api.configure(backend="gpu", check=False, gpus="0,1", workers=3)


def test_a_groupby_run_takes_one_of_several_gpus_unless_you_set_gpus_or_workers():
    """Rule gpus.work: groupby declares that a second GPU makes it no faster, so its run takes
    the first of the visible GPUs; svd does not declare it; your --gpus or --workers win, and
    one GPU leaves nothing to choose. (Whether the memory check admits the run on that GPU is
    the GPU machine's half: tests/test_gpu.py.)"""
    from gpuscale import config, workloads
    from gpuscale.runs.session import one_gpu_choice

    groupby, svd = workloads.get("groupby"), workloads.get("svd")
    plain = config.resolve()
    d = one_gpu_choice(groupby, [0, 1], plain)
    assert d.value == [0] and d.rule_id == "gpus.work" and d.source == "rule"
    assert "one GPU of the 2 visible" in d.rule and d.numbers == {"visible": [0, 1]}
    assert one_gpu_choice(groupby, [2, 3, 5], plain).value == [2]
    assert one_gpu_choice(svd, [0, 1], plain) is None
    assert one_gpu_choice(groupby, [0], plain) is None
    for set_ in ({"cluster": {"gpus": "0,1"}}, {"cluster": {"workers": 2}}):
        assert one_gpu_choice(groupby, [0, 1], config.resolve(None, set_)) is None


def test_the_gpus_a_rule_picks_reach_the_gpu_cluster_spec_and_its_choices():
    """The plan carries rule gpus.work's GPUs to the GPU cluster kind: one worker on that GPU,
    CUDA_VISIBLE_DEVICES naming it, and the recorded choice the rule's, not every visible GPU."""
    from gpuscale import backends, cluster, config, workloads
    from gpuscale.runs.session import one_gpu_choice

    resolved = config.resolve(None, {"backend": "gpu"})
    family = backends.select("gpu", "dataframe", check=False).family
    one = one_gpu_choice(workloads.get("groupby"), [1, 0], resolved)
    spec = cluster.build_spec(resolved, family, "dataframe", gpus=one)
    assert spec.gpus == [1] and spec.workers == 1
    assert spec.kwargs["CUDA_VISIBLE_DEVICES"] == "1" and spec.kwargs["n_workers"] == 1
    assert spec.choices["gpus"].rule_id == "gpus.work"
    assert spec.choices["gpus"].record()["rule"].startswith("gpus.work: groupby takes one GPU")


def test_plan_bad_memory_limit():
    with pytest.raises(UserError, match="invalid memory limit"):
        api.configure(backend="cpu", memory_limit="lots")


# ---------------------------------------------------------------------------------------
# Real clusters
# ---------------------------------------------------------------------------------------
def test_session_starts_scopes_config_and_closes():
    before = dask.config.get("array.backend", None)
    with gpuscale.session(backend="numpy", workers=1, threads_per_worker=1) as s:
        cl = s.cluster
        assert cl.status == Status.running
        assert s.dashboard_link
        assert len(s.client.scheduler_info(n_workers=-1)["workers"]) == 1
        assert dask.config.get("array.backend") == "numpy"
        assert dask.config.get("dataframe.backend") == "pandas"
        info = s.cluster_info()
        assert info["running"]["workers"] == 1 and info["running"]["threads"] == 1
    assert s.client is None and s.cluster is None
    assert cl.status == Status.closed
    assert dask.config.get("array.backend", None) == before
    with pytest.raises(UserError, match="not open"):
        s.run("svd", rows=100, cols=2)


def test_session_closes_cluster_on_error():
    holder = {}
    with pytest.raises(RuntimeError, match="boom"):
        with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
            holder["cluster"] = s.cluster
            raise RuntimeError("boom")
    assert holder["cluster"].status == Status.closed


def test_run_on_existing_scheduler_leaves_it_running(tmp_path):
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as lc:
        addr = lc.scheduler_address
        r = gpuscale.run(
            "svd",
            backend="cpu",
            cluster_settings={"scheduler": addr},
            rows=20_000,
            cols=20,
            repeat=1,
            warmup=0,
            results_dir=str(tmp_path / "res"),
        )
        assert r.valid
        assert r.cluster["kind"] == "existing"
        assert r.cluster["scheduler"] == addr
        assert r.cluster["running"] == {"workers": 1, "threads": 2, "scheduler": addr}
        # gpuscale closed its client only: the user's cluster and its worker are still there
        assert lc.status == Status.running
        assert len(lc.scheduler_info["workers"]) == 1


def test_a_gpu_held_by_another_process_is_refused_before_the_workers_start():
    """The pool check reads each selected GPU's free memory (nvml) against the RMM pool it asks:
    a GPU that another cluster holds would make the workers fail or hang allocating it."""
    from gpuscale import api
    from gpuscale.cluster import cuda

    gib = 2**30
    _, _, spec = api.configure(backend="gpu", gpus="0,1", check=False)
    assert spec.rmm["pool_size"] == 0.8
    free = [
        {"index": 0, "memory_bytes": 80 * gib, "free_bytes": 79 * gib},
        {"index": 1, "memory_bytes": 80 * gib, "free_bytes": 15 * gib},
    ]
    with pytest.raises(UserError) as e:
        cuda.check_free_memory(spec, free)
    assert "GPU 1 has 15.00 GiB free of 80.00 GiB" in str(e.value) and "64.00 GiB" in str(e.value)
    assert "--rmm-pool-size" in e.value.fix
    cuda.check_free_memory(spec, free[:1] + [{**free[1], "free_bytes": 70 * gib}])  # fits: no error
    _, _, small = api.configure(backend="gpu", gpus="0,1", rmm_pool_size="8GB", check=False)
    cuda.check_free_memory(small, free)
    assert cuda.pool_bytes("8GB", 80 * gib) == 8 * 10**9 and cuda.pool_bytes(None, 1) is None


def test_a_refused_gpu_names_who_holds_it_and_this_process_first():
    """The refusal says who holds the GPU from NVML's process list, largest first; when it is
    the very process asking (device memory it kept from an earlier cluster), it says so, and the
    fix is to let go of it or start a new process rather than to look elsewhere."""
    from gpuscale.cluster import cuda

    gib = 2**30
    who, mine = cuda.held_by([(41, 2 * gib), (7, 64 * gib)], own_pid=7)
    assert who == "this process holds 64.00 GiB; process 41 holds 2.00 GiB" and mine
    who, mine = cuda.held_by([(41, 60 * gib), (7, 1 * gib)], own_pid=7)
    assert who.startswith("process 41 holds 60.00 GiB") and not mine
    assert cuda.held_by([], own_pid=7) == ("another process holds the rest", False)


def test_ucx_before_1_22_keeps_received_device_memory_and_1_22_lets_go():
    """UCX 1.21's CUDA IPC keeps a sender's allocation mapped in the receiving process until it
    exits; 1.22 closes those handles. TCP never maps another process's memory."""
    from gpuscale.cluster import protocols

    assert protocols.ucx_keeps_sent_memory((1, 21, 0))
    assert protocols.ucx_keeps_sent_memory((1, 19))
    assert not protocols.ucx_keeps_sent_memory((1, 22, 0))
    assert not protocols.ucx_keeps_sent_memory((2, 0, 0))
    assert not protocols.get("tcp").keeps_sent_device_memory()


def test_a_gpu_this_process_holds_after_a_ucx_cluster_is_refused_with_a_new_process_as_the_fix():
    """UCX before 1.22 leaves a worker's whole RMM pool mapped in the process that received its
    results, until that process exits: when this process holds the refused GPU and started a
    cluster over such a protocol, the fix names that cluster and a new process; other holders
    get their own fixes."""
    from gpuscale.cluster import cuda

    fix = cuda._free_memory_fix(True, ["ucx"])
    assert fix.startswith("a UCX cluster earlier in this process left its workers' device memory")
    assert "new Python process" in fix and "--rmm-pool-size" in fix
    assert cuda._free_memory_fix(True, []).startswith("let go of what this process keeps")
    assert cuda._free_memory_fix(False, ["ucx"]).startswith("free that GPU (nvidia-smi")


def test_the_workers_are_listed_while_the_client_refreshes_its_identity():
    """gpuscale.cluster.workers returns every worker on every call, even with the client's
    periodic identity update (which stores one without workers) running every 5 ms:
    Client.scheduler_info(n_workers=-1) returns what is stored, so it missed the workers in a
    few percent of the calls here (how `cluster up` once reported 0 of the 2 workers it had
    waited for)."""
    import dask
    from distributed import Client, LocalCluster

    from gpuscale import cluster

    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}):
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc,
            Client(lc) as client,
        ):
            client.wait_for_workers(2)
            counts = [len(cluster.workers(client)) for _ in range(500)]
            assert set(counts) == {2}
            assert set(cluster.identity(client)["workers"]) == set(lc.scheduler.workers)


def _failures_logged(message: str, *args) -> list[str]:
    """In a worker: what ``distributed.worker`` lets through of ``message`` logged for a peer's
    close and for another error, as the worker logs them (``logger.exception`` inside the
    ``except``)."""
    import logging

    from distributed.comm import CommClosedError

    log = logging.getLogger("distributed.worker")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(type(record.exc_info[1]).__name__)
    log.addHandler(handler)
    try:
        for exc in (CommClosedError("in <TLS (closed)>: Stream is closed"), OSError("refused")):
            try:
                raise exc
            except OSError:
                log.exception(message, *args)
    finally:
        log.removeHandler(handler)
    return seen


def test_a_heartbeat_cut_by_the_closing_scheduler_leaves_no_traceback_but_a_lost_one_shows(cpu_session):
    # the race of `cluster down`: the scheduler closes the connection of a heartbeat in flight
    seen = cpu_session.client.run(_failures_logged, "Failed to communicate with scheduler during heartbeat.")
    assert len(seen) == 2 and all(v == ["OSError"] for v in seen.values()), seen


def test_a_send_cut_by_its_peer_leaves_no_traceback_but_another_send_error_shows(cpu_session):
    # a client interrupted while it fetches a result straight from a worker closes the connection;
    # it reports the interruption itself, in one line
    seen = cpu_session.client.run(
        _failures_logged, "failed during get data with %s -> %s", "tcp://a", "tcp://b"
    )
    assert len(seen) == 2 and all(v == ["OSError"] for v in seen.values()), seen


def _imported(modules) -> list[bool]:
    import sys

    return [m in sys.modules for m in modules]


@pytest.mark.parametrize(
    ("collection", "expected"),
    [("dataframe", [True, True]), ("array", [False, True]), (None, [False, False])],
)
def test_workers_import_their_collections_library_before_they_join(collection, expected):
    # the CPU family's pre-import for the work's collection, and only that one: a DataFrame
    # cluster's workers hold dask.dataframe (which imports dask.array) before the first task,
    # an array cluster's dask.array alone, a session for any work neither
    with gpuscale.session(backend="cpu", workers=2, threads_per_worker=1, collection=collection) as s:
        seen = s.client.run(_imported, ["dask.dataframe", "dask.array"])
    assert len(seen) == 2 and all(v == expected for v in seen.values()), seen


def test_closing_a_gpu_cluster_waits_for_its_worker_processes_to_exit():
    """A GPU worker's memory is free only once its process has gone. ``wait_exited`` returns
    once real processes have exited (a child that has exited but is not yet reaped counts as
    gone), and names those still running when its time is up; ``close_and_wait`` on a real
    LocalCluster leaves none of its worker processes running."""
    import subprocess
    import sys

    from gpuscale.cluster import cuda

    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert cuda.wait_exited([slow.pid], timeout=0.2) == [slow.pid]
        assert cuda.wait_exited([slow.pid, done.pid], timeout=30) == []
        assert slow.poll() == 0 and done.poll() == 0
    finally:
        slow.kill()
        slow.wait()
        done.wait()
    lc = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    pids = cuda.worker_pids(lc)
    assert len(pids) == 2
    assert cuda.close_and_wait(lc) == []
    assert not any(cuda._running(p) for p in pids)


def _count_relayed_gathers(dask_scheduler=None) -> None:
    """Count the scheduler's ``gather`` requests from now on (results it relays to a client)."""
    handler = dask_scheduler.handlers["gather"]
    calls: list[int] = []

    async def counted(*args, **kwargs):
        calls.append(1)
        return await handler(*args, **kwargs)

    dask_scheduler.handlers["gather"] = counted
    dask_scheduler.extensions["relayed-gathers"] = calls


@pytest.mark.parametrize("gather, relayed", [("auto", False), ("scheduler", True)])
def test_results_of_user_code_come_straight_from_the_workers_of_a_cluster_started_here(gather, relayed):
    """A session on a cluster it starts fetches the user's results from the workers
    (``cluster.gather`` auto: rule ``gather.direct``), never relayed by the scheduler; set to
    ``scheduler`` it is relayed, as plain Dask does."""
    import dask.dataframe as dd
    import pandas as pd

    with gpuscale.session("cpu", workers=2, threads_per_worker=1, gather=gather, engine="dask") as s:
        s.client.run_on_scheduler(_count_relayed_gathers)
        df = dd.from_pandas(pd.DataFrame({"a": range(10_000)}), npartitions=4)
        assert int((df.a * 2).sum().compute()) == 2 * sum(range(10_000))
        assert len((df[df.a % 2 == 0]).compute()) == 5_000
        n = s.client.run_on_scheduler(
            lambda dask_scheduler: len(dask_scheduler.extensions["relayed-gathers"])
        )
        chosen = s.spec.choices["gather"]
    assert (n > 0) is relayed, n
    assert chosen.value == ("direct" if gather == "auto" else "scheduler")
    assert chosen.rule_id == ("gather.direct" if gather == "auto" else "gather.setting")
