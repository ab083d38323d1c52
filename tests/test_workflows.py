"""The workflow scripts run for real at CPU sizes: both sides ran and agreed; workflows/README.md
names every script with a command that exists."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def studies() -> set[str]:
    """The study scripts pyproject.toml leaves out of the sdist (a test from an unpacked sdist
    skips them)."""
    section = (ROOT / "pyproject.toml").read_text().split("[tool.hatch.build.targets.sdist]")[1]
    return set(re.findall(r'"workflows/([\w.]+)"', section.split("\n[")[0]))


def shipped_or_skip(script: str) -> pathlib.Path:
    path = ROOT / "workflows" / script
    if not path.exists() and script in studies():
        pytest.skip(f"{script} is a study, not in the sdist")
    return path


def run_script(tmp_path, script, *args, timeout=300):
    shipped_or_skip(script)
    out = tmp_path / "out.json"
    p = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(out.read_text())


def test_first_result_times_each_side_to_a_checked_answer(tmp_path):
    d = run_script(
        tmp_path, "first_result.py", "--sides", "default,processes", "--repeat", "1", "--warmup", "0"
    )
    cells = d["cells"]
    assert set(cells) == {"default", "processes"} and all(c["valid"] for c in cells.values()), cells
    assert all(c["median_s"] > 0 and "start-up" in c["note"] for c in cells.values())


def test_first_query_times_each_variants_first_and_warm_runs_in_fresh_sessions(tmp_path):
    d = run_script(
        tmp_path,
        "first_query.py",
        "--backend",
        "cpu",
        "--tpch-scale",
        "0.01",
        "--rounds",
        "1",
        "--data",
        str(tmp_path / "data"),
    )
    cells = d["cells"]
    assert [c["variant"] for c in cells] == ["defaults", "no-client-plan", "no-worker-warm"]
    assert all(len(c["runs"]) == 3 and all(r[3] >= r[2] > 0 for r in c["runs"]) for c in cells), cells
    assert all(c["valid"] and c["diff"] is None for c in cells), cells  # each answer equals pandas'


def test_bench_vs_peer_smoke(tmp_path):
    d = run_script(tmp_path, "bench_vs_peer.py", "--smoke", "--rounds", "1")
    ran = [r for r in d["results"] if "skipped" not in r]
    rows = {r["row"] for r in ran}
    assert {"svd", "svd-cpu", "groupby", "transpose", "scaling", "first"} <= rows
    assert all(r["agrees"] for r in ran)
    for row in ("svd", "groupby"):
        sides = [r["side"] for r in ran if r["row"] == row]
        assert any(s.startswith("gpuscale") for s in sides) and any(s.startswith("plain") for s in sides)
    assert all(r["median_s"] > 0 for r in ran)
    # a call against a running cluster says where its client's time went, from its process start
    (call,) = [r for r in ran if r["row"] == "first" and "first call" in r["side"]]
    age = float(re.search(r"process start to connecting (\d+\.\d+) s", call["note"]).group(1))
    assert 0 < age < call["times_s"][-1]


def test_compare_plain_dask_small(tmp_path):
    d = run_script(tmp_path, "compare_plain_dask.py", "--rounds", "1")
    cases = {(r["case"], r["side"].split(",")[0].split(" ")[0]) for r in d["rows"]}
    assert {("svd", "gpuscale"), ("svd", "plain"), ("groupby", "gpuscale"), ("groupby", "plain")} <= cases
    assert all(r["agrees"] for r in d["rows"])


def test_trace_overhead_smoke(tmp_path):
    d = run_script(tmp_path, "trace_overhead.py", "--smoke", "--keep", str(tmp_path / "traces"))
    sides = [r["side"] for r in d["rows"]]
    assert sides.count("traced") == sides.count("untraced") == d["rounds"] >= 1
    assert all(r["valid"] for r in d["rows"])
    assert all(r["median_s"] > 0 and r["end_to_end_s"] > 0 for r in d["rows"])
    assert d["compute_ratio"] == d["traced"]["median_s"] / d["untraced"]["median_s"] > 0
    assert d["end_to_end_ratio"] > 0 and d["schema"] == "gpuscale-workflow/trace_overhead"
    assert d["compute"]["verdict"] in ("faster", "slower", "not significant")
    for r in d["rows"]:
        if r["side"] == "traced":
            assert "summary.json" in r["trace_files"] and "trace.json" in r["trace_files"]
        else:
            assert r["trace"] is None


def test_audit_overhead_smoke(tmp_path):
    """Both sides ran on the same cluster, the audited side saw clean runs; the ratio is a number
    (the benchmark measures it: no timed assertion here)."""
    d = run_script(tmp_path, "audit_overhead.py", "--smoke")
    assert [c["case"] for c in d["cases"]] == ["svd", "groupby"]
    for c in d["cases"]:
        sides = {r["audited"] for r in c["rows"]}
        assert sides == {True, False} and all(r["valid"] for r in c["rows"])
        assert all(r["audit_tasks"] > 0 for r in c["rows"] if r["audited"])
        assert all(r["audit_tasks"] is None for r in c["rows"] if not r["audited"])
        assert c["clean"] and c["compute_ratio"] > 0 and c["end_to_end_ratio"] > 0
        assert c["compute"]["verdict"] in ("faster", "slower", "not significant")
    assert 0 < d["hook"]["other_us"] < d["hook"]["memory_us"]


def test_audit_workloads_on_cpu(tmp_path):
    """Every built-in workload and the variants ran valid on one cluster, each with an audit that
    saw its tasks (on the CPU family NumPy / pandas are native, so every run is clean)."""
    d = run_script(
        tmp_path,
        "audit_workloads.py",
        "--backend",
        "cpu",
        "--small",
        "--workers",
        "2",
        "--repeat",
        "1",
        timeout=600,
    )
    from gpuscale import workloads

    names = {r["case"].split()[0] for r in d["rows"]}
    assert names == set(workloads.names()) and d["ok"] and d["family"] == "cpu"
    assert all(r["valid"] and r["clean"] and r["tasks"] > 0 for r in d["rows"])


def test_groupby_profile_on_cpu(tmp_path):
    """Where a one-worker groupby's time goes: every part is measured (round trips, client,
    the steps inside the task) and the route's end-to-end time is among them."""
    d = run_script(
        tmp_path,
        "groupby_profile.py",
        "--backend",
        "cpu",
        "--rows",
        "200000",
        "--keys",
        "5000",
        "--rounds",
        "2",
    )
    secs = d["seconds"]
    assert d["family"] == "cpu" and d["rows"] == 200_000
    assert "end to end: gpuscale groupby_agg (as shipped)" in secs
    assert "in the task: one worker's task (concat + one call)" in secs
    assert all(v >= 0 for v in secs.values()) and secs["in the task: concat"] > 0


