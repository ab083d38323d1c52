"""gpuscale bench (a YAML sweep into a folder), gpuscale results list / chart / compare.

Real LocalClusters on the CPU: the tiny spec (2 workloads x 2 sizes x 1-2 workers) runs twice
through the command line (A and B, for the A/A comparison) and once more into A (resume).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO, _clean_environ

from gpuscale import UserError
from gpuscale.records import charts, compare, folder, results, table
from gpuscale.runs import bench

TINY = REPO / "workflows" / "tiny.yaml"


def gpuscale_cli(*args, cwd, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", *map(str, args)],
        cwd=str(cwd),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The tiny spec run twice (A, B) through the CLI, then A again (the resume)."""
    root = tmp_path_factory.mktemp("bench")
    a = gpuscale_cli("bench", TINY, "--out", root / "A", "--json", cwd=root)
    assert a.returncode == 0, a.stderr[-3000:]
    records_after_first = sorted(p.name for p in (root / "A" / "records").iterdir())
    b = gpuscale_cli("bench", TINY, "--out", root / "B", cwd=root)
    assert b.returncode == 0, b.stderr[-3000:]
    again = gpuscale_cli("bench", TINY, "--out", root / "A", "--json", cwd=root)
    assert again.returncode == 0, again.stderr[-3000:]
    return {
        "root": root,
        "A": root / "A",
        "B": root / "B",
        "first": json.loads(a.stdout),
        "first_stderr": a.stderr,
        "again": json.loads(again.stdout),
        "records_after_first": records_after_first,
    }


def _cases():
    return bench.load_spec(TINY)[1]


def test_sweep_writes_one_record_per_case(sweeps):
    cases = _cases()
    assert len(cases) == 8  # 2 workloads x 2 sizes x 2 worker counts, one backend
    recs = results.find(sweeps["A"] / "records")
    assert len(recs) == len(cases) == len(sweeps["records_after_first"])
    assert all(r.valid is True for r in recs)
    seen = {
        (r.workload, r.params.get("n") or r.params.get("rows"), r.cluster["running"]["workers"]) for r in recs
    }
    assert seen == {
        (c["workload"], c["params"].get("n") or c["params"].get("rows"), c["workers"]) for c in cases
    }
    for r in recs:  # the spread is in every record, next to the old keys
        assert len(r.times_s) == 3 and r.stdev_s > 0 and r.iqr_s >= 0
        assert r.median_s > 0 and r.min_s > 0
    first = sweeps["first"]
    assert first["ran"] == 8 and first["skipped"] == 0 and first["failed"] == 0
    # the progress display: one line per case on stderr (not a terminal here)
    lines = [ln for ln in sweeps["first_stderr"].splitlines() if ln.startswith("[")]
    assert [ln.split("]")[0] for ln in lines] == [f"[{i}/8" for i in range(1, 9)]
    assert all(" ok " in ln for ln in lines)


def test_one_cluster_per_backend_protocol_workers(sweeps):
    recs = results.find(sweeps["A"] / "records")
    schedulers = {}
    for r in recs:
        schedulers.setdefault(r.cluster["running"]["workers"], set()).add(r.cluster["running"]["scheduler"])
    assert {k: len(v) for k, v in schedulers.items()} == {1: 1, 2: 1}  # reused across the cases


def test_table_has_one_row_per_case(sweeps):
    pq = pd.read_parquet(sweeps["A"] / "table.parquet")
    csv = pd.read_csv(sweeps["A"] / "table.csv")
    assert list(pq.columns) == table.COLUMNS == list(csv.columns)
    assert len(pq) == len(csv) == 8
    assert set(pq["workload"]) == {"transpose_sum", "reduction"}
    assert set(pq["size"]) == {"n=200", "n=400", "rows=2000,cols=100", "rows=4000,cols=100"}
    assert set(pq["workers"]) == {1, 2} and set(pq["backend"]) == {"cpu"} and set(pq["family"]) == {"cpu"}
    assert set(pq["protocol"]) == {"tcp"} and pq["valid"].all() and (pq["repeats"] == 3).all()
    assert (pq["median_s"] > 0).all() and (pq["stdev_s"] > 0).all() and pq["error"].isna().all()
    for _, row in pq.iterrows():
        assert row["record"].startswith("records/")  # relative: the folder can move
        rec = results.load(sweeps["A"] / row["record"])
        assert rec.median_s == row["median_s"] and rec.stdev_s == row["stdev_s"]
        assert json.loads(row["params"]) == rec.params


