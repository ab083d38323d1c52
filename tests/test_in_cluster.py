"""The runner in the cluster: `gpuscale run ... --scheduler ADDRESS` sends its runner to a
worker of that cluster (``run.in-cluster: auto``) and writes the record it returns here.

A real 2-worker LocalCluster per module (worker processes), real subprocesses for the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import _clean_environ, as_from_a_terminal, files_under, fresh_gpuscale
from distributed import Client, LocalCluster, WorkerPlugin

import gpuscale
from gpuscale import UserError, api
from gpuscale.runs import remote

SMALL = dict(rows=20_000, keys=100, repeat=2, warmup=0)


@pytest.fixture(scope="module")
def cluster():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        Client(c, set_as_default=False) as client,
    ):
        pids = client.run(os.getpid)
        yield c.scheduler_address, pids, client


def _scheduler_clients(client) -> set[str]:
    return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.clients)))


def test_run_against_a_running_scheduler_runs_on_a_worker(cluster, results_dir):
    addr, pids, _ = cluster
    r = gpuscale.run(
        "groupby", backend="cpu", cluster_settings={"scheduler": addr}, results_dir=str(results_dir), **SMALL
    )
    assert r.valid is True and len(r.times_s) == 2
    runner = r.info["runner"]
    assert runner["where"] == "cluster"
    assert runner["worker"] in pids and runner["pid"] == pids[runner["worker"]] != os.getpid()
    assert 0 < runner["runner_s"] <= runner["round_trip_s"]
    assert r.startup_s >= runner["client_connect_s"] > 0
    entry = r.explained["cluster"]["runner"]
    assert entry["value"] == f"cluster (worker {runner['worker']})"
    assert entry["source"] == "default" and entry["rule"].startswith("auto: a running scheduler was named")
    # the record was written here, by this process, with what the worker measured
    (rec,) = files_under(results_dir)
    assert str(rec) == r.path
    on_disk = json.loads(rec.read_text())
    assert on_disk["info"]["runner"] == runner and on_disk["times_s"] == r.times_s
    assert on_disk["cluster"]["kind"] == "existing" and on_disk["audit"]["clean"] is True


class _RunnerResultTypes(WorkerPlugin):
    """A worker plugin: the type of every value the runner task left in a worker's memory."""

    name = "runner-result-types"

    def setup(self, worker):
        self.worker, self.seen = worker, []

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory" and str(key).startswith("gpuscale-runner-"):
            self.seen.append(type(self.worker.data[key]).__name__)


def test_the_runner_sends_its_record_back_as_json_text(cluster):
    """What crosses from the cluster to this process is the record's JSON text (read here as
    data), not a pickled object."""
    addr, _, client = cluster
    client.register_plugin(_RunnerResultTypes())
    try:
        r = gpuscale.run("groupby", backend="cpu", cluster_settings={"scheduler": addr}, write=False, **SMALL)
        assert r.valid and r.info["runner"]["where"] == "cluster"
        seen = client.run(lambda dask_worker: dask_worker.plugins["runner-result-types"].seen)
        assert sorted(t for ts in seen.values() for t in ts) == ["str"], seen
    finally:
        client.unregister_worker_plugin("runner-result-types")
    with pytest.raises(UserError, match="sent back a dict, not a record's JSON text"):
        remote._record({"valid": True})


def test_no_in_cluster_keeps_the_runner_here(cluster):
    addr, _, _ = cluster
    r = gpuscale.run(
        "groupby", backend="cpu", cluster_settings={"scheduler": addr}, in_cluster=False, write=False, **SMALL
    )
    assert r.valid and r.info["runner"] == {"where": "client", "worker": None}
    assert r.explained["cluster"]["runner"] == {
        "value": "client",
        "source": "flag",
        "rule": "run.in-cluster is false: the runner stays in this process",
    }


def test_workers_of_another_gpuscale_version(cluster, monkeypatch):
    addr, _, _ = cluster
    monkeypatch.setattr(remote, "__version__", "0.0.0+other")  # what this process sends
    r = gpuscale.run("groupby", backend="cpu", cluster_settings={"scheduler": addr}, write=False, **SMALL)
    assert r.valid and r.info["runner"]["where"] == "client"
    rule = r.explained["cluster"]["runner"]["rule"]
    assert "the workers have gpuscale" in rule and "0.0.0+other" in rule and "stays in this process" in rule
    with pytest.raises(
        UserError, match=r"--in-cluster: the workers have gpuscale .*install the same gpuscale"
    ):
        gpuscale.run(
            "groupby",
            backend="cpu",
            cluster_settings={"scheduler": addr},
            in_cluster=True,
            write=False,
            **SMALL,
        )