def test_round_trip_splits_the_hops_at_each_interval(tmp_path):
    """A round trip's hops at two intervals, set on the real streams (read back), and a gpuscale
    run timed at each, valid."""
    d = run_script(
        tmp_path,
        "round_trip.py",
        "--intervals",
        "dask,0.001",
        "--rounds",
        "4",
        "--runs",
        "groupby:rows=20000,keys=100",
    )
    dask_row, fast = d["rows"]
    assert dask_row["streams"]["client -> scheduler"] == 0.01 and dask_row["streams"][
        "scheduler -> worker"
    ] == [0.005]
    assert fast["streams"] == {
        "client -> scheduler": 0.001,
        "scheduler -> client": 0.001,
        "scheduler -> worker": [0.001],
        "worker -> scheduler": [0.001],
    }
    for row in d["rows"]:
        h = row["hops"]
        assert h["total"] > 0 and h["to_task_start"] > 0 and h["total"] >= h["to_task_start"]
        (run,) = row["runs"].values()
        assert run["valid"] is True and run["median_s"] > 0


def test_query_profile_splits_a_user_query_on_cpu(tmp_path):
    d = run_script(
        tmp_path, "query_profile.py", "--backend", "cpu", "--smoke", "--queries", "tpch:t5;h2o-join:j1"
    )
    assert set(d["sides"]) == {"gpuscale", "dask", "alone"}
    for side in ("gpuscale", "dask"):
        for cell in d["sides"][side].values():
            assert cell["tasks"] >= 1 and 0 < cell["busy_s"] <= cell["compute_s"]
            parts = cell["build_s"] + cell["optimize_s"] + cell["compute_s"]
            assert cell["total_s"] == pytest.approx(parts, rel=0.5)
    assert all("total_s" in c for c in d["sides"]["alone"].values())