def test_pngs_are_drawn(sweeps):
    import matplotlib.image as mpimg

    for name in ("time_vs_size", "spread"):  # CPU only: no speedup chart
        png = sweeps["A"] / charts.CHARTS[name]
        img = mpimg.imread(png)
        assert img.shape[0] > 200 and img.shape[1] > 300
        rgb = img[..., :3].reshape(-1, 3)
        assert rgb.std() > 0.05  # not blank
        assert (rgb.max(axis=1) - rgb.min(axis=1) > 0.3).mean() > 0.001  # coloured marks drawn
    assert not (sweeps["A"] / charts.CHARTS["speedup"]).exists()


def test_chart_functions_label_their_axes(sweeps):
    frame = pd.read_parquet(sweeps["A"] / "table.parquet")
    recs = results.find(sweeps["A"] / "records")
    fig = charts.time_vs_size(frame)
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["transpose_sum", "reduction"]
    for ax in axes:
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert "size" in ax.get_xlabel() and "median time" in ax.get_ylabel()
        assert {t.get_text() for t in ax.get_legend().get_texts()} == {"cpu tcp 1w", "cpu tcp 2w"}
        assert sum(len(line.get_xdata()) for line in ax.get_lines()) == 4
    fig = charts.spread(frame, recs)
    ax = fig.get_axes()[0]
    assert ax.get_xlabel().startswith("time per repeat") and ax.get_ylabel() == "case"
    assert ax.get_xscale() == "log" and fig.get_size_inches()[0] == charts.WIDTH  # a page's width
    assert sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets")) >= 8 * 3
    assert charts.speedup(frame) is None  # one family only


def test_speedup_chart_pairs_host_and_device_families(sweeps):
    frame = pd.read_parquet(sweeps["A"] / "table.parquet")
    gpu = frame.copy()
    gpu["backend"] = gpu["family"] = "gpu"
    gpu["median_s"] = gpu["median_s"] / 10  # a device family 10x faster
    both = pd.concat([frame, gpu], ignore_index=True)
    rows = charts.speedup_rows(both)
    assert len(rows) == 4
    assert set(rows["host"]) == {"cpu"} and set(rows["device"]) == {"gpu"}
    fig = charts.speedup(both)
    ax = fig.get_axes()[0]
    assert (
        ax.get_xscale() == "log" and "speedup" in ax.get_xlabel() and ax.get_ylabel() == "workload and size"
    )
    top_down = [t.get_text() for t in sorted(ax.get_yticklabels(), key=lambda t: -t.get_position()[1])]
    assert top_down == [f"{w} {s}" for w, s in zip(rows["workload"], rows["size"])]  # the first on top
    assert fig.get_size_inches()[0] == charts.WIDTH  # one row a case: it grows down, not across
    # each bar: the fastest CPU case over the fastest GPU case of that size
    for _, r in rows.iterrows():
        cpu = frame[(frame["workload"] == r["workload"]) & (frame["size"] == r["size"])]["median_s"].min()
        assert r["speedup"] == pytest.approx(cpu / (cpu / 10))


def test_report_html_renders_with_its_charts(sweeps):
    from browser import render_page

    page = render_page(sweeps["A"] / "report.html")
    assert not page.page_errors, page.page_errors
    srcs = sorted(i["src"] for i in page.images)
    assert srcs == ["spread.png", "time_vs_size.png"]
    for img in page.images:  # decoded by the browser: the files exist and are images
        assert img["complete"] and img["width"] > 300 and img["height"] > 200, img
    assert "gpuscale bench: tiny" in page.text and "transpose_sum" in page.text and "n=400" in page.text


def test_rerun_skips_finished_cases(sweeps):
    again = sweeps["again"]
    assert again["ran"] == 0 and again["skipped"] == 8 and again["failed"] == 0
    assert sorted(p.name for p in (sweeps["A"] / "records").iterdir()) == sweeps["records_after_first"]
    ledger = folder.read_ledger(sweeps["A"])
    assert len(ledger["cases"]) == 8 and all(c["status"] == "ok" for c in ledger["cases"])


