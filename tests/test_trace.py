"""Trace capture and reading, on a real 2-worker LocalCluster and through the real CLI.

Rules checked on trace.json: every duration event (``ph == "X"``) has name, ph, ts, dur, pid
and tid, with 0 <= ts and ts + dur <= the window (microseconds); every other event is a
naming event (``ph == "M"``: process_name / thread_name / *_sort_index, with name, ph, pid,
tid and args) and carries no ts / dur.

Coverage: the gpuscale phase events span the run's wall time to within ``SPAN_TOLERANCE``
(5%): the runner's planning and memory check before generate are a phase of their own
(``prepare``: 0.42 s of a 1.7 s run on a slow CI box once, so it must be seen), and the only
part of the window outside the phases is its end right after validate (milliseconds).
Between phases lie the runner's settle waits, so the phases' *sum* is checked against the
result record's own timings instead, and every task's compute against the phases, with a
slack of ``CLOCK_SLACK_S`` plus the largest clock correction (``scheduler_delay``) Dask applied
to a worker's times during the window: on one host the true correction is 0, so its size is
the error of the task times (tens of milliseconds on a busy 2-core machine).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from conftest import files_under
from dask.utils import format_bytes

import gpuscale
from gpuscale import UserError, trace
from gpuscale.records.report import _fmt_s

SPAN_TOLERANCE = 0.05
CLOCK_SLACK_S = 0.005  # the phase marks vs the runner's own perf_counter timings
TRANSPOSE = {"n": 2000, "chunk": 250}  # 8 x 8 blocks of 500 kB; the transpose moves half of them
WIDE = {"COLUMNS": "250"}  # rich tables unwrapped, so numbers can be found in them


@pytest.fixture(scope="module")
def runs(cpu_session, tmp_path_factory):
    """Two traced workload runs and one Session.trace capture of user code, on one cluster."""
    base = tmp_path_factory.mktemp("traces")
    s = cpu_session
    a = s.run(
        "transpose_sum",
        repeat=2,
        warmup=1,
        results_dir=str(base / "records"),
        trace=str(base / "transpose"),
        **TRANSPOSE,
    )
    b = s.run(
        "shuffle", rows=100_000, partitions=6, repeat=1, warmup=0, write=False, trace=str(base / "shuffle")
    )
    import dask.array as da

    with s.trace(str(base / "user")) as t:
        x = da.random.default_rng(1).random((1500, 1500), chunks=300)
        with t.phase("matmul"):
            total = float((x @ x.T).sum().compute())
    return {"base": base, "a": a, "b": b, "user": t, "user_total": total}


def events(d: pathlib.Path) -> list[dict]:
    data = json.loads((d / "trace.json").read_text())
    assert set(data) >= {"traceEvents"}
    return data["traceEvents"]


def summary_json(d: pathlib.Path) -> dict:
    return json.loads((d / "summary.json").read_text())


# ---------------------------------------------------------------------------------------
# The folder
# ---------------------------------------------------------------------------------------
def test_run_writes_the_folder_and_the_record_points_to_it(runs):
    a, d = runs["a"], runs["base"] / "transpose"
    assert a.valid
    assert sorted(p.name for p in d.iterdir()) == sorted(trace.FILES)
    assert a.trace == str(d)
    record = json.loads(pathlib.Path(a.path).read_text())
    assert record["trace"] == str(d)
    s = summary_json(d)
    assert (s["schema"], s["schema_version"]) == ("gpuscale.trace", 1)
    assert s["result_id"] == a.id == record["id"]
    assert (s["workload"], s["backend"], s["family"], s["protocol"]) == ("transpose_sum", "cpu", "cpu", "tcp")
    assert (s["workers"], s["threads"]) == (2, 2)
    assert "Dask Performance Report" in (d / "performance-report.html").read_text()
    index = (d / "index.html").read_text()
    for f in ("performance-report.html", "trace.json", "comm.json", "summary.json"):
        assert f"href='{f}'" in index
    # nothing else written next to it (the temporary sibling was renamed into place)
    assert sorted(p.name for p in d.parent.iterdir()) == ["records", "shuffle", "transpose", "user"]


def test_session_trace_writes_the_same_files(runs):
    d, t = runs["base"] / "user", runs["user"]
    assert sorted(p.name for p in d.iterdir()) == sorted(trace.FILES)
    s = summary_json(d)
    assert s["workload"] is None and s["result_id"] is None
    assert [(p["name"], p["depth"]) for p in s["phases"]] == [("user", 0), ("matmul", 1)]
    assert s["tasks"] > 0 and s["compute_s"] > 0 and s["bytes_moved"] > 0
    assert t.summary.model_dump(mode="json", by_alias=True) == s
    assert runs["user_total"] > 0


def test_comm_matrix_moves_bytes_between_the_two_workers(runs, cpu_session):
    d = runs["base"] / "transpose"
    comm = json.loads((d / "comm.json").read_text())
    workers = set(cpu_session.client.scheduler_info(n_workers=-1)["workers"])
    assert set(comm["workers"]) == workers and len(workers) == 2
    cross = [p for p in comm["pairs"] if p["source"] != p["destination"]]
    assert cross and all(p["source"] in workers and p["destination"] in workers for p in cross)
    assert sum(p["bytes"] for p in cross) >= 500_000  # at least one 250 x 250 float64 block
    for p in comm["pairs"]:
        assert p["bytes"] > 0 and p["transfers"] > 0 and p["busy_s"] > 0
        assert p["bandwidth_bytes_per_s"] == pytest.approx(p["bytes"] / p["busy_s"])
        i, j = comm["workers"].index(p["source"]), comm["workers"].index(p["destination"])
        assert comm["bytes_matrix"][i][j] == p["bytes"]
    assert sum(map(sum, comm["bytes_matrix"])) == comm["bytes_moved"]
    assert 0 < comm["transfer_share"] <= 1
    s = summary_json(d)
    assert s["bytes_moved"] == comm["bytes_moved"] and s["transfers"] == comm["transfers"]
    assert s["bandwidth_bytes_per_s"] == pytest.approx(comm["bytes_moved"] / comm["transfer_busy_s"])
    # the transfers are in trace.json too, on the destination's transfer tracks, with bytes
    ev = [e for e in events(d) if e.get("cat") == "transfer"]
    assert sum(e["args"]["bytes"] for e in ev) == comm["bytes_moved"]


def test_p2p_shuffle_bytes_are_counted(runs):
    s = summary_json(runs["base"] / "shuffle")
    # the cpu family leaves the shuffle method to Dask (P2P on a distributed cluster)
    assert s["p2p_bytes_sent"] > 100_000 * 16 / 4  # a good share of the 1.6 MB frame moves


def test_memory_peaks_per_worker(runs, cpu_session):
    s = summary_json(runs["base"] / "transpose")
    assert set(s["memory"]) == set(cpu_session.client.scheduler_info(n_workers=-1)["workers"])
    for m in s["memory"].values():
        assert m["host_peak_bytes"] > 20 * 2**20 and m["samples"] >= 2
        assert "gpu_peak_bytes" not in m  # CPU workers: the GPU part is absent


# ---------------------------------------------------------------------------------------
# trace.json
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["transpose", "shuffle", "user"])
def test_every_event_is_well_formed(runs, name):
    d = runs["base"] / name
    s = summary_json(d)
    wall_us = s["wall_s"] * 1e6
    ev = events(d)
    xs = [e for e in ev if e["ph"] == "X"]
    ms = [e for e in ev if e["ph"] != "X"]
    assert xs and ms
    for e in xs:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e), e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert 0 <= e["ts"] and 0 <= e["dur"] and e["ts"] + e["dur"] <= wall_us + 1, e
    for e in ms:
        assert e["ph"] == "M" and {"name", "ph", "pid", "tid", "args"} <= set(e), e
        assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
        assert "ts" not in e and "dur" not in e
    procs = {e["pid"]: e["args"]["name"] for e in ms if e["name"] == "process_name"}
    assert procs[0] == "gpuscale" and len(procs) == 1 + s["workers"]
    named = {(e["pid"], e["tid"]) for e in ms if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in xs} <= named  # every track is named
    # complete events on one track never partially overlap (Perfetto drops those)
    tracks: dict = {}
    for e in xs:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0 - 1e-3 or e1 <= e0 + 1e-3, (s0, e0, s1, e1)  # after, or nested
    # the summary's compute time is the union of trace.json's compute events
    union = gpuscale.trace.intervals.union((e["ts"], e["ts"] + e["dur"]) for e in xs if e["cat"] == "compute")
    assert gpuscale.trace.intervals.length(union) / 1e6 == pytest.approx(s["compute_s"], abs=1e-4)
    assert s["compute_s"] + s["transfer_s"] + s["idle_s"] == pytest.approx(s["wall_s"], abs=1e-9)


def test_phases_cover_the_run(runs):
    a, d = runs["a"], runs["base"] / "transpose"
    s = summary_json(d)
    marked = [e for e in events(d) if e.get("cat") == "phase"]
    assert [p["name"] for p in marked] == ["prepare", "generate", "warmup", "compute", "compute", "validate"]
    first, last = marked[0]["ts"], marked[-1]["ts"] + marked[-1]["dur"]
    assert (last - first) / 1e6 >= s["wall_s"] * (1 - SPAN_TOLERANCE), (first, last, s["wall_s"])
    # prepare (the memory check, the audit's set-up) ends before the data is made
    assert marked[0]["ts"] + marked[0]["dur"] <= marked[1]["ts"]
    phases = marked[1:]
    # each phase lasts what the record says that step took (plus the mark itself)
    own = [a.generate_s, *a.warmup_s, *a.times_s, a.validate_s]
    assert len(own) == len(phases)
    for p, secs in zip(phases, own):
        assert secs - 1e-3 <= p["dur"] / 1e6 <= secs + CLOCK_SLACK_S, (p, secs)
    # every task ran inside a phase: the client's marks and the workers' clock agree
    delay = max(abs(x) for w in s["clock"]["workers"].values() for x in w["scheduler_delay_s"])
    slack = CLOCK_SLACK_S + delay
    spans = [(p["ts"] / 1e6 - slack, (p["ts"] + p["dur"]) / 1e6 + slack) for p in phases]
    for e in events(d):
        if e.get("cat") == "compute":
            t0, t1 = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
            assert any(lo <= t0 and t1 <= hi for lo, hi in spans), e


# ---------------------------------------------------------------------------------------
# gpuscale trace summarize / compare
# ---------------------------------------------------------------------------------------
def test_summarize_prints_the_summary(runs, cli):
    d = runs["base"] / "transpose"
    p = cli("trace", "summarize", d, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == summary_json(d)
    p = cli("trace", "summarize", d, env=WIDE)
    assert p.returncode == 0, p.stderr
    s = summary_json(d)
    for text in (
        s["result_id"],
        f"wall {_fmt_s(s['wall_s'])}".split(" ", 1)[1],
        _fmt_s(s["compute_s"]),
        _fmt_s(s["transfer_s"]),
        _fmt_s(s["idle_s"]),
        f"{s['bytes_moved']} B",
        f"{format_bytes(s['bandwidth_bytes_per_s'])}/s",
        s["top_task_groups"][0]["name"],
        "transpose_sum",
    ):
        assert text in p.stdout, (text, p.stdout)


def test_compare_prints_both_and_ratios_b_over_a(runs, cli):
    a, b = runs["base"] / "transpose", runs["base"] / "shuffle"
    p = cli("trace", "compare", a, b, "--json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    sa, sb = summary_json(a), summary_json(b)
    metrics = [r["metric"] for r in c["rows"]]
    assert {"wall_s", "compute_s", "transfer_s", "idle_s", "bytes_moved", "bandwidth_bytes_per_s"} <= set(
        metrics
    )
    for r in c["rows"]:
        assert r["a"] == sa[r["metric"]] and r["b"] == sb[r["metric"]], r
        if r["a"]:
            assert r["ratio"] == pytest.approx(sb[r["metric"]] / sa[r["metric"]], rel=1e-12)
    assert c["about"]["workload"] == ["transpose_sum", "shuffle"]
    p = cli("trace", "compare", a, b, env=WIDE)
    assert p.returncode == 0, p.stderr
    wall = next(r for r in c["rows"] if r["metric"] == "wall_s")
    line = next(ln for ln in p.stdout.splitlines() if " wall " in f" {ln} ")
    assert _fmt_s(wall["a"]) in line and _fmt_s(wall["b"]) in line and f"{wall['ratio']:.3f}x" in line
    # a trace against itself: every ratio is 1
    c = json.loads(cli("trace", "compare", a, a, "--json").stdout)
    assert all(r["ratio"] == pytest.approx(1.0) for r in c["rows"] if r["a"])


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: room for a record's folder, not for a trace."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "tiny"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def test_a_trace_that_fills_the_disk_keeps_the_record_and_leaves_no_part(cli, tmp_path, tiny_disk):
    p = cli(
        "run", "transpose_sum", "--n", "1000", "--chunk", "250", "--backend", "cpu", "--workers", "2",
        "--repeat", "1", "--warmup", "0", "--results-dir", tmp_path / "res", "--trace", tiny_disk / "t",
        "--json",
    )  # fmt: skip
    assert p.returncode == 5, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"gpuscale: error: could not write the trace {tiny_disk / 't'} (No space left")
    (record,) = (tmp_path / "res").glob("*.json")
    r = json.loads(record.read_text())
    assert r["valid"] is True and r["trace"] is None and r["info"]["trace"]["written"] is False
    assert json.loads(p.stdout)["id"] == r["id"]  # shown as on success
    assert list(tiny_disk.iterdir()) == []


def test_cli_run_with_trace(cli, tmp_path):
    d = tmp_path / "t" / "run1"
    p = cli(
        "run",
        "transpose_sum",
        "--n",
        "1000",
        "--chunk",
        "250",
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        tmp_path / "res",
        "--trace",
        d,
        "--json",
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["trace"] == str(d) and summary_json(d)["result_id"] == r["id"]
    assert sorted(x.name for x in d.iterdir()) == sorted(trace.FILES)
    assert sorted(x.name for x in (tmp_path / "t").iterdir()) == ["run1"]


# ---------------------------------------------------------------------------------------
# Bad input: exit 2, one line, nothing written
# ---------------------------------------------------------------------------------------
def assert_refused(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: "), p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    for n in needles:
        assert n in lines[0], (n, lines[0])


RUN = ("run", "transpose_sum", "--n", "500", "--backend", "cpu", "--repeat", "1", "--warmup", "0")
# an unreachable scheduler: had the cluster been started first, the error would be about it
NO_CLUSTER = ("--scheduler", "tcp://127.0.0.1:1")


def test_run_trace_dir_not_empty(cli, tmp_path):
    d = tmp_path / "full"
    d.mkdir()
    (d / "x.txt").write_text("mine")
    before = files_under(tmp_path)
    assert_refused(
        cli(*RUN, *NO_CLUSTER, "--results-dir", tmp_path / "res", "--trace", d),
        str(d),
        "not empty",
        "--trace",
    )
    assert files_under(tmp_path) == before and (d / "x.txt").read_text() == "mine"


def test_run_trace_dir_is_a_file(cli, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    assert_refused(
        cli(*RUN, *NO_CLUSTER, "--results-dir", tmp_path / "res", "--trace", f), "not a folder", "--trace"
    )
    assert_refused(
        cli(*RUN, *NO_CLUSTER, "--results-dir", tmp_path / "res", "--trace", f / "sub"),
        "cannot be created",
        "--trace",
    )
    assert files_under(tmp_path) == [f]


def test_run_trace_dir_not_writable(cli, tmp_path):
    # /proc refuses new folders even to root (chmod would not stop root)
    assert_refused(
        cli(*RUN, *NO_CLUSTER, "--results-dir", tmp_path / "res", "--trace", "/proc/gpuscale-trace"),
        "/proc/gpuscale-trace",
        "not writable",
        "--trace",
    )
    assert files_under(tmp_path) == []


def test_summarize_refuses_non_traces(cli, tmp_path, runs):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(cli("trace", "summarize", empty), "not a gpuscale trace folder", "no summary.json")
    assert_refused(cli("trace", "summarize", tmp_path / "nosuch"), "does not exist")
    other = tmp_path / "other"
    other.mkdir()
    (other / "summary.json").write_text(json.dumps({"schema": "gpuscale.result", "schema_version": 1}))
    assert_refused(cli("trace", "summarize", other), "not a gpuscale trace summary")
    (other / "summary.json").write_text("{not json")
    assert_refused(cli("trace", "summarize", other), "not readable JSON")
    partial = tmp_path / "partial"
    shutil.copytree(runs["base"] / "transpose", partial)
    (partial / "summary.json").unlink()
    assert_refused(cli("trace", "summarize", partial), "no summary.json")
    assert_refused(cli("trace", "compare", partial, runs["base"] / "transpose"), "no summary.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "other", "partial"]
    assert list(empty.iterdir()) == []


def test_compare_refuses_different_schema_versions(cli, tmp_path, runs):
    v2 = tmp_path / "v2"
    shutil.copytree(runs["base"] / "transpose", v2)
    data = summary_json(v2)
    data["schema_version"] = 2
    (v2 / "summary.json").write_text(json.dumps(data))
    listing = files_under(tmp_path)
    assert_refused(cli("trace", "compare", runs["base"] / "shuffle", v2), "version 1", "version 2")
    assert_refused(cli("trace", "summarize", v2), "schema version 2", "reads version 1")
    assert files_under(tmp_path) == listing


def test_api_refuses_before_running(cpu_session, tmp_path):
    d = tmp_path / "full"
    d.mkdir()
    (d / "x").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        cpu_session.run(
            "transpose_sum", n=500, repeat=1, warmup=0, results_dir=str(tmp_path / "res"), trace=str(d)
        )
    with pytest.raises(UserError, match="not empty"):
        with cpu_session.trace(str(d)):
            raise AssertionError("the block must not run")
    with pytest.raises(UserError, match="not empty"):
        gpuscale.run(
            "transpose_sum",
            n=500,
            backend="cpu",
            trace=str(d),
            results_dir=str(tmp_path / "res"),
            cluster_settings={"scheduler": "tcp://127.0.0.1:1"},
        )
    assert files_under(tmp_path) == [d / "x"]


def test_error_inside_a_capture_writes_nothing(cpu_session, tmp_path):
    import dask.array as da

    with pytest.raises(ZeroDivisionError):
        with cpu_session.trace(str(tmp_path / "t" / "broken")):
            da.ones(10, chunks=5).sum().compute()
            1 / 0  # noqa: B018 - the error inside the block
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary sibling, no created parent
    assert not any(
        n.startswith("gpuscale-trace-")
        for n in cpu_session.client.run(lambda dask_worker: list(dask_worker.plugins)).popitem()[1]
    )  # the sampler was removed


def test_trace_folders_performance_report_shows_its_task_stream_in_chromium(runs, tmp_path):
    """The report every trace folder carries is Dask's own, with BokehJS inlined: it renders
    the run's tasks with every network request blocked."""
    from browser import assert_task_stream, render_performance_report

    path = runs["base"] / "transpose" / "performance-report.html"
    text = path.read_text()
    assert "cdn.bokeh.org" not in text and '<script type="text/javascript" src=' not in text
    r = render_performance_report(path, screenshot=tmp_path / "trace-report.png")
    assert_task_stream(r, min_rows=64, groups=("random", "sum-partial", "transfer-sum"))
    u = render_performance_report(runs["base"] / "user" / "performance-report.html")
    assert_task_stream(u, min_rows=25, groups=("random",))


