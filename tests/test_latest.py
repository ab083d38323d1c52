""" "The latest run" as the default of ``trace summarize`` and ``audit report`` (one line on
stderr naming what was picked), and ``results list``; real runs through the real CLI."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.timeout(300)

SMALL = (
    "run",
    "transpose_sum",
    "--backend",
    "cpu",
    "--workers",
    "1",
    "--threads-per-worker",
    "1",
    "--n",
    "400",
    "--chunk",
    "200",
    "--repeat",
    "1",
    "--warmup",
    "0",
    "--json",
)


def one_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_nothing_to_pick_is_one_line(cli, tmp_path):
    for args in (("trace", "summarize"), ("audit", "report")):
        p = cli(*args)
        assert p.returncode == 2 and p.stdout == ""
        line = one_line(p)
        assert line.startswith(
            "gpuscale: error: no records: the results dir 'gpuscale-results' does not exist; "
        )
        assert "gpuscale run WORKLOAD" in line


def test_latest_run_picked_by_trace_summarize_and_audit_report(cli, tmp_path):
    traced = json.loads(cli(*SMALL, "--trace", "t1").stdout)  # ./gpuscale-results, the default
    plain = json.loads(cli(*SMALL).stdout)  # newer, without a trace
    assert traced["trace"] and plain["trace"] is None and plain["timestamp"] > traced["timestamp"]

    rows = json.loads(cli("results", "list", "--json").stdout)
    assert [r["path"] for r in rows] == [plain["path"], traced["path"]]  # newest first

    p = cli("trace", "summarize", "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)  # stdout: exactly the summary
    assert s["result_id"] == traced["id"]
    line = one_line(p)
    assert line.startswith("gpuscale: the trace of the latest run: transpose_sum on cpu at ")
    assert f"record {traced['path']}" in line and f"trace {traced['trace']}" in line
    shown = cli("trace", "summarize", env={"COLUMNS": "250"})
    assert shown.returncode == 0 and "wall" in shown.stdout and "latest run" in shown.stderr

    p = cli("audit", "report", "--json")
    assert p.returncode == 0, p.stderr
    a = json.loads(p.stdout)
    assert a["source"].startswith(
        f"result record {plain['path']} "
    )  # the newest record: every run has an audit
    assert one_line(p).startswith("gpuscale: the backend audit of the latest run: transpose_sum on cpu at ")
    assert f"record {plain['path']}" in one_line(p)

    # an explicit path still wins, and prints no pick line
    p = cli("trace", "summarize", traced["trace"], "--json")
    assert p.returncode == 0 and p.stderr == "" and json.loads(p.stdout)["result_id"] == traced["id"]

    # the trace folder removed: no record with a trace left to pick
    shutil.rmtree(tmp_path / "t1")
    p = cli("trace", "summarize")
    assert p.returncode == 2
    assert one_line(p).startswith(
        "gpuscale: error: no record with a trace folder that is still there under "
        "'gpuscale-results'; run a workload with --trace DIR"
    )

    # the results dir is a setting: the env var moves where "latest" looks
    other = tmp_path / "elsewhere"
    moved = json.loads(cli(*SMALL, "--results-dir", other).stdout)
    p = cli("audit", "report", "--json", env={"DASK_GPUSCALE__RESULTS_DIR": str(other)})
    assert p.returncode == 0 and json.loads(p.stdout)["source"].startswith(f"result record {moved['path']} ")