def test_a_moved_folder_still_resumes(sweeps, tmp_path):
    import shutil

    moved = tmp_path / "moved"
    shutil.copytree(sweeps["A"], moved)
    d = bench.run(TINY, moved)  # every case has its record: no cluster starts
    assert d["ran"] == 0 and d["skipped"] == 8
    assert len(list((moved / "records").glob("*.json"))) == 8


def test_failing_cases_are_recorded_and_the_sweep_goes_on(tmp_path, cli):
    spec = tmp_path / "fails.yaml"
    spec.write_text(
        "name: fails\nbackends: [cpu, gpu]\nworkers: [1]\nrepeat: 2\nwarmup: 0\n"
        "cluster: {threads_per_worker: 1}\n"
        "workloads:\n"
        "  transpose_sum:\n"
        "    sizes: [{n: 200000}, {n: 200}]\n"
    )  # 200000: fails the memory check, at run time
    out = tmp_path / "out"
    if bench.session_mod.backends.select("gpu", check=False).family.probe()[0]:
        pytest.skip("this machine has a GPU: the gpu cluster would start")
    p = cli("bench", spec, "--out", out, "--json", timeout=240)
    assert p.returncode == 3, p.stderr[-3000:]  # the sweep went on, and says some cases failed (exit 3)
    d = json.loads(p.stdout)
    assert d["with_error"] == 1 and (out / "report.html").is_file()
    by = {(c["backend"], c["size"]): c for c in d["cases"]}
    assert by[("cpu", "n=200")]["status"] == "ok" and by[("cpu", "n=200")]["valid"] is True
    big = by[("cpu", "n=200000")]
    assert big["status"] == "failed" and big["record"] is None
    assert "UserError" in big["error"] and "needs about" in big["error"] and "\n" not in big["error"]
    for size in ("n=200", "n=200000"):  # no GPU here: not run here, each case says why, no error
        c = by[("gpu", size)]
        assert c["status"] == "not here" and c["error"] is None and "cupy" in c["why"]
    assert d["ran"] == 1 and d["failed"] == 1 and d["not_here"] == 2
    frame = pd.read_parquet(out / "table.parquet")
    assert len(frame) == 4 and frame["error"].notna().sum() == 3
    assert frame["error"].str.startswith("not run here: ").sum() == 2
    assert frame.loc[frame["error"].isna(), "median_s"].notna().all()
    assert len(list((out / "records").glob("*.json"))) == 1
    # the re-run keeps the finished case and tries the failed and the not-here ones again
    d2 = bench.run(spec, out)
    assert d2["skipped"] == 1 and d2["failed"] == 1 and d2["not_here"] == 2 and d2["ran"] == 0
    assert len(list((out / "records").glob("*.json"))) == 1


