"""Result records: content, versioned schema, atomic writes, never overwritten, loadable."""

from __future__ import annotations

import json
import os
import pathlib

import dask
import distributed
import pytest

from gpuscale import UserError
from gpuscale.records import results


@pytest.fixture(scope="module")
def record(cpu_session, tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    r = cpu_session.run("svd", rows=20_000, cols=20, repeat=2, warmup=1, results_dir=str(d))
    return r, d


def test_one_file_per_run_named_by_workload_family_protocol(record):
    r, d = record
    files = sorted(p.name for p in d.iterdir())
    assert files == [pathlib.Path(r.path).name]  # no probe or temp file left behind
    name = files[0]
    assert name.endswith(f"-svd-cpu-tcp-{r.id}.json")


def test_record_content(record):
    r, _ = record
    d = json.loads(pathlib.Path(r.path).read_text())
    assert d["schema"] == "gpuscale.result" and d["schema_version"] == 1
    assert d["workload"] == "svd" and d["backend"] == "cpu" and d["family"] == "cpu"
    assert d["protocol"] == "tcp"
    assert d["params"]["rows"] == 20_000 and d["params"]["cols"] == 20
    assert d["backend_reason"]
    assert d["valid"] is True and d["validation"]["valid"] is True
    assert d["validation"]["checks"] and all(c["ok"] for c in d["validation"]["checks"])
    # every timing, warm-up separately
    assert len(d["times_s"]) == 2 and len(d["warmup_s"]) == 1
    assert d["median_s"] == pytest.approx(sum(d["times_s"]) / 2)
    assert d["min_s"] == min(d["times_s"])
    for k in ("startup_s", "generate_s", "validate_s"):
        assert d[k] > 0
    # tuned choices with source and rule
    chunk = d["choices"]["chunk_rows"]
    assert set(chunk) == {"value", "source", "rule"}
    assert chunk["source"] == "rule" and "chunk budget" in chunk["rule"]
    assert d["knobs"]["chunk_bytes"] > 0
    # the cluster as planned and as it ran
    assert d["cluster"]["cls"] == "distributed.LocalCluster"
    assert d["cluster"]["running"]["workers"] == 2
    assert d["settings_sources"]["cluster.workers"] == "flag"
    # where
    assert d["versions"]["dask"] == dask.__version__
    assert d["versions"]["distributed"] == distributed.__version__
    assert d["versions"]["gpuscale"]
    assert d["hardware"]["cpu"]["cores"] == os.cpu_count()
    assert d["hardware"]["gpus"] == []
    assert d["memory"]["estimate_bytes"] > 0 and d["memory"]["capacity_bytes"] > 0
    assert d["timestamp"] and d["path"] == r.path


def test_load_round_trip(record):
    r, _ = record
    loaded = results.load(r.path)
    # all but the link's liveness: read back after the run, the link is where the dashboard was
    assert loaded.to_dict() == {**r.to_dict(), "dashboard_link_live": results.link_live_after_run(r)}


def test_load_rejects_other_json(tmp_path):
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"schema": "something-else", "schema_version": 1}))
    with pytest.raises(UserError, match="not a gpuscale result record"):
        results.load(p)
    p.write_text(json.dumps({"schema": "gpuscale.result", "schema_version": 2}))
    with pytest.raises(UserError, match="schema version 1"):
        results.load(p)


def test_never_overwritten(record, tmp_path):
    r, _ = record
    copy = results.Result.model_validate(r.to_dict())
    out = tmp_path / "w"
    first = results.write(copy, out)
    before = first.read_bytes()
    from gpuscale.errors import RecordNotWritten

    with pytest.raises(
        RecordNotWritten, match="File exists"
    ):  # never over a file; the record is kept to print
        results.write(copy, out)  # same id and timestamp: same name
    assert first.read_bytes() == before
    assert [p.name for p in out.iterdir()] == [first.name]  # no temp file left either


def test_two_runs_two_records(cpu_session, tmp_path):
    paths = {
        cpu_session.run("svd", rows=2_000, cols=10, repeat=1, warmup=0, results_dir=str(tmp_path)).path
        for _ in range(2)
    }
    assert len(paths) == 2 and all(pathlib.Path(p).is_file() for p in paths)


def test_write_false_writes_nothing(cpu_session, tmp_path):
    r = cpu_session.run(
        "svd", rows=2_000, cols=10, repeat=1, warmup=0, write=False, results_dir=str(tmp_path / "none")
    )
    assert r.path is None
    assert not (tmp_path / "none").exists()


def test_unwritable_results_dir_fails_before_work(cpu_session, tmp_path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(
        UserError, match=r"results dir .*afile/sub cannot be made: .*afile is not a folder; pass"
    ):
        cpu_session.run("svd", rows=2_000, cols=10, results_dir=str(tmp_path / "afile" / "sub"))


def test_html_repr(record):
    r, _ = record
    html = r._repr_html_()
    assert "gpuscale result" in html and r.path in html


def _sleepy(block, seconds):
    import time

    time.sleep(seconds)
    return block


def test_time_split_names_the_workers_compute(cpu_session, tmp_path):
    """The record splits each timed repeat into compute on the workers (from the scheduler's
    task stream), transfers and the rest: a workload whose 4 blocks each sleep 0.15 s on 2
    single-threaded workers computes ~0.3 s of wall time per repeat."""
    import dask.array as da

    import gpuscale

    @gpuscale.workload(
        "sleepy_blocks",
        params={"seconds": 0.15},
        validate=lambda result, x, p: True,
        generate=lambda p, ctx: da.ones(8, chunks=2),
        replace=True,
    )
    def sleepy_blocks(x, p, ctx):
        return x.map_blocks(_sleepy, p.seconds, dtype=x.dtype)

    from gpuscale.workloads import registry

    try:
        r = cpu_session.run("sleepy_blocks", repeat=2, warmup=0, results_dir=str(tmp_path))
    finally:
        registry.unregister("sleepy_blocks")
    split = r.info["time_split"]
    assert split["available"] and len(split["repeats"]) == 2, split
    for rep, t in zip(split["repeats"], r.times_s):
        assert rep["elapsed_s"] == t and rep["tasks"] == 4
        assert 0.28 <= rep["compute_s"] <= t and 0.58 <= rep["busy_s"] <= 0.9  # 4 x 0.15 s on 2 threads
        assert abs(rep["compute_s"] + rep["transfer_s"] + rep["other_s"] - t) < 1e-9
    assert (
        json.loads(pathlib.Path(r.path).read_text())["info"]["time_split"]["compute_s"] == split["compute_s"]
    )


def test_the_summary_names_the_command_that_shows_its_record(record, cli, tmp_path, monkeypatch):
    """The run summary's ``results show ID`` works as printed, from where the run was started:
    with ``--results-dir`` when the record lies outside the default folder, without it inside."""
    import shlex

    from gpuscale.records import report

    r, d = record
    printed = report.show_command(r.short_id, r.path)
    assert printed == f"gpuscale results show {r.short_id} --results-dir {shlex.quote(str(d))}"
    p = cli(*shlex.split(printed)[1:])
    assert p.returncode == 0 and r.short_id in p.stdout, p.stderr
    monkeypatch.chdir(tmp_path)
    inside = tmp_path / "gpuscale-results" / "x.json"
    assert report.show_command(r.short_id, str(inside)) == f"gpuscale results show {r.short_id}"
