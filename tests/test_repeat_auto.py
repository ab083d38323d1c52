"""``--repeat auto`` (``run.repeat: auto``): repeat until the median's relative error reaches
``run.auto-repeat.target-error``, capped by max-repeats and max-time; the record says how
many were taken and why they stopped. Real runs through the real CLI on the CPU."""

from __future__ import annotations

import json

import pytest

from gpuscale.runs import repeats

RUN = (
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
    "100",
    "--warmup",
    "1",
    "--json",
)


def record(p) -> dict:
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------------------
# The rule, on given numbers
# ---------------------------------------------------------------------------------------
def test_relative_error_is_the_distribution_free_interval_of_the_median():
    assert repeats.relative_error([1.0, 1.0]) is None  # 2 repeats: a 50 % interval at best
    assert repeats.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # n=3: min..max, 75 % coverage
    assert repeats.relative_error([0.9, 1.0, 1.1]) == pytest.approx(0.1)
    # a stray slow repeat widens a stdev but not this interval
    times = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 5.0]
    assert repeats.relative_error(times) <= 0.02
    n = 8
    lo, hi = repeats.median_interval(list(range(n)))
    j = lo + 1
    from math import comb

    assert sum(comb(n, i) for i in range(j, n - j + 1)) / 2**n >= repeats.COVERAGE
    assert sum(comb(n, i) for i in range(j + 1, n - j)) / 2**n < repeats.COVERAGE  # the narrowest


def test_policy_stops_for_the_target_the_repeats_or_the_time():
    p = repeats.Policy("auto", target_error=0.05, min_repeats=3, max_repeats=6, max_time_s=10.0)
    assert p.stop([1.0, 1.0], 0.1) is None  # below min-repeats
    assert p.stop([1.0, 1.01, 1.02], 3.0) == "target"
    assert p.stop([1.0, 2.0, 3.0], 3.0) is None
    assert p.stop([1.0, 2.0, 3.0, 1.0, 2.0, 3.0], 3.0) == "max-repeats"
    assert p.stop([1.0, 2.0, 3.0], 7.5) is None
    assert p.stop([1.0, 2.0, 3.0], 8.5) == "max-time"  # one more median-long repeat passes 10 s
    fixed = repeats.Policy(4, target_error=0.05, min_repeats=3, max_repeats=6, max_time_s=10.0)
    assert fixed.stop([1.0] * 3, 100.0) is None and fixed.stop([1.0] * 4, 0.0) == "fixed"


# ---------------------------------------------------------------------------------------
# Real runs through the CLI
# ---------------------------------------------------------------------------------------
def test_repeat_auto_stops_at_the_target(cli, results_dir):
    d = record(cli(*RUN, "--repeat", "auto", "--target-error", "40%", "--results-dir", results_dir))
    r = d["repeats"]
    assert (r["mode"], r["stopped"], r["target_error"]) == ("auto", "target", 0.4), r
    assert r["taken"] == len(d["times_s"]) >= 3
    assert (
        r["relative_error"] == pytest.approx(repeats.relative_error(d["times_s"]))
        and r["relative_error"] <= 0.4
    )
    # it stopped at the first repeat that reached the target
    if len(d["times_s"]) > 3:
        assert repeats.relative_error(d["times_s"][:-1]) > 0.4
    assert "<= target 40%" in r["why"]
    assert d["settings_sources"]["run.repeat"] == "flag"
    assert d["settings_sources"]["run.auto-repeat.target-error"] == "flag"
    assert d["valid"] is True