def test_query_profile_splits_the_engine_route_beside_polars(tmp_path):
    d = run_script(
        tmp_path, "query_profile.py", "--backend", "cpu", "--smoke", "--sides", "route,polars-cpu",
        "--queries", "tpch:q1,q19",
    )  # fmt: skip
    assert set(d["sides"]) == {"route", "polars-cpu"}
    for cell in d["sides"]["route"].values():
        parts = cell["build_s"] + cell["translate_s"] + cell["collect_s"] + cell["answer_s"]
        assert cell["collect_s"] > 0 and cell["total_s"] == pytest.approx(parts, rel=0.5)
    assert all(c["total_s"] > 0 for c in d["sides"]["polars-cpu"].values())


def test_tls_overhead_smoke(tmp_path):
    """Both sides ran (plain TCP and TLS clusters, alternating) and validated; the ratio is a
    number (the script measures it: no timed assertion here)."""
    d = run_script(tmp_path, "tls_overhead.py", "--smoke", "--rounds", "2")
    assert d["schema"] == "gpuscale-workflow/tls_overhead" and d["version"] >= 2
    assert d["valid"] is True and [r["workload"] for r in d["rows"]] == ["svd", "groupby"]
    for r in d["rows"]:
        assert len(r["plain_s"]) == len(r["tls_s"]) == 2 and r["ratio"] > 0
        assert r["lo"] <= r["ratio"] <= r["hi"] and r["verdict"] in ("faster", "slower", "not significant")


def test_spill_gpu_smoke(tmp_path):
    """The capped-memory script on the CPU: 0.6 and 1.5 x a 400 MB worker, both valid; the
    larger one spills."""
    d = run_script(tmp_path, "spill_gpu.py", "--smoke", timeout=400)
    rows = d["rows"]
    assert [r["factor"] for r in rows] == [0.6, 1.5] and all(r["valid"] is True for r in rows)
    # 1.5 x spills, or streams where the worker's baseline leaves no room to spill (CI's);
    # 0.6 x 400 MB spills too (the worker's baseline is ~200 MB)
    assert rows[1]["verdict"] in ("spills", "streams")
    if rows[1]["verdict"] == "spills":
        assert rows[1]["measured"]["spilled_bytes"] > 0


def test_memory_estimate_smoke(tmp_path):
    """The estimate-accuracy script at the smallest sizes: every run valid and measured."""
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workflows" / "memory_estimate.py"),
            "--smoke",
            "--workloads",
            "svd,groupby,merge",
            "--json",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())
    assert [r["workload"] for r in rows] == ["svd", "groupby", "merge"]
    assert all(r["valid"] is True and r["measured_peak"] and r["ratio"] for r in rows), rows


def test_p2p_wire_smoke(tmp_path):
    """The p2p study's structure on the CPU: the dask section (tcp, NumPy blocks, a raw
    LocalCluster and a gpuscale session, each measurement in a child process) and the serialize
    section; every row measured, the transfer logs matched to the rounds, the round trip split
    into its six hops (they add up to about the measured time), the JSON complete."""
    d = run_script(tmp_path, "p2p_wire.py", "--smoke", "--rounds", "2")
    assert d["complete"] and d["args"]["smoke"] is True
    dask = [r for r in d["rows"] if r["section"] == "dask"]
    assert {r["case"] for r in dask} == {
        "LocalCluster tcp (NumPy)",
        "gpuscale cpu tcp (NumPy)",
        "gpuscale cpu tcp (NumPy), message interval 0",
    }
    assert {r["size_bytes"] for r in dask} == {8, 64 * 2**10, 4 * 2**20}
    for r in dask:
        assert r["error"] is None and r["median_s"] > 0 and len(r["times_s"]) == 2 and len(r["warmup_s"]) == 2
        assert r["worker_in_median_s"] is not None and r["worker_out_median_s"] is not None
        hops = r["hops_ms"]
        assert len(hops) == 6 and all(v >= 0 for v in hops.values()), hops
        assert 0.5 < sum(hops.values()) / (r["median_s"] * 1e3) < 1.5, (hops, r["median_s"])
    ser = [r for r in d["rows"] if r["section"] == "serialize"]
    assert ser and all(r["error"] is None for r in ser)
    dumps = [r for r in ser if r["case"] == "dumps get_data reply"]
    assert len(dumps) == 2 and all(r["zero_copy"] and r["frames"] >= 2 for r in dumps)
    assert all(
        c["extra"]["workers"]["w1 (receiver)"]["address"] for c in d["cases"] if c["section"] == "dask"
    )


