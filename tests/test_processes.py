"""Where a CPU cluster's workers run (rules ``processes.*``, gpuscale/plan/layout.py): small work
on generated data in this process's threads, without a dashboard; processes where you set a
layout, where the work is large, or where you ask for them. Through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def _processes(d: dict) -> dict:
    return d["explained"]["cluster"]["processes"]


def test_small_work_runs_in_this_process_without_a_dashboard(cli, tmp_path):
    p = cli("run", "svd", "--backend", "cpu", "--json", "--results-dir", tmp_path / "res")
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["valid"] is True
    assert r["cluster"]["kwargs"]["processes"] is False and r["cluster"]["workers"] == 1
    assert r["cluster"]["kwargs"]["dashboard_address"] is None and r["dashboard_link"] is None
    assert r["cluster"]["kwargs"]["protocol"] == "inproc", r["cluster"]["kwargs"]
    assert r["explained"]["cluster"]["protocol"]["rule_id"] == "protocol.in-process"
    chosen = _processes(r)
    assert chosen["value"] is False and chosen["rule_id"] == "processes.small-work", chosen
    assert "planned memory" in chosen["rule"] and "512.00 MiB" in chosen["rule"]


def test_a_run_in_this_process_leaves_its_process_group_as_it_was(tmp_path):
    """Worker processes leave the terminal's process group as they start; a worker in this
    process must not take this process out of it (Ctrl-C would no longer reach it)."""
    script = tmp_path / "small.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            import gpuscale
            if __name__ == "__main__":
                before = os.getpgrp()
                r = gpuscale.run("svd", backend="cpu", results_dir=sys.argv[1])
                print(json.dumps({"valid": r.valid, "kept": os.getpgrp() == before,
                                  "processes": r.cluster["kwargs"]["processes"]}))
            """
        )
    )
    p = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=120,
    )  # in the test's process group, which it must stay in
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1]) == {"valid": True, "kept": True, "processes": False}


def test_a_small_file_of_yours_runs_in_this_process(cli, tmp_path):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = 200_000
    frame = pd.DataFrame({"k": rng.integers(0, 100, rows), "x": rng.random(rows)})
    frame.to_parquet(tmp_path / "small.parquet")
    p = cli(
        "run", "groupby", "--backend", "cpu", "--input", tmp_path / "small.parquet", "--by", "k",
        "--agg", "x:mean", "--json", "--results-dir", tmp_path / "res",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["valid"] is True
    chosen = _processes(r)
    assert chosen["value"] is False and chosen["rule_id"] == "processes.small-work", chosen
    assert r["cluster"]["kwargs"]["processes"] is False


@pytest.mark.parametrize(
    ("flags", "value", "why"),
    [
        (("--workers", "2"), True, "you set workers"),
        (("--memory-limit", "1GB"), True, "you set a memory limit"),
        (("--rows", "2000000"), True, "is over 512.00 MiB"),
        (("--processes", "yes"), True, None),
        (("--processes", "no", "--workers", "2"), False, None),
    ],
)
def test_explain_says_where_the_workers_run_and_why(cli, flags, value, why):
    p = cli("explain", "svd", "--backend", "cpu", *flags, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    chosen = _processes(d)
    assert chosen["value"] is value, chosen
    assert d["cluster"]["kwargs"]["processes"] is value
    if why is None:
        assert chosen["source"] == "flag" and chosen["rule"] is None
    else:
        assert why in chosen["rule"]
        assert d["cluster"]["kwargs"]["dashboard_address"] is not None


def test_a_small_run_with_a_dashboard_address_keeps_its_dashboard(cli):
    p = cli("explain", "svd", "--backend", "cpu", "--dashboard-address", "127.0.0.1:0", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert _processes(d)["value"] is False and d["cluster"]["kwargs"]["dashboard_address"] == "127.0.0.1:0"
    assert d["cluster"]["kwargs"]["protocol"] == "tcp"  # the dashboard served on the loopback
