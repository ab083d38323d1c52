"""The user-code benchmark (workflows/user_queries.py) at a small scale on the CPU: both suites
(the H2O questions on data made to its generators' specification, the TPC-H-shaped queries on
tpchgen-cli data) run as a user writes them, in plain Dask and in a gpuscale session, and every
answer is checked against pandas."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflows"))
import queries  # noqa: E402

SIDES = ("dask-cpu", "gpuscale-cpu", "gpuscale-cpu:engine=dask", "polars-cpu", "duckdb")
"""Every side that runs on a CPU: plain Dask, the CPU session (its engine route, and Dask's), Polars
and DuckDB."""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("queries")
    out = tmp / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workflows" / "user_queries.py"),
            "--h2o-rows",
            "20000",
            "--tpch-scale",
            "0.01",
            "--tpch-layouts",
            "multi,single",
            "--sides",
            ",".join(SIDES),
            "--repeat",
            "1",
            "--data",
            str(tmp / "data"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, json.loads(out.read_text()) if out.exists() else None, tmp / "data"


def test_every_query_of_both_suites_answers_as_pandas_in_plain_dask_and_a_session(small_run):
    proc, d, _ = small_run
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    sets = {(s["suite"], s["size"]): [q for q, _ in s["queries"]] for s in d["sets"]}
    assert set(sets) == {
        ("h2o-groupby", "20000"),
        ("h2o-join", "20000"),
        ("tpch", "0.01"),
        ("tpch", "0.01:single"),
    }
    assert sets["h2o-groupby", "20000"] + sets["h2o-join", "20000"] == [f"q{i}" for i in range(1, 11)] + [
        f"j{i}" for i in range(1, 6)
    ]
    assert sets["tpch", "0.01"] == sets["tpch", "0.01:single"] == [f"q{i}" for i in range(1, 23)]
    assert {s["reference"] for s in d["sets"]} == {"pandas"}  # memory holds each set in pandas
    assert len(d["cells"]) == sum(len(v) for v in sets.values()) * len(SIDES)
    bad = {k: c for k, c in d["cells"].items() if not c.get("valid") or c.get("diff")}
    assert not bad
    for suite in ("h2o-groupby 20000", "h2o-join 20000", "tpch 0.01", "tpch 0.01:single"):
        assert suite in proc.stdout
    assert "geomean" in proc.stdout
    assert " - distributed." not in proc.stderr  # no log lines of Dask's, e.g. P2P's shuffle warnings
    assert all(c["check_s"] >= 0 and c["wall_s"] > 0 for c in d["cells"].values())
    for side in ("dask-cpu", "gpuscale-cpu"):  # with the cells' times, they account for the run's
        assert f"{side}: opened in " in proc.stderr and f"{side}: closed in " in proc.stderr


def test_a_session_answers_every_query_on_its_engine_and_the_fallback_on_dask(small_run):
    """Each TPC-H query, in both layouts, translates and runs on Polars in the CPU session (one
    that ran on Dask would fail here); with engine=dask each runs on Dask, and says so."""
    _, d, _ = small_run
    cells = d["cells"]
    for layout in ("0.01", "0.01:single"):
        for i in range(1, 23):
            auto = cells[f"tpch|{layout}|q{i}|gpuscale-cpu"]["engines"]
            fallback = cells[f"tpch|{layout}|q{i}|gpuscale-cpu:engine=dask"]["engines"]
            assert auto and all(e == ["polars", "engine.polars"] for e in auto), (layout, i, auto)
            assert fallback and all(e == ["dask", "engine.setting"] for e in fallback), (layout, i, fallback)
    assert all(c.get("first_s") for c in cells.values()), "every cell keeps its first (cold) run"


def test_a_wrong_answer_is_caught_row_by_row_and_by_fingerprint(small_run):
    _, _, data = small_run
    x = pd.read_parquet(data / "h2o-groupby-20000" / "x.parquet")
    q1 = queries.suites()["h2o-groupby"].queries[0]
    want = queries.to_pandas(q1.reference({"x": x}))
    assert queries.same_answer(want.sample(frac=1, random_state=0), want) is None  # row order is free
    wrong = want.copy()
    wrong.loc[3, "v1"] += 1
    assert "column v1" in queries.same_answer(wrong, want)
    assert "rows" in queries.same_answer(want.iloc[1:], want)
    big = x.assign(id1=x.id1.where(x.index != 7, "id999"))  # one string changed in 20,000 rows
    old = queries.BIG
    try:
        queries.BIG = 1000
        assert queries.same_answer(x.sample(frac=1, random_state=1), x) is None
        assert "row hashes" in queries.same_answer(big, x)
        # one number changed by 1 in 20,000 rows: the sorted values differ there, whatever the sums
        assert "column v3" in queries.same_answer(x.assign(v3=x.v3.where(x.index != 7, x.v3 + 1)), x)
        one_id = x.assign(id4=x.id4.where(x.index != 7, 0))
        assert "column id4: values differ" in queries.same_answer(one_id, x)
    finally:
        queries.BIG = old


def test_text_hashes_agree_whether_values_repeat_or_not(monkeypatch):
    """A text column is hashed through its distinct values where its first rows repeat them,
    else row by row: the two ways give the same fingerprint, so a side whose answer comes in
    another row order is not told it differs, and a changed value is still caught."""
    monkeypatch.setattr(queries, "BIG", 100)
    monkeypatch.setattr(queries, "_PROBE_ROWS", 400)
    repeated, distinct = ["id1", "id2", None, ""] * 200, [f"row{i}" for i in range(1200)]
    want = pd.DataFrame({"k": pd.array(repeated + distinct, dtype="str")})  # its first rows repeat
    got = want.iloc[::-1].reset_index(drop=True)  # its first rows are all different
    assert queries.same_answer(got, want) is None
    changed = got.assign(k=got.k.where(got.index != 5, "row1"))
    assert "column k: values differ" in queries.same_answer(changed, want)


def test_a_kept_answer_is_fingerprinted_once_and_still_catches_a_wrong_answer(tmp_path, monkeypatch):
    """A large answer kept in a file is hashed once: every later check reads its fingerprints
    (here with the answer's file gone) and still tells a changed value from a reordered one."""
    monkeypatch.setattr(queries, "BIG", 100)
    want = pd.DataFrame(
        {
            "k": pd.array([f"id{i % 7}" for i in range(500)], dtype="str"),
            "n": range(500),
            "v": np.linspace(0, 1, 500),
        }
    )
    want.to_parquet(tmp_path / "answer-q1.parquet")
    kept = queries.KeptAnswer(tmp_path / "answer-q1.parquet")
    got = want.sample(frac=1, random_state=0).reset_index(drop=True)
    assert queries.same_answer(got, kept) is None
    prints = sorted(p.name for p in tmp_path.glob("answer-q1.*.npy"))
    assert prints == ["answer-q1.0-text.npy", "answer-q1.1-integers.npy", "answer-q1.2-numbers.npy"]
    (tmp_path / "answer-q1.parquet").unlink()
    assert queries.same_answer(got, kept) is None
    other_n = got.assign(n=got.n.where(got.index != 3, -1))
    other_k = got.assign(k=got.k.where(got.index != 3, "id9"))
    assert "column n: values differ" in queries.same_answer(other_n, kept)
    assert "column k: values differ" in queries.same_answer(other_k, kept)
    # numbers whose rounded hashes differ are compared sorted, which reads the answer's column
    want.to_parquet(tmp_path / "answer-q1.parquet")
    assert "column v" in queries.same_answer(got.assign(v=got.v.where(got.index != 3, 2.0)), kept)
    assert queries.same_answer(got.assign(v=got.v * (1 + 1e-12)), kept) is None  # a sum in another order


def test_an_interrupted_run_resumes_timing_only_the_cells_it_lacks(small_run, tmp_path):
    _, d, data = small_run
    resumed = ("dask-cpu", "gpuscale-cpu")
    gone = [f"h2o-join|20000|j5|{side}" for side in resumed]
    partial = {**d, "cells": {k: c for k, c in d["cells"].items() if k not in gone}}
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workflows" / "user_queries.py"),
            "--suites",
            "h2o-join",
            "--h2o-rows",
            "20000",
            "--sides",
            ",".join(resumed),
            "--repeat",
            "1",
            "--data",
            str(data),
            "--resume",
            str(tmp_path / "partial.json"),
            "--json",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    timed = [line for line in proc.stderr.splitlines() if " h2o-join 20000 " in line]
    assert sorted(line.split()[0] for line in timed) == ["dask-cpu", "gpuscale-cpu"]
    assert all(" j5: " in line and line.endswith(" ok") for line in timed)
    out = json.loads((tmp_path / "out.json").read_text())
    assert {k for k in out["cells"] if k.startswith("h2o-join")} == {
        k for k in d["cells"] if k.startswith("h2o-join")
    }


def test_answers_made_by_several_processes_equal_those_made_in_one(small_run, tmp_path):
    _, _, data = small_run
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--h2o-rows", "20000",
           "--tpch-scale", "0.01", "--data", str(tmp_path), "--prepare-only",
           "--reference-jobs", "2"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(2 processes)" in proc.stderr
    made = sorted(tmp_path.glob("*/answer-*.parquet"))
    assert len(made) == 10 + 5 + 22 and not list(tmp_path.glob("*/*.part"))
    for f in made:
        pd.testing.assert_frame_equal(pd.read_parquet(f), pd.read_parquet(data / f.parent.name / f.name))


def test_pandas_answers_start_no_more_processes_than_memory_holds(small_run):
    import user_queries

    _, _, data = small_run
    sets = {s: queries.suites()[s] for s in ("h2o-join", "tpch")}
    join = user_queries.in_memory_bytes(sets["h2o-join"], data / "h2o-join-20000")
    tpch = user_queries.in_memory_bytes(sets["tpch"], data / "tpch-0.01")
    assert 0 < join < tpch  # from the Parquet footers: TPC-H SF0.01 holds more than 20,000 rows
    peak = sets["tpch"].reference_peak * tpch
    assert user_queries.reference_jobs(0, 16, 100 * peak, peak) == 4  # the cores' count
    assert user_queries.reference_jobs(0, 64, 100 * peak, peak) == 4  # at most 4
    assert user_queries.reference_jobs(0, 16, 2.5 * peak + 1, peak) == 2  # 4/5 of the memory's
    assert user_queries.reference_jobs(0, 16, peak // 2, peak) == 1  # always one
    assert user_queries.reference_jobs(3, 16, peak // 2, peak) == 3  # asked for: as asked
    # a suite whose text is dictionary-encoded in its files peaks higher in pandas
    groupby = queries.suites()["h2o-groupby"]
    assert groupby.reference_peak > sets["h2o-join"].reference_peak > sets["tpch"].reference_peak


def test_a_side_variant_runs_with_its_options_beside_its_base_side(small_run, tmp_path):
    _, _, data = small_run
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--suites", "h2o-join",
           "--h2o-rows", "20000", "--sides", "gpuscale-cpu,gpuscale-cpu:shuffle=tasks", "--repeat", "1",
           "--data", str(data), "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    knobs = [line for line in proc.stderr.splitlines() if line.startswith("gpuscale-cpu:shuffle=tasks: ")]
    assert knobs and "dataframe.shuffle.method = tasks" in knobs[0] and "shuffle.setting" in knobs[0]
    assert "v1 = gpuscale-cpu:shuffle=tasks" in proc.stdout and "v1 vs gpuscale-cpu" in proc.stdout
    cells = json.loads(out.read_text())["cells"]
    assert {k for k in cells if k.endswith("|gpuscale-cpu:shuffle=tasks")} == {
        f"h2o-join|20000|j{i}|gpuscale-cpu:shuffle=tasks" for i in range(1, 6)
    }
    assert all(c["valid"] for c in cells.values())


@pytest.mark.parametrize(
    "side, says",
    [
        ("duckdb:gpus=2", "'gpus=2' is not an option of duckdb"),
        ("gpuscale-cpu:shuffle=fast", "its options: shuffle: tasks, p2p or disk"),
        ("nosuch", "unknown side 'nosuch'"),
    ],
)
def test_a_wrong_side_ends_the_run_in_one_line_before_any_data_is_made(tmp_path, side, says):
    cmd = [
        sys.executable,
        str(ROOT / "workflows" / "user_queries.py"),
        "--sides",
        side,
        "--data",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and says in proc.stderr
    assert not list(tmp_path.iterdir())


def test_ctrl_c_prints_the_cells_measured_so_far_keeps_them_and_exits_130(small_run, tmp_path):
    import signal

    from conftest import as_from_a_terminal

    _, _, data = small_run
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--suites", "h2o-groupby",
           "--h2o-rows", "20000", "--sides", "dask-cpu", "--repeat", "1", "--data", str(data),
           "--json", str(out)]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_from_a_terminal, start_new_session=True)  # fmt: skip
    err = []
    for line in p.stderr:  # the first measured cell, then Ctrl-C
        err.append(line)
        if " q1: " in line:
            break
    time.sleep(0.5)  # into the next query, while the workers compute
    os.killpg(p.pid, signal.SIGINT)  # as Ctrl-C and `timeout -s INT`: to the whole process group
    stdout, rest = p.communicate(timeout=120)
    err = "".join(err) + rest
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("user_queries: interrupted; the tables show the cells")
    kept = json.loads(out.read_text())["cells"]
    assert "h2o-groupby|20000|q1|dask-cpu" in kept and len(kept) < 10
    assert "cells not measured (.): not in this run's sides, or the run was interrupted" in stdout


def test_the_tables_of_an_interrupted_run_mark_the_cells_it_did_not_reach(small_run):
    import user_queries

    _, d, _ = small_run
    partial = {**d, "cells": {k: c for k, c in d["cells"].items() if not k.endswith("|j5|gpuscale-cpu")}}
    text, ok = user_queries.tables(partial)
    j5 = [line.split() for line in text.splitlines() if line.strip().startswith("j5 ")][0]  # the warm table
    assert j5[2] == "." and j5[-1] == "-"  # no time, no ratio
    assert ok is True and "1 cells not measured" in text


def test_a_stored_h200_run_from_before_versions_still_loads_and_prints_as_before():
    """An H200 run the docs cite was written before results carried a version: it loads as the
    current version and prints the table it printed then."""
    import harness
    import user_queries

    path = ROOT / "docs" / "bench-h200" / "user-queries" / "h200-sf10-1e7.json"
    d = harness.load(path, "user_queries")
    assert d["schema"] == "gpuscale-workflow/user_queries" and d["version"] == harness.VERSION
    text, ok = user_queries.tables(d)
    assert text == user_queries.tables(json.loads(path.read_text()))[0] and ok is False
    page = (ROOT / "docs" / "benchmarks" / "user-queries.md").read_text()
    assert "docs/bench-h200/user-queries/h200-sf10-1e7.json" in page  # cited as evidence
    rows = [line for line in text.splitlines() if line.strip().startswith(("q1 ", "j1 ", "t18 ", "geomean"))]
    assert len(rows) == 6
    assert "geomean" in text and "13.32   0.53     2.90     0.82      1.32" in text


def test_a_side_that_does_not_start_ends_that_side_not_the_run():
    """A side whose session gpuscale refuses (here a memory limit it cannot read) makes its
    cases errors naming why; the next side still times every case, and a resumed run tries the
    refused side's cases again."""
    import contextlib

    import harness

    import gpuscale

    def side(name, **settings):
        @contextlib.contextmanager
        def open_session(_):
            with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1, **settings) as s:
                yield s.client

        def build(client, case):
            return (lambda: client.submit(sum, [case, 1]).result()), (
                lambda got: None if got == case + 1 else f"got {got}"
            )

        return harness.Side(name, build, open=open_session)

    sides = [side("refused", memory_limit="lots"), side("fine")]
    study = harness.Study(sides, [1, 2], key=lambda c: f"c{c}", repeat=1, warmup=0)
    cells = study.run()
    refused = cells["c1|refused"]["error"]
    assert refused.startswith(harness.NOT_STARTED) and "memory limit 'lots'" in refused, refused
    assert cells["c2|refused"] == cells["c1|refused"]
    assert cells["c1|fine"]["valid"] is True and cells["c2|fine"]["valid"] is True
    assert sorted(k for k, c in cells.items() if harness.retry(c)) == ["c1|refused", "c2|refused"]


def test_a_run_that_hangs_ends_its_side_not_the_run():
    """On real clusters: a case whose run passes the hang limit is an error naming the hang; the
    side's later cases are not run and its cluster is closed, a resumed run times them
    again, and the next side still times every case."""
    import contextlib

    import dask
    import harness
    from distributed import Client, LocalCluster

    closed = []

    def side(name, limit):
        @contextlib.contextmanager
        def open_cluster(_):
            with (
                LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c,
                Client(c) as cl,
            ):
                yield cl
            closed.append((name, time.monotonic()))

        def build(_client, case):
            _, seconds = case
            return (
                lambda: harness.compute_within(dask.delayed(time.sleep)(seconds), limit)
            ), lambda got: None

        return harness.Side(name, build, open=open_cluster)

    cases = [(0, 0.0), (1, 3.0), (2, 0.0), (3, 0.0)]
    study = harness.Study(
        [side("limited", 0.5), side("free", None)], cases, key=lambda c: f"c{c[0]}", repeat=1, warmup=0
    )
    cells = study.run()
    assert cells["c0|limited"]["valid"] is True
    assert cells["c1|limited"]["error"].startswith(harness.HUNG), cells["c1|limited"]
    assert cells["c2|limited"] == cells["c3|limited"] == {"error": harness.NOT_RUN + "c1"}
    assert all(cells[f"c{i}|free"]["valid"] for i in range(4))
    assert cells["c1|free"]["median_s"] >= 3.0
    assert [n for n, _ in closed] == ["limited", "free"]
    assert [k for k, c in cells.items() if harness.retry(c)] == ["c1|limited", "c2|limited", "c3|limited"]


def test_a_run_whose_workers_keep_running_out_of_memory_ends_that_query_not_the_side():
    """On a real cluster whose nanny restarts a worker past its memory limit: a run whose answer
    does not fit a worker (as plain Dask's one-partition answer at 1e8 rows did not) is cancelled
    after two restarts, its case an error naming them, long before the hang limit; the side's
    next case runs on the same cluster and is not retried by a resumed run. A worker lost so
    often that the task fails (KilledWorker) before a poll saw the restarts is the memory's too."""
    import contextlib

    import dask
    import harness
    from distributed import Client, LocalCluster

    @contextlib.contextmanager
    def open_cluster(_):
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, memory_limit="400MiB", dashboard_address=":0"
            ) as c,
            Client(c) as cl,
        ):
            yield cl

    def build(_client, case):
        _, size = case
        return (lambda: harness.compute_within(dask.delayed(np.ones)(size, dtype=np.uint8), 300)), (
            lambda got: None if got.nbytes == size else f"{got.nbytes} bytes"
        )

    cases = [(0, 2**30), (1, 2**20)]  # 1 GiB on a 400 MiB worker, then 1 MiB
    study = harness.Study(
        [harness.Side("small", build, open=open_cluster)], cases, key=lambda c: f"c{c[0]}", repeat=1, warmup=0
    )
    t0 = time.monotonic()
    cells = study.run()
    assert time.monotonic() - t0 < 120  # the hang limit was 300 s
    assert cells["c0|small"]["error"].startswith("OutOfMemory: the workers passed their memory limit"), cells
    assert re.search(r"restarted [2-4] times during one run$", cells["c0|small"]["error"])
    assert cells["c1|small"]["valid"] is True
    assert not harness.retry(cells["c0|small"])
    assert 0 < cells["c0|small"]["wall_s"] < 120  # its time until it failed is kept


