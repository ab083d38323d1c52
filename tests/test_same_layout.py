"""One layout rule (``Family.layout_rule``) for ``gpuscale run``, ``explain``, ``cluster show``
and ``cluster up``: the same flags build the same workers x threads; the record's
``knobs.threads_per_worker`` is the cluster's; a record's dashboard link is marked as no
longer live once its cluster has closed. Real processes and real clusters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import _clean_environ
from distributed.deploy.utils import nprocesses_nthreads

pytestmark = pytest.mark.timeout(300)

FLAG_SETS = [
    (),
    ("--workers", "2"),
    ("--threads-per-worker", "1"),
    ("--workers", "1", "--threads-per-worker", "1"),
    ("--threads-per-worker", "2"),
]
SVD = ("run", "svd", "--rows", "20000", "--cols", "20", "--repeat", "1", "--warmup", "0")


def ok_json(p) -> dict:
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("flags", FLAG_SETS, ids=[" ".join(f) or "defaults" for f in FLAG_SETS])
def test_cluster_show_and_run_plan_the_same_layout(cli, flags):
    show = ok_json(cli("cluster", "show", "--backend", "cpu", "--for", "array", *flags, "--json"))["spec"]
    # worker processes, as `cluster show` plans them (small work alone runs in this process)
    plan = ok_json(cli("explain", "svd", "--backend", "cpu", *flags, "--processes", "yes", "--json"))[
        "cluster"
    ]
    assert (show["workers"], show["threads_per_worker"]) == (plan["workers"], plan["threads_per_worker"])
    frames = ok_json(cli("cluster", "show", "--backend", "cpu", "--for", "dataframe", *flags, "--json"))[
        "spec"
    ]
    grp = ok_json(cli("explain", "groupby", "--backend", "cpu", *flags, "--processes", "yes", "--json"))[
        "cluster"
    ]
    assert (frames["workers"], frames["threads_per_worker"]) == (grp["workers"], grp["threads_per_worker"])


def test_a_cluster_for_any_work_is_laid_out_as_plain_dask_lays_out_its_local_cluster(cli):
    show = ok_json(cli("cluster", "show", "--backend", "cpu", "--json"))["spec"]
    assert (show["workers"], show["threads_per_worker"]) == nprocesses_nthreads(len(os.sched_getaffinity(0)))


def test_cluster_up_and_run_build_the_same_cluster_and_the_record_says_so(cli, tmp_path):
    """`cluster up --for array` and `run svd` start the same workers x threads;
    the record's knobs.threads_per_worker is the cluster's; its dashboard link is marked live
    only while its cluster is up."""
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuscale",
            "cluster",
            "up",
            "--backend",
            "cpu",
            "--for",
            "array",
            "--security",
            "off",
            "--json",
        ],
        cwd=str(tmp_path),
        env=_clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        d = json.loads(up.stdout.readline())
        res = tmp_path / "res"
        own = ok_json(cli(*SVD, "--backend", "cpu", "--processes", "yes", "--json", "--results-dir", res))
        running = own["cluster"]["running"]
        assert (running["workers"], running["threads"]) == (d["workers"], d["threads"])
        assert own["cluster"]["threads_per_worker"] == d["threads_per_worker"]
        assert own["knobs"]["threads_per_worker"] == d["threads_per_worker"] == d["threads"] // d["workers"]
        assert (
            own["knobs"]["family_threads_per_worker"] == 4
        )  # the CPU family's array value, capped by the cores
        assert "family for array work" in d["layout"]
        # gpuscale started (and closed) this run's cluster: its link is a past one, in the output and the file
        assert own["dashboard_link"] and own["dashboard_link_live"] is False
        assert json.loads(open(own["path"]).read())["dashboard_link_live"] is False
        # on the running cluster: live when printed (the cluster is still up), unknown in the file
        on = ok_json(
            cli(
                *SVD,
                "--backend",
                "cpu",
                "--scheduler",
                d["scheduler"],
                "--no-in-cluster",
                "--json",
                "--results-dir",
                res,
            )
        )
        assert on["dashboard_link"] == d["dashboard"] and on["dashboard_link_live"] is True
        assert on["knobs"]["threads_per_worker"] == d["threads_per_worker"]
        assert json.loads(open(on["path"]).read())["dashboard_link_live"] is None
        rows = ok_json(cli("results", "list", res, "--json"))
        assert {r["path"]: r["dashboard_link_live"] for r in rows} == {own["path"]: False, on["path"]: None}
        shown = cli("results", "list", res)
        assert shown.returncode == 0
        down = cli("cluster", "down", d["scheduler"])
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=60) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def test_rendered_record_says_the_link_was(cli, tmp_path):
    from rich.console import Console

    from gpuscale.records import report, results

    res = tmp_path / "res"
    rec = ok_json(
        cli(
            *SVD,
            "--backend",
            "cpu",
            "--workers",
            "1",
            "--threads-per-worker",
            "1",
            "--json",
            "--results-dir",
            res,
        )
    )
    r = results.load(rec["path"])
    assert r.dashboard_link_live is False
    console = Console(width=250, record=True)
    console.print(report.result_table(r))
    text = console.export_text()
    assert f"{r.dashboard_link} (was, during the run: its cluster has closed)" in text
    assert "(was, during the run" in report.result_html(r)
    p = cli(
        *SVD,
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--threads-per-worker",
        "1",
        "--results-dir",
        res,
        env={"COLUMNS": "250"},
    )
    assert p.returncode == 0 and "(was, during the run: its cluster has closed)" in p.stdout, p.stdout