def test_trace_index_draws_the_phase_timeline_offline(runs):
    """index.html: the links, the summary rows and an inline SVG timeline with one bar per
    phase, drawn (coloured pixels) in headless Chromium with the network blocked."""
    from browser import render_page

    for name in ("transpose", "user"):
        d = runs["base"] / name
        phases = summary_json(d)["phases"]
        assert phases
        p = render_page(d / "index.html")
        assert not p.page_errors, p.page_errors
        assert "performance-report.html" in p.text and "wall" in p.text
        svg = next(s for s in p.svgs if s["id"] == "phase-timeline")
        assert svg["rects"] == len(phases) + 1  # the background and one bar per phase
        assert [t.lstrip("› ") for t in svg["texts"][: len(phases)]] == [x["name"] for x in phases]
        assert "seconds from the start of the trace" in svg["texts"]
        assert svg["width"] > 500 and svg["colored_pixels"] > 0.01 * svg["pixels"], svg


def test_a_threads_tasks_never_overlap_when_the_clock_offset_estimate_drops():
    """A worker stamps its tasks with its clock plus its latest estimate of the scheduler's
    offset; when that estimate drops between two tasks of one thread, the second seems to start
    before the first stopped. It is put back after the first; other threads keep their times."""
    from gpuscale.trace.intervals import length, one_task_per_thread, union

    def task(worker, thread, start, stop):
        return {
            "worker": worker,
            "thread": thread,
            "startstops": [
                {"action": "transfer", "start": start - 0.01, "stop": start},
                {"action": "compute", "start": start, "stop": stop},
            ],
        }

    tasks = [
        task("a", 1, 0.0, 0.15),
        task("a", 1, 0.03, 0.18),  # estimate dropped 0.12 s
        task("b", 1, 0.0, 0.15),
        task("b", 2, 0.05, 0.20),
    ]
    fixed = one_task_per_thread(tasks)
    compute = [(s["start"], s["stop"]) for t in fixed for s in t["startstops"] if s["action"] == "compute"]
    assert compute[1] == pytest.approx((0.15, 0.30)) and compute[2:] == [(0.0, 0.15), (0.05, 0.20)]
    assert length(union(compute)) == pytest.approx(0.30)
    assert fixed[1]["startstops"][0] == tasks[1]["startstops"][0]  # a transfer keeps its time
    assert tasks[1]["startstops"][1]["start"] == 0.03  # the records passed in are left as they were