def test_a_resumed_run_of_one_side_and_suite_times_what_is_left_and_keeps_the_rest(small_run, tmp_path):
    """pandas' answers are made only for the query still to time, and the file keeps the cells,
    sides and suites of the earlier run that this one does not time."""
    import shutil

    _, d, data = small_run
    folder = tmp_path / "h2o-join-20000"
    shutil.copytree(data / "h2o-join-20000", folder)
    for f in folder.glob("answer-*"):
        f.unlink()
    partial = {**d, "cells": {k: c for k, c in d["cells"].items() if not k.startswith("h2o-join|20000|j2|")}}
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--suites", "h2o-join",
           "--h2o-rows", "20000", "--sides", "dask-cpu", "--repeat", "1", "--warmup", "0",
           "--data", str(tmp_path), "--resume", str(tmp_path / "partial.json"),
           "--json", str(tmp_path / "out.json")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pandas' answers to 1 queries of h2o-join-20000" in proc.stderr
    assert sorted(f.name for f in folder.glob("answer-*.parquet")) == ["answer-j2.parquet"]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["cells"]["h2o-join|20000|j2|dask-cpu"]["valid"] is True
    assert set(out["cells"]) == set(d["cells"]) - {f"h2o-join|20000|j2|{side}" for side in SIDES[1:]}
    assert out["sides"] == list(SIDES)
    named = [sorted((s["suite"], s["size"]) for s in r["sets"]) for r in (out, d)]
    assert named[0] == named[1] and len(named[0]) == 4