@pytest.mark.parametrize(
    "text, words",
    [
        ("workloads: {svd: {sizes: [{rows: 100}]}}\nbogus: 1\n", ["unknown key 'bogus'", "allowed keys"]),
        ("workloads: {nosuch: {}}\n", ["workloads.nosuch", "unknown workload 'nosuch'", "use one of"]),
        (
            "workloads: {svd: {sizes: [{rowz: 100}]}}\n",
            ["unknown parameter 'rowz' at workloads.svd.sizes[0]", "svd's parameters", "cols"],
        ),
        ("workloads: {svd: {params: {rowz: 100}}}\n", ["unknown parameter 'rowz' at workloads.svd.params"]),
        ("workloads: {fft: {grid: {axes: [0, 1]}}}\n", ["unknown parameter 'axes' at workloads.fft.grid"]),
        ("workloads: {svd: {sizes: [{rows: -5}]}}\n", ["workloads.svd (sizes[0]", "--rows"]),
        (
            "workloads: {svd: {grid: {route: [gram, nosuch]}}}\n",
            ["workloads.svd (sizes[0]", "nosuch", "--route"],
        ),
        ("workloads: {svd: {size: [{rows: 100}]}}\n", ["unknown key 'size' at workloads.svd", "sizes"]),
        ("workloads: {svd: {}}\nbackends: [tpu]\n", ["backends", "'tpu'", "cpu"]),
        ("workloads: {svd: {}}\nrepeat: 0\n", ["repeat", "whole number >= 1 or auto"]),
        ("workloads: {svd: {}}\ncluster: {workers: 2}\n", ["unknown key 'workers' at cluster", "top-level"]),
        ("backends: [cpu]\n", ["'workloads' is missing"]),
        ("workloads: [svd\n", ["not valid YAML"]),
    ],
)
def test_bad_spec_is_one_line_exit_2(cli, tmp_path, text, words):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    p = cli("bench", spec, "--out", tmp_path / "out", timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuscale: error: {spec}"), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


# ---------------------------------------------------------------------------------------
# results list / chart / compare
# ---------------------------------------------------------------------------------------
def test_results_list_newest_first(sweeps, cli):
    p = cli("results", "list", sweeps["A"], "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert len(rows) == 8
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps, reverse=True)
    assert all(r["stdev_s"] > 0 and "iqr_s" in r for r in rows)
    shown = cli("results", "list", sweeps["A"])
    assert shown.returncode == 0 and "newest first" in shown.stdout


def test_results_chart_redraws_from_the_records(sweeps, cli, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sweeps["A"], copy)
    for name in ("table.parquet", "table.csv", "report.html", *charts.CHARTS.values()):
        (copy / name).unlink(missing_ok=True)
    p = cli("results", "chart", copy, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert set(d["charts"]) == {"time_vs_size", "spread"} and d["rows"] == 8
    assert (copy / "report.html").is_file() and (copy / "time_vs_size.png").stat().st_size > 10_000
    assert len(pd.read_parquet(copy / "table.parquet")) == 8
    # a plain folder of records (no ledger): one row per record
    plain = tmp_path / "plain"
    shutil.copytree(sweeps["A"] / "records", plain)
    d = folder.redraw(plain)
    frame = pd.read_parquet(plain / "table.parquet")
    assert d["rows"] == len(frame) == 8 and set(frame["size"]) >= {"n=200,dtype=float64"}
    assert set(d["charts"]) == {"time_vs_size", "spread"} and (plain / "report.html").is_file()


def test_compare_a_a_is_never_slower(sweeps, cli):
    # 3 repeats a case: too few for the rank interval, so Welch's on log times, widened by the
    # assumed spread between runs; the same code read twice is not "slower". A 95 % interval
    # leaves 2.5 % a case to chance, so one of 8 may be when other work on the 2 shared cores
    # lands on one sweep (seen once, beside another cluster); two would be 1 in 60.
    p = cli("results", "compare", sweeps["A"], sweeps["B"], "--json", "--fail-if-slower", "25%")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    assert len(c["cases"]) == 8 and not c["only_a"] and not c["only_b"]
    assert c["counts"]["slower"] <= 1, [(x["workload"], x["ratio"], x["lo"], x["hi"]) for x in c["cases"]]
    for x in c["cases"]:
        assert x["lo"] <= x["ratio"] <= x["hi"] and x["how"] == "welch" and x["mde"] > 1.05
        assert x["verdict"] != "inconclusive" or x["resolve"] is None or x["resolve"]["per_side"] >= 1
    assert c["method"] == compare.METHOD and c["between_run_sd"] >= compare.ASSUMED_BETWEEN_RUN
    assert "assumed" in c["between_runs"] or "from the cases' scatter" in c["between_runs"]
    table_out = cli("results", "compare", sweeps["A"], sweeps["B"])
    assert table_out.returncode == 0 and "between runs:" in table_out.stdout


def test_compare_two_record_files_and_few_repeats(sweeps, tmp_path):
    recs = [r for r in results.find(sweeps["A"] / "records") if r.workload == "reduction"]
    same_case = [r for r in recs if r.params == recs[0].params]
    c = compare.compare(same_case[0].path, same_case[-1].path)
    assert len(c["cases"]) == 1 and c["cases"][0]["a_record"] == same_case[0].path
    w = compare.welch([1.0], [1.1], 0.95)
    assert math.exp(w["est"]) == pytest.approx(1.1) and w["lo"] is None and w["hi"] is None
    assert compare.verdict(None, None, 0.05) == "n/a"
    est, lo, hi = compare.hodges_lehmann([1.0, 1.1, 0.9], [1.0, 1.2, 1.1], 0.95)
    assert lo is None and hi is None  # 3 + 3 repeats cannot give a 95 % rank interval


def test_compare_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no gpuscale result records"):
        compare.compare(tmp_path / "empty", tmp_path / "empty")
    with pytest.raises(UserError, match="percentage"):
        compare.parse_pct("five", "--fail-if-slower")
    assert compare.parse_pct("5%", "x") == compare.parse_pct("5", "x") == pytest.approx(0.05)


def test_spread_keys_are_additive():
    r = results.Result.build(
        workload="w",
        params={},
        backend="cpu",
        family="cpu",
        backend_reason="",
        protocol="tcp",
        knobs={},
        choices={},
        cluster={},
        times_s=[1.0, 2.0, 4.0],
        warmup_s=[],
        generate_s=0.0,
        validate_s=0.0,
        valid=True,
        validation={},
        versions={},
        hardware={},
    )
    assert r.stdev_s == pytest.approx(1.5275, rel=1e-3) and r.iqr_s == pytest.approx(1.5)
    d = r.to_dict()
    assert {"median_s", "min_s", "times_s", "stdev_s", "iqr_s"} <= set(d)
    old = {k: v for k, v in d.items() if k not in ("stdev_s", "iqr_s")}  # a record from before
    assert results.Result.model_validate(old).stdev_s is None
    one = results.Result.build(
        **{
            **{k: v for k, v in d.items() if k not in ("stdev_s", "iqr_s", "median_s", "min_s")},
            "times_s": [1.0],
        }
    )
    assert one.stdev_s is None and one.iqr_s is None


MIXED = """name: mixed
backends: [gpu, cpu]
protocols: [tcp]
workers: [1]
repeat: 1
warmup: 0
cluster: {threads_per_worker: 1}
workloads:
  transpose_sum:
    sizes: [{n: 200}, {n: 300}]
  reduction:
    sizes: [{rows: 2000, cols: 100}]
"""


def test_cases_a_machine_cannot_run_are_one_line_and_run_on_one_that_can(cli, tmp_path):
    """On a machine without a GPU stack a sweep of GPU and CPU cases says in one line why its GPU
    cases do not run here, runs the CPU ones and exits 0; the GPU cases are left to a re-run on
    a machine that can (they are not finished)."""
    from conftest import gpu_probe

    if gpu_probe()[0]:
        pytest.skip("this machine can run the GPU cases")
    (tmp_path / "mixed.yaml").write_text(MIXED)
    for _ in range(2):  # a re-run tries the GPU cases again, and says so again in one line
        p = cli("bench", "mixed.yaml", "--out", "b")
        assert p.returncode == 0, p.stderr
        here = [line for line in p.stderr.splitlines() if "not run here" in line]
        assert len(here) == 1 and here[0].startswith("[1/6] not run here: 3 gpu tcp case(s): backend 'gpu'")
        assert "pip install" in here[0] and "UserError" not in here[0]
        assert "3 not run here (a machine that can runs them), 0 with an error" in p.stdout
    ledger = folder.read_ledger(tmp_path / "b")["cases"]
    assert sorted(c["status"] for c in ledger) == ["not here"] * 3 + ["ok"] * 3
    assert not any(folder.finished(c, tmp_path / "b") for c in ledger if c["backend"] == "gpu")


@pytest.mark.parametrize("name", ["../../../../tmp/escape", "a/b", "..", "/abs", ".hidden", "x" * 81])
def test_a_spec_name_is_a_name_not_a_path(cli, tmp_path, name):
    """The name picks the default folder bench-NAME in the working folder: a name from a file
    never points outside it."""
    (tmp_path / "s.yaml").write_text(
        f"name: {json.dumps(name)}\nworkloads: {{transpose_sum: {{sizes: [{{n: 100}}]}}}}\n"
    )
    p = cli("bench", "s.yaml")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("gpuscale: error: s.yaml: name: must be a name of letters, digits")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["s.yaml"]  # nothing written, anywhere near