def test_repeat_auto_capped_by_max_repeats_and_max_time(cli, results_dir):
    d = record(
        cli(
            *RUN,
            "--repeat",
            "auto",
            "--target-error",
            "0.00001",
            "--max-repeats",
            "4",
            "--results-dir",
            results_dir,
        )
    )
    assert (d["repeats"]["stopped"], d["repeats"]["taken"], len(d["times_s"])) == ("max-repeats", 4, 4)
    assert "max-repeats 4 reached" in d["repeats"]["why"]
    d = record(
        cli(
            *RUN,
            "--repeat",
            "auto",
            "--target-error",
            "0.00001",
            "--max-time",
            "0.3",
            "--results-dir",
            results_dir,
        )
    )
    r = d["repeats"]
    assert r["stopped"] == "max-time" and r["max_time_s"] == 0.3, r
    assert 1 <= r["taken"] < 50
    assert sum(d["times_s"]) <= 0.3 + max(d["times_s"])  # it stops before a repeat would pass the cap


def test_repeat_auto_from_the_environment_and_fixed_repeats_recorded(cli, results_dir):
    env = {
        "DASK_GPUSCALE__RUN__REPEAT": "auto",
        "DASK_GPUSCALE__RUN__AUTO_REPEAT__MAX_REPEATS": "3",
        "DASK_GPUSCALE__RUN__AUTO_REPEAT__TARGET_ERROR": "0.00001",
    }
    d = record(cli(*RUN, "--results-dir", results_dir, env=env))
    assert (d["repeats"]["stopped"], d["repeats"]["taken"]) == ("max-repeats", 3)
    assert d["settings_sources"]["run.repeat"] == "env"
    assert d["settings_sources"]["run.auto-repeat.max-repeats"] == "env"
    d = record(cli(*RUN, "--repeat", "2", "--results-dir", results_dir))
    assert d["repeats"] == {
        "mode": "fixed",
        "taken": 2,
        "stopped": "fixed",
        "relative_error": None,
        "why": "2 repeat(s) asked",
    }


def test_repeat_auto_explained_and_bad_values_one_line(cli, tmp_path):
    p = cli("explain", "transpose_sum", "--backend", "cpu", "--repeat", "auto", "--max-time", "30", "--json")
    assert p.returncode == 0, p.stderr
    run = json.loads(p.stdout)["run"]
    assert run["repeat"] == "auto"
    assert run["auto_repeat"] == {"target_error": 0.02, "min_repeats": 3, "max_repeats": 50, "max_time": 30.0}
    p = cli("explain", "transpose_sum", "--backend", "cpu", "--repeat", "auto")
    assert p.returncode == 0 and "relative error <= 2%" in " ".join(p.stdout.split()), p.stdout
    for args, words in (
        (("--repeat", "sometimes"), "--repeat must be a whole number >= 1 or auto"),
        (("--repeat", "auto", "--max-repeats", "2"), "max-repeats (2) must be >= min-repeats (3)"),
        (("--repeat", "auto", "--target-error", "lots"), "target-error"),
    ):
        p = cli(*RUN, *args, "--results-dir", str(tmp_path / "res"))
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpuscale: error: ") and words in lines[0], p.stderr
        assert "; " in lines[0] and not (tmp_path / "res").exists()


def test_bench_spec_takes_repeat_auto(cli, tmp_path):
    spec = tmp_path / "auto.yaml"
    spec.write_text(
        "name: auto\nbackends: [cpu]\nworkers: [1]\nrepeat: auto\nwarmup: 0\n"
        "cluster: {threads_per_worker: 1, max_repeats: 4, target_error: 0.00001}\n"
        "workloads:\n  transpose_sum:\n    sizes: [{n: 200}]\n"
    )
    p = cli("bench", spec, "--out", tmp_path / "out", "--json", timeout=180)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ran"] == 1 and not d["cases"][0].get("error")
    rec = json.loads((tmp_path / "out" / d["cases"][0]["record"]).read_text())
    assert (rec["repeats"]["mode"], rec["repeats"]["stopped"], len(rec["times_s"])) == (
        "auto",
        "max-repeats",
        4,
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("workloads: {svd: {}}\nrepeat: often\n")
    p = cli("bench", bad, "--out", tmp_path / "out2")
    assert (
        p.returncode == 2
        and "whole number >= 1 or auto" in p.stderr
        and len(p.stderr.strip().splitlines()) == 1
    )
