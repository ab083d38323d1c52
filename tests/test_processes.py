"""Where a CPU cluster's workers run (rules ``processes.*``, gpuscale/plan/layout.py): small work
on generated data in this process's threads, without a dashboard; processes where you set a
layout, where the work is large, or where you ask for them. Through the real command line."""

from __future__ import annotations

import json

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
    chosen = _processes(r)
    assert chosen["value"] is False and chosen["rule_id"] == "processes.small-work", chosen
    assert "planned memory" in chosen["rule"] and "512.00 MiB" in chosen["rule"]


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
