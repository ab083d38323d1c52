"""explain's output and the record's ``explained`` section stay what they were while the
layers that make the choices change (see tests/explained_cases.py): the cluster layer records
its own choices and explain lays them out."""

from __future__ import annotations

import json
import pathlib

import explained_cases as cases
import pytest

from gpuscale import machine

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "explained.json").read_text())
CORES = 2
"""The golden file was made on a machine with this many usable cores (CI's): the thread
layout in it depends on them."""

pytestmark = pytest.mark.skipif(
    machine.usable_cores() != CORES, reason=f"the golden file's layouts are for {CORES} cores"
)


def _ids(items):
    return [" ".join(f"{k}={v}" for k, v in c.items()) for c in items]


@pytest.mark.parametrize("i", range(len(cases.EXPLAIN)), ids=_ids(cases.EXPLAIN))
def test_explain_unchanged(i):
    case = cases.EXPLAIN[i]
    if machine.gpus() and (case.get("backend") in ("gpu", "cupy") or "gpu" in str(case.get("profile"))):
        pytest.skip("the golden GPU plans are those of a machine without a visible GPU")
    got = json.loads(json.dumps(cases.explain_case(case), default=str))
    assert got == GOLDEN["explain"][i]


@pytest.mark.parametrize("i", range(len(cases.RUNS)), ids=_ids(cases.RUNS))
def test_record_explained_unchanged(i):
    got = json.loads(json.dumps(cases.run_case(cases.RUNS[i]), default=str))
    assert got == GOLDEN["runs"][i]


def test_explain_lays_out_each_ssh_host_from_the_spec(cli):
    """`explain --deploy ssh --ssh-hosts a,b,b,c`: the scheduler on a, two worker entries on b
    and one on c, each with what the spec gives its workers (class, threads, memory limit, RMM
    pool, spilling, transports, TLS); the GPU spec passes its device memory limit to the
    CUDAWorker it starts; the text output has the per-host table."""
    import gpuscale.api as api

    d = api.explain("svd", backend="cpu", cluster_settings={"deploy": "ssh", "ssh_hosts": "a,b,b,c"})
    per = d["per_host"]
    assert list(per) == ["a", "b", "c"]
    assert per["a"] == {"scheduler": True, "worker_entries": 0}
    opts = d["cluster"]["kwargs"]["worker_options"]
    for host, n in (("b", 2), ("c", 1)):
        e = per[host]
        assert e["scheduler"] is False and e["worker_entries"] == n == e["workers"]
        assert e["worker_class"] == d["cluster"]["kwargs"]["worker_class"] == "distributed.Nanny"
        assert (
            e["threads_per_worker"]
            == opts["nthreads"]
            == d["explained"]["cluster"]["threads_per_worker"]["value"]
        )
        assert e["memory_limit"] == d["explained"]["cluster"]["memory_limit"]["rule"]
        assert e["spilling"] == d["explained"]["cluster"]["spilling"]["value"]
        assert e["transports"] == {"selection": "tcp"} and e["tls"] is True and e["rmm_pool_size"] is None
    g = api.explain(
        "groupby",
        backend="gpu",
        protocol="ucx",
        cluster_settings={
            "deploy": "ssh",
            "ssh_hosts": "a,b",
            "security": "off",
            "device_memory_limit": "30GB",
            "rmm_pool_size": "20GB",
        },
    )
    b = g["per_host"]["b"]
    assert b["worker_class"] == "dask_cuda.CUDAWorker"
    assert b["workers"] == "1 x dask_cuda.CUDAWorker: one worker per GPU of b"
    assert (
        b["device_memory_limit"] == "30GB" == g["cluster"]["kwargs"]["worker_options"]["device_memory_limit"]
    )
    assert b["rmm_pool_size"] == "20GB" and b["tls"] is False
    assert b["transports"] == {"selection": "automatic (UCX chooses)"}
    local = api.explain("svd", backend="cpu")
    assert "per_host" not in local
    p = cli(
        "explain",
        "svd",
        "--backend",
        "cpu",
        "--deploy",
        "ssh",
        "--ssh-hosts",
        "a,b,b,c",
        env={"COLUMNS": "250"},
    )
    assert p.returncode == 0, p.stderr
    assert "per host: what runs there and what its workers get" in p.stdout
    rows = {
        line.split()[0]: line for line in p.stdout.splitlines() if line.split()[:1] in (["a"], ["b"], ["c"])
    }
    assert "scheduler" in rows["a"] and "2 worker entries" in rows["b"] and "1 worker entry" in rows["c"]
    assert "distributed.Nanny" in rows["b"] and "selection=tcp" in rows["c"]