def test_p2p_wire_needs_two_gpus(tmp_path):
    """Without --smoke on a machine with fewer than 2 GPUs: one line, exit 2, nothing run."""
    import pytest

    from gpuscale import machine

    if len(machine.gpus()) >= 2:
        pytest.skip("this machine has 2 GPUs: the study would run")
    p = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "p2p_wire.py"), "--out", str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "needs 2 GPUs" in p.stdout and len(p.stdout.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()


def test_ssh_gpu_localhost_smoke(tmp_path):
    """The ssh workflow with CPU workers on this machine: its own SSH server (asyncssh) on
    127.0.0.1, `cluster up --deploy ssh` through it (TLS), svd (with the bandwidth probe) and
    groupby against the scheduler file, then `cluster down`: both records valid and naming the
    two workers on 127.0.0.1, the probe's pair measured, everything it started stopped."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("asyncssh") is None:
        pytest.skip("the ssh workflow needs asyncssh (pip install 'gpuscale[ssh]')")
    d = run_script(tmp_path, "ssh_gpu_localhost.py", "--smoke", "--keep", str(tmp_path / "kept"), timeout=400)
    assert d["ok"] and d["problems"] == [] and d["backend"] == "cpu" and d["family"] == "cpu"
    assert d["workers_seen"] == d["workers_expected"] == 2 and d["cluster_up"]["tls"] is True
    assert d["cluster_up"]["scheduler"].startswith("tls://127.0.0.1:")
    assert (
        d["ssh"]["port"] > 0 and d["ssh"]["commands"] >= 6
    )  # uname + dask_spec for the scheduler and each worker
    assert [r["workload"] for r in d["runs"]] == ["svd", "groupby"]
    for r in d["runs"]:
        assert r["rc"] == 0 and r["valid"] is True and r["workers"] == 2 and r["hosts"] == {"127.0.0.1": 2}
        assert r["tls"] is True and [p["label"] for p in r["pairs"]["pairs"]] == ["tls, same host"]
        assert pathlib.Path(r["record"]).is_file()
    (m,) = d["runs"][0]["probe"]["pairs"]
    assert d["runs"][0]["probe"]["value"] is True and m["gib_s"] > 0 and m["transport"] == "tls, same host"
    assert d["down"]["rc"] == 0 and d["up_rc"] == 0
    assert not (tmp_path / "kept" / "scheduler.json").exists()


def test_run_timeline_lays_steps_and_tasks_on_one_clock(tmp_path):
    """A run's steps (build, persist call, wait, synchronize) and its tasks, on the CPU: the
    steps add up to no more than the run, a one-task route shows its one task, which starts
    after the graph is sent, and the svd's spectrum is computed in the Gram sum's task."""
    d = run_script(
        tmp_path,
        "run_timeline.py",
        "--backend",
        "cpu",
        "--workers",
        "1",
        "--rounds",
        "3",
        "--runs",
        "svd:rows=4000,cols=8",
        "groupby:rows=20000,keys=100",
    )
    svd, groupby = d["runs"]
    assert d["submit_s"] > 0 and d["plain_submit_s"] > 0
    for run in d["runs"]:
        assert run["median_s"] > 0 and sum(run["steps_s"].values()) <= run["median_s"] * 1.5
    assert [t["task"] for t in svd["median_run"]["timeline"]][-1] == "singular_values_of_gram"
    if groupby["median_run"]["plan"]["groupby_strategy"] == "per-worker":
        assert groupby["tasks"] >= 1


def _harness():
    sys.path.insert(0, str(ROOT / "workflows"))
    import harness

    return harness


def test_a_study_alternates_the_sides_order_each_round_and_keeps_every_round():
    """Three rounds of two sides: opened a, b, then b, a, then a, b; each cell holds every timed
    run and each round's median; a wrong answer and a side that raises are cells, not stops."""
    import contextlib
    import time

    harness = _harness()
    opened = []

    def side(name, seconds, answer=0):
        @contextlib.contextmanager
        def open_(env):
            opened.append(name)
            yield env

        def build(env, case):
            def run():
                time.sleep(seconds)
                if case == "boom" and name == "b":
                    raise ValueError("no such case on b")
                return answer

            return run, lambda got: None if got == 0 else f"got {got}, want 0"

        return harness.Side(name, build, open=open_)

    study = harness.Study([side("a", 0.001), side("b", 0.001, answer=1)], ["x", "boom"], repeat=2, rounds=3)
    cells = study.run()
    assert opened == ["a", "b", "b", "a", "a", "b"]
    a = cells["x|a"]
    assert a["valid"] and len(a["times_s"]) == 6 and len(a["rounds"]) == 3 and a["median_s"] >= 0.001
    assert len(harness.per_round(a)) == 3 and all(w >= 0.002 for w in harness.per_round(a, "wall_s"))
    assert cells["x|b"]["valid"] is False and cells["x|b"]["diff"] == "got 1, want 0"
    assert cells["boom|b"]["error"] == "ValueError: no such case on b" and cells["boom|b"]["wall_s"] >= 0.001
    opened.clear()
    again = study.run(cells={k: c for k, c in cells.items() if not k.endswith("|b")})
    assert opened == ["b", "b", "b"] and again["x|a"] is cells["x|a"] and len(again["x|b"]["rounds"]) == 3


def test_a_study_side_after_side_times_only_the_cells_it_lacks():
    harness = _harness()
    calls = []

    def build(env, case):
        return (lambda: calls.append(case) or case), lambda got: None

    kept = {"one|s": {"median_s": 1.0, "times_s": [1.0], "valid": True, "diff": None}}
    study = harness.Study([harness.Side("s", build)], ["one", "two"], repeat=3, warmup=1)
    cells = study.run(cells=kept)
    assert cells["one|s"] is kept["one|s"] and calls == ["two"] * 4
    assert len(cells["two|s"]["times_s"]) == 3
    assert cells["two|s"]["warmup"] == 1 and "warmup" not in cells["one|s"]  # each cell its own


def test_bench_once_stops_before_the_next_run_would_pass_the_time_budget():
    import time

    harness = _harness()
    times, got = harness.bench_once(lambda: time.sleep(0.05) or "done", repeat=20, warmup=0, max_time=0.12)
    assert got == "done" and 1 <= len(times) <= 3 and sum(times[:-1]) <= 0.12


def test_a_ratio_the_spread_cannot_tell_from_one_says_not_significant():
    harness = _harness()

    def cell(ts):
        return {"median_s": sorted(ts)[len(ts) // 2], "times_s": ts, "valid": True, "diff": None}

    a = cell([1.00, 1.04, 0.97, 1.02, 0.99, 1.01])
    noisy = cell([0.80, 1.25, 0.95, 1.10, 0.90, 1.15])
    slower = cell([2.00, 2.05, 1.98, 2.02, 2.01, 1.99])
    r = harness.ratio(a, noisy)
    assert r["verdict"] == "not significant" and r["lo"] < 1 < r["hi"]
    assert "not significant" in harness.ratio_text(r)
    r = harness.ratio(a, slower)
    assert r["verdict"] == "slower" and 1.9 < r["lo"] <= r["ratio"] <= r["hi"] < 2.1
    assert harness.ratio(slower, a)["verdict"] == "faster"
    assert harness.ratio(a, {"error": "E"})["verdict"] == "n/a"


def test_results_are_stamped_with_schema_and_version_and_other_kinds_refused(tmp_path):
    import pytest

    harness = _harness()
    path = tmp_path / "r.json"
    harness.write(path, "tls_overhead", {"rows": []})
    d = harness.load(path, "tls_overhead")
    assert d["schema"] == "gpuscale-workflow/tls_overhead" and d["version"] == harness.VERSION
    with pytest.raises(SystemExit, match="not gpuscale-workflow/user_queries"):
        harness.load(path, "user_queries")
    path.write_text(json.dumps({"schema": "gpuscale-workflow/x", "version": harness.VERSION + 1}))
    with pytest.raises(SystemExit, match="newer than this harness"):
        harness.load(path)


GUIDE = ROOT / "workflows" / "README.md"


def _guide_commands() -> list[list[str]]:
    """The commands in the guide's "run it" column, as words."""
    return [
        shlex.split(c)
        for c in re.findall(r"\| `((?:python|bash|gpuscale) [^`]*)` \|$", GUIDE.read_text(), re.M)
    ]


def test_guide_names_every_script_and_spec():
    listed = set(re.findall(r"^\| `([\w./]+)`", GUIDE.read_text(), re.M))
    shipped = {
        p.name
        for p in (ROOT / "workflows").iterdir()
        if p.name != "README.md" and not p.name.startswith((".", "__"))
    }
    listed -= studies() - shipped  # in a clone every study is there; an sdist has none
    assert "queries" in shipped and "user_queries.py" in shipped
    shipped.discard("queries")  # listed with user_queries.py, which runs it
    shipped.discard("harness.py")  # the scripts' module, described above the tables
    assert listed == shipped, (
        f"not in the guide: {sorted(shipped - listed)}; gone: {sorted(listed - shipped)}"
    )
    assert "`queries/`" in GUIDE.read_text() and "`harness.py`" in GUIDE.read_text()


def test_guide_commands_run_what_is_there():
    """Each command runs a file of workflows/ with flags that file takes; `gpuscale bench` a spec
    that loads."""
    from gpuscale.runs import bench

    commands = _guide_commands()
    assert len(commands) == len(re.findall(r"^\| `[\w./]+`", GUIDE.read_text(), re.M))
    for words in commands:
        path = next(w for w in words if w.startswith("workflows/"))
        if path.removeprefix("workflows/") in studies() and not (ROOT / path).exists():
            continue
        assert (ROOT / path).is_file(), path
        if words[0] == "gpuscale":
            assert words[1] == "bench"
            bench.load_spec(str(ROOT / path))
            continue
        source = (ROOT / path).read_text()
        if "import harness" in source:  # its common flags are declared there
            source += (ROOT / "workflows" / "harness.py").read_text()
        for flag in (w for w in words if w.startswith("--")):
            assert f'"{flag}"' in source or f"{flag})" in source or f" {flag} " in source, (path, flag)


def test_shell_scripts_parse():
    for sh in sorted((ROOT / "workflows").glob("*.sh")):
        p = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
        assert p.returncode == 0, (sh.name, p.stderr)


def test_every_workflows_path_named_in_the_project_exists():
    """README, docs, workflows/, tests and CI name only scripts that are there."""
    texts = [
        ROOT / "README.md",
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("workflows/*"),
        *ROOT.glob("tests/*.py"),
        *ROOT.glob(".ci/*"),
    ]
    for f in texts:
        if not f.is_file():
            continue
        for name in re.findall(r"workflows/([a-z_][\w.\-]*\.(?:py|sh|yaml))", f.read_text()):
            there = (ROOT / "workflows" / name).is_file() or name in studies()
            assert there, f"{f.relative_to(ROOT)} names workflows/{name}"


def test_the_studies_left_out_of_the_sdist_are_scripts_here():
    assert len(studies()) >= 9
    for name in studies():
        assert (ROOT / "workflows" / name).is_file(), name


PLAIN_SIDE_INTERRUPTED = """
import contextlib, sys, time
sys.path.insert(0, sys.argv[1])
import harness
from distributed import Client, LocalCluster


@contextlib.contextmanager
def plain(env):
    with harness.peer_cluster_config(), LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        yield client


def build(client, case):
    return (lambda: client.submit(time.sleep, 60, pure=False).result()), (lambda got: None)


if __name__ == "__main__":
    try:
        harness.Study([harness.Side("plain", build, open=plain)], ["nap"], repeat=1, warmup=0).run()
    except KeyboardInterrupt:
        sys.exit(130)
"""


def test_a_plain_side_interrupted_mid_task_closes_without_dask_log_lines(tmp_path):
    """Ctrl-C while a plain Dask side's task runs: the run ends with 130, and neither the client
    nor the worker whose task its cluster cancels logs a line on the way down."""
    import os
    import signal
    import time

    from conftest import as_from_a_terminal

    (tmp_path / "nap.py").write_text(PLAIN_SIDE_INTERRUPTED)
    p = subprocess.Popen(
        [sys.executable, str(tmp_path / "nap.py"), str(ROOT / "workflows")],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        assert "plain: opened in" in p.stderr.readline()
        time.sleep(2)  # the task is running on the worker
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's group
        err = p.stderr.read()
        assert p.wait(timeout=60) == 130
    finally:
        p.kill()
    assert " - distributed." not in err, err


@pytest.mark.parametrize("text", ["", '{"schema": "gpuscale.bench/user_queries", "cel', "[1, 2]"])
def test_a_resume_file_that_is_not_a_results_file_is_one_line(tmp_path, text):
    bad = tmp_path / "earlier.json"
    bad.write_text(text)
    p = subprocess.run(
        [sys.executable, str(ROOT / "workflows" / "user_queries.py"), "--print-only", "--resume", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"user_queries.py: {bad} is not a results file of these scripts"), line
