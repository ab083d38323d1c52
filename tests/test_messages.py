"""Dask's batched control streams (``cluster.message-interval``, gpuscale.wire.messages) and
the runner's cheap test for an already persisted collection: the two fixed costs per run this
file guards. Every test reads the intervals off the real streams of real processes."""

from __future__ import annotations

import dask
import dask.array as da
import dask.dataframe as dd
import pandas as pd
import pytest
from distributed import Client, LocalCluster

import gpuscale
from gpuscale.cluster import messages
from gpuscale.runs import runner

DASK = messages.DASK_DEFAULTS


def test_auto_sets_every_stream_of_a_cluster_gpuscale_starts():
    with gpuscale.session(backend="cpu", workers=2, threads_per_worker=1) as s:
        got = messages.intervals(s.client)
        ch = s.spec.choices["message_interval"]
        # a worker that joins later (a restart) gets it too: its process inherits the preload
        s.client.restart()
        again = messages.intervals(s.client)
    want = messages.AUTO_S
    assert got == {
        "client -> scheduler": want,
        "scheduler -> client": want,
        "scheduler -> worker": [want],
        "worker -> scheduler": [want],
    }
    assert again["scheduler -> worker"] == [want] and again["worker -> scheduler"] == [want]
    assert ch["value"] == want and ch["source"] == "rule" and "10 ms" in ch["rule"]


@pytest.mark.gpu
def test_a_gpu_cluster_sets_every_stream_to_the_interval_asked():
    """dask-cuda's workers kept Dask's 2 ms on their own stream with 0 asked (an H200): read off
    the real streams at 1 ms, which no stream has by default."""
    from conftest import gpu_probe

    ok, why = gpu_probe()
    if not ok:
        pytest.skip(f"no usable GPU: {why}")
    with gpuscale.session(backend="gpu", gpus="0", message_interval="1ms") as s:
        got = messages.intervals(s.client)
    assert got == {
        "client -> scheduler": 0.001,
        "scheduler -> client": 0.001,
        "scheduler -> worker": [0.001],
        "worker -> scheduler": [0.001],
    }, got


def test_dask_keeps_distributeds_own_intervals():
    with dask.config.set({"gpuscale.cluster.message-interval": "dask"}):
        with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
            got = messages.intervals(s.client)
            ch = s.spec.choices["message_interval"]
    assert got == {
        "client -> scheduler": DASK["client -> scheduler"],
        "scheduler -> client": DASK["scheduler -> client"],
        "scheduler -> worker": [DASK["scheduler -> worker"]],
        "worker -> scheduler": [DASK["worker -> scheduler"]],
    }
    assert ch["value"] is None and ch["source"] == "dask.config"


def test_a_running_cluster_keeps_its_workers_streams():
    """Joining someone's cluster sets this client's own two streams only."""
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as lc:
        with gpuscale.session(backend="cpu", scheduler=lc.scheduler_address, message_interval="2ms") as s:
            got = messages.intervals(s.client)
            ch = s.spec.choices["message_interval"]
        with Client(lc) as plain:  # another client of the same cluster: untouched
            other = messages.intervals(plain)
    assert got["client -> scheduler"] == 0.002 and got["scheduler -> client"] == 0.002
    assert got["scheduler -> worker"] == [DASK["scheduler -> worker"]]
    assert got["worker -> scheduler"] == [DASK["worker -> scheduler"]]
    assert other["client -> scheduler"] == DASK["client -> scheduler"]
    assert other["scheduler -> client"] == DASK["scheduler -> client"]
    assert "running cluster's" in ch["rule"]


def test_a_bad_interval_is_one_line_exit_2(cli):
    p = cli("cluster", "show", env={"DASK_GPUSCALE__CLUSTER__MESSAGE_INTERVAL": "5s"})
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "message-interval" in lines[0] and "1ms" in lines[0]
    assert "Traceback" not in p.stderr


def test_cluster_show_names_the_interval(cli):
    import json

    p = cli("cluster", "show", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["spec"]["message_interval"] == messages.AUTO_S


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as lc,
        Client(lc) as c,
    ):
        yield c


def test_persisted_is_read_off_the_expression(client, monkeypatch):
    df = dd.from_pandas(pd.DataFrame({"k": [1, 2, 1, 3], "v": [1.0, 2.0, 3.0, 4.0]}), npartitions=2)
    held = client.persist(df)
    x = da.ones(10, chunks=5)
    held_x = client.persist(x)
    # an expression not yet persisted must not be lowered to find that out (it was, twice
    # per repeat: 10-20 ms of a small groupby)
    lowered = []
    from dask._expr import Expr

    real = Expr.lower_completely
    monkeypatch.setattr(
        Expr, "lower_completely", lambda self, *a, **k: lowered.append(self) or real(self, *a, **k)
    )
    grouped = held.groupby("k").v.sum()
    assert runner._persisted(held)
    assert not runner._persisted(grouped)
    assert not runner._persisted(df)
    assert lowered == []
    assert runner._persisted(held_x) and not runner._persisted(x)
    assert not runner._persisted(held_x + 1)
    # and a run built from them still computes the right answer
    assert grouped.compute().to_dict() == {1: 4.0, 2: 2.0, 3: 4.0}