def test_placement_rules(cluster, tmp_path):
    addr, _, _ = cluster

    def where(in_cluster="auto", scheduler=addr, **files):
        resolved, _, spec = api.configure(backend="cpu", scheduler=scheduler, in_cluster=in_cluster)
        return remote.placement(resolved, spec, **files)

    assert where().value == "cluster"
    local = where(scheduler=None)
    assert local.value == "client" and "starts its own cluster" in local.rule
    for files, flag in (
        ({"trace": "t"}, "--trace"),
        ({"output": "o.csv"}, "--output"),
        ({"hooks": True}, "--dashboard"),
        ({"data": object()}, "data= is a collection"),
    ):
        auto = where(**files)
        assert auto.value == "client" and flag in auto.rule and "stays here" in auto.rule
        with pytest.raises(UserError, match=f"--in-cluster cannot run this: {flag}"):
            where(in_cluster=True, **files)
    assert where(data=str(tmp_path / "x.parquet")).value == "cluster"  # a path the workers read
    with pytest.raises(UserError, match="no scheduler was named"):
        where(in_cluster=True, scheduler=None)


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", *map(str, args)],
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_probe(cwd, *args):
    """``gpuscale *args`` in a fresh process: (the JSON record it printed last, {chunk library
    module: imported})."""
    printed, modules = fresh_gpuscale(cwd, *args, timeout=300)
    return json.loads(printed[-1]), {
        m: m in modules for m in ("pandas", "dask.dataframe", "dask.array", "cupy", "cudf")
    }


def test_cli_against_a_running_scheduler_imports_no_dataframe_library(cluster, tmp_path):
    """The point of the runner in the cluster: this process imports neither pandas nor
    dask.dataframe (nor, on a GPU, cuDF), the workers already have them."""
    addr, pids, _ = cluster
    res = tmp_path / "res"
    record, imported = run_probe(
        tmp_path,
        "run",
        "groupby",
        "--backend",
        "cpu",
        "--scheduler",
        addr,
        "--rows",
        "20000",
        "--keys",
        "100",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--json",
        "--results-dir",
        res,
    )
    assert record["valid"] is True and record["info"]["runner"]["worker"] in pids
    assert not any(imported.values()), imported
    assert [str(f) for f in files_under(res)] == [record["path"]]


def test_cli_in_cluster_bad_input_is_one_line(cluster, tmp_path):
    addr, _, _ = cluster
    for args, needle in (
        (("--in-cluster",), "no scheduler was named"),
        (
            ("--in-cluster", "--scheduler", addr, "--trace", tmp_path / "t"),
            "--in-cluster cannot run this: --trace",
        ),
    ):
        p = _cli("run", "groupby", "--backend", "cpu", "--rows", "1000", "--keys", "10", *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "t").exists()
    p = subprocess.run(
        [sys.executable, "-m", "gpuscale", "run", "groupby", "--scheduler", addr],
        env=_clean_environ({"DASK_GPUSCALE__RUN__IN_CLUSTER": "sometimes"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "run.in-cluster" in p.stderr and "must be auto, true or false" in p.stderr


def test_ctrl_c_stops_the_runner_in_the_cluster(cluster, tmp_path):
    """Ctrl-C ends the client; the runner on the worker sees its client gone and stops at the
    next repeat (it would otherwise run all of them, its own client holding the data)."""
    addr, _, client = cluster
    before = _scheduler_clients(client)
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "run",
            "groupby",
            "--backend",
            "cpu",
            "--scheduler",
            addr,
            "--rows",
            "20000",
            "--keys",
            "100",
            "--repeat",
            "100000",
            "--results-dir",
            tmp_path / "res",
        ],
        env=_clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_scheduler_clients(client) - before) < 2:  # this CLI's client and the runner's
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.1)
        time.sleep(1.0)  # a few repeats in
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and "interrupted" in err, err
    deadline = time.monotonic() + 20
    while _scheduler_clients(client) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _scheduler_clients(client) - before, "the runner's client is still connected"
    assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0
    assert not (tmp_path / "res").exists() or not files_under(tmp_path / "res")


def _frozen(client) -> dict[str, int]:
    import gc

    return client.run(gc.get_freeze_count)


@pytest.mark.parametrize("in_cluster", [True, False])
def test_a_warmed_workers_heap_stays_settled_through_runs(in_cluster):
    """The warm-up of a cluster kept up settles each worker's heap in the collector's permanent
    generation; a run's own collection leaves that in place, in the cluster or from here."""
    from gpuscale.backends import registry
    from gpuscale.runs.serve import worker_ready

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        Client(c, set_as_default=False) as client,
    ):
        assert set(_frozen(client).values()) == {0}
        registry.select("cpu").family.warm_up(client, worker_ready)
        settled = _frozen(client)
        assert min(settled.values()) > 0
        r = gpuscale.run(
            "groupby",
            backend="cpu",
            cluster_settings={"scheduler": c.scheduler_address},
            in_cluster=in_cluster,
            write=False,
            **SMALL,
        )
        assert r.valid and r.info["runner"]["where"] == ("cluster" if in_cluster else "client")
        after = _frozen(client)
        # objects frozen and since freed leave it; an unfreeze would empty it
        assert all(after[w] > settled[w] // 2 for w in settled), (settled, after)