def test_answers_made_in_this_process_leave_no_tables_held(small_run, tmp_path):
    """pandas' answers made in the run's own process (one process) let go of the data set's
    tables before the sides run, which at 1e8 rows would hold gigabytes beside them."""
    import shutil

    import user_queries

    _, _, data = small_run
    shutil.copytree(data / "h2o-join-20000", tmp_path / "h2o-join-20000")
    (tmp_path / "h2o-join-20000" / "answer-j3.parquet").unlink()
    sets = [(queries.suites()["h2o-join"], "20000", tmp_path / "h2o-join-20000")]
    answers = user_queries.references(sets, jobs=1, needed={("h2o-join", "20000", "j3")})
    assert (tmp_path / "h2o-join-20000" / "answer-j3.parquet").exists() and len(answers) == 5
    assert user_queries._TABLES == {}


def test_answers_made_when_needed_are_made_only_for_the_queries_a_side_answers(small_run, tmp_path):
    """With ``--answers when-needed`` no pandas answer is made before timing: a side that answers
    nothing (here it hangs on its first query) costs none, and one that answers gets each made
    once, in a process of its own, and checked against it."""
    import shutil

    _, _, data = small_run
    folder = tmp_path / "h2o-join-20000"
    shutil.copytree(data / "h2o-join-20000", folder)
    for f in folder.glob("answer-*"):
        f.unlink()
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--suites", "h2o-join",
           "--h2o-rows", "20000", "--sides", "dask-cpu", "--repeat", "1", "--warmup", "0",
           "--data", str(tmp_path), "--answers", "when-needed"]  # fmt: skip
    hung = subprocess.run(
        [*cmd, "--hang-after", "0.001", "--json", str(tmp_path / "hung.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    cells = json.loads((tmp_path / "hung.json").read_text())["cells"]
    assert len(cells) == 5 and all("error" in c for c in cells.values()), hung.stderr[-2000:]
    assert not list(folder.glob("answer-*")) and "pandas' answer" not in hung.stderr
    out = tmp_path / "out.json"
    ran = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stderr.count("made when needed") == 5
    made = sorted(f.name for f in folder.glob("answer-*.parquet"))
    assert made == [f"answer-j{i}.parquet" for i in range(1, 6)]
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == 5 and all(c["valid"] for c in cells.values())
    for f in folder.glob("answer-*.parquet"):  # the answers equal those made before any timing
        pd.testing.assert_frame_equal(pd.read_parquet(f), pd.read_parquet(data / folder.name / f.name))


def test_duckdb_answers_equal_pandas_and_replace_them_only_when_asked(small_run, tmp_path):
    """Where pandas cannot hold a data set, DuckDB's answers to the queries' SQL are the
    reference: on the small sets they equal pandas' answers query by query, each records who
    made it, and a run asking for the other engine makes every answer again."""
    import shutil

    import user_queries

    _, _, data = small_run
    for name in ("tpch-0.01", "h2o-join-20000"):
        shutil.copytree(data / name, tmp_path / name)
    cmd = [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--suites", "h2o-join,tpch",
           "--h2o-rows", "20000", "--tpch-scale", "0.01", "--data", str(tmp_path),
           "--prepare-only"]  # fmt: skip
    proc = subprocess.run([*cmd, "--reference", "duckdb"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "DuckDB's answers to 22 queries of tpch-0.01" in proc.stderr
    assert "DuckDB's answers to 5 queries of h2o-join-20000" in proc.stderr
    made = sorted(tmp_path.glob("*/answer-*.parquet"))
    assert len(made) == 27 and {user_queries.made_by(f) for f in made} == {"duckdb"}
    for f in made:
        pandas_answer = pd.read_parquet(data / f.parent.name / f.name)
        assert queries.same_answer(pandas_answer, queries.KeptAnswer(f)) is None, f.name
    again = subprocess.run([*cmd, "--reference", "pandas"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "pandas' answers to 22 queries" in again.stderr, again.stderr[-2000:]
    assert {user_queries.made_by(f) for f in made} == {"pandas"}


def test_the_reference_is_pandas_where_memory_holds_its_peak_else_duckdb():
    import user_queries

    gib = 2**30
    assert user_queries.reference_maker("auto", 100 * gib, 80 * gib) == ("pandas", None)
    by, why = user_queries.reference_maker("auto", 100 * gib, 81 * gib)
    assert by == "duckdb" and "81 GiB" in why and "100 GiB available" in why
    assert user_queries.reference_maker("pandas", gib, 81 * gib) == ("pandas", None)  # as asked
    assert user_queries.reference_maker("duckdb", 100 * gib, gib) == ("duckdb", None)
