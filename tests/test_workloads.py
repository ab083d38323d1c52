"""Workloads through a real CPU session: valid results, tuned choices, the runner's honesty,
and validation that actually catches a wrong answer."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pytest
from conftest import produce

from gpuscale import UserError, workloads
from gpuscale.workloads import Output

SVD = dict(rows=20_000, cols=20)
GROUPBY = dict(rows=200_000, keys=1_000)
QUICK = dict(repeat=1, warmup=0)


def assert_recorded(r):
    assert r.path and pathlib.Path(r.path).is_file()
    d = json.loads(pathlib.Path(r.path).read_text())
    assert d["schema"] == "gpuscale.result" and d["schema_version"] == 1
    assert d["id"] == r.id and d["valid"] == r.valid
    return d


def failed_checks(v) -> list[str]:
    return [c.name for c in v.checks if not c.ok]


# ---------------------------------------------------------------------------------------
# Valid runs
# ---------------------------------------------------------------------------------------
def test_svd_valid(cpu_session, results_dir):
    r = cpu_session.run("svd", **SVD, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert r.family == "cpu" and r.backend == "cpu" and r.protocol == "tcp"
    assert r.validation["method"].startswith("full reference (numpy.linalg.svd)")
    assert r.info["route"]["name"] == "gram"
    assert r.choices["chunk_rows"]["source"] == "rule" and r.choices["chunk_rows"]["rule"]
    assert r.choices["chunk_rows"]["value"] == 10_000  # rows / 2 threads
    assert r.choices["route"]["value"] == "auto"
    assert r.cluster["running"]["workers"] == 2
    assert len(r.times_s) == 1 and r.warmup_s == []
    d = assert_recorded(r)
    assert pathlib.Path(r.path).parent == results_dir
    assert d["params"]["rows"] == SVD["rows"]


def test_svd_known_spectrum_takes_cholqr2(cpu_session, results_dir):
    r = cpu_session.run("svd", **SVD, condition=1e7, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert "cholqr2" in r.info["route"]["name"]
    assert r.info["route"]["condition_estimate"] == pytest.approx(1e7, rel=0.1)
    assert "known spectrum" in r.validation["method"]
    names = [c["name"] for c in r.validation["checks"]]
    assert "every s_i vs known spectrum" in names
    assert_recorded(r)


def test_svd_compute_uv(cpu_session, results_dir):
    r = cpu_session.run("svd", **SVD, compute_uv=True, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert "triplet residuals" in r.validation["method"]
    assert_recorded(r)


@pytest.mark.parametrize("route", ["gram", "cholqr2", "tsqr"])
def test_svd_explicit_routes_and_chunk_rows_flag(cpu_session, route):
    r = cpu_session.run("svd", **SVD, route=route, chunk_rows=3_001, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.info["route"]["name"] == route
    assert r.choices["route"] == {"value": route, "source": "flag", "rule": None}
    assert r.choices["chunk_rows"] == {"value": 3_001, "source": "flag", "rule": None}
    assert r.path is None


def test_svd_float32(cpu_session):
    r = cpu_session.run("svd", **SVD, dtype="float32", **QUICK, write=False)
    assert r.valid, r.validation


def test_groupby_valid(cpu_session, results_dir):
    r = cpu_session.run("groupby", **GROUPBY, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert r.validation["method"].startswith("full reference (pandas")
    assert r.choices["split_out"]["value"] == 1
    assert r.choices["groupby_strategy"]["value"] in ("tree", "per-worker")
    assert r.choices["partitions"]["source"] == "rule"
    assert_recorded(r)


def test_groupby_split_out_flag(cpu_session):
    r = cpu_session.run("groupby", **GROUPBY, split_out=3, partitions=4, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.choices["groupby_strategy"]["value"] == "shuffle"
    assert r.choices["split_out"] == {"value": 3, "source": "flag", "rule": None}
    assert r.choices["partitions"]["value"] == 4


def test_groupby_sampled_validation_path(cpu_session, monkeypatch, results_dir):
    import gpuscale.workloads.groupby as gb

    monkeypatch.setattr(gb, "FULL_CHECK_ROWS", 1_000)
    r = cpu_session.run("groupby", **GROUPBY, **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert "sampled" in r.validation["method"]
    names = [c["name"] for c in r.validation["checks"]]
    assert "counts sum to rows" in names and "every group's count = value_counts(key)" in names
    assert any("sampled groups" in n for n in names)
    assert_recorded(r)


# ---------------------------------------------------------------------------------------
# Validation catches wrong answers
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, index",
    [
        ({}, 0),
        ({}, -1),
        ({}, 7),  # full numpy reference
        ({"condition": 1e3}, -1),
        ({"condition": 1e3}, 5),  # known spectrum
    ],
)
def test_svd_validation_catches_one_perturbed_value(cpu_session, params, index):
    wl, p, ctx, data, out = produce(cpu_session, "svd", **SVD, **params)
    assert wl.validate(out, data, p, ctx).valid
    s = np.asarray(out.collections["s"].compute()).copy()
    s[index] *= 1 + 1e-6
    bad = Output({"s": da.from_array(s, chunks=s.shape)}, out.info)
    v = wl.validate(bad, data, p, ctx)
    assert v.valid is False
    assert any(n.startswith("every s_i") for n in failed_checks(v)), failed_checks(v)


def test_svd_validation_catches_wrong_u(cpu_session):
    wl, p, ctx, data, out = produce(cpu_session, "svd", **SVD, compute_uv=True)
    assert wl.validate(out, data, p, ctx).valid
    u = out.collections["u"]
    bad = Output({**out.collections, "u": u * (1 + 1e-6)}, out.info)
    v = wl.validate(bad, data, p, ctx)
    assert v.valid is False
    assert failed_checks(v) == ["triplet residuals ||Xv_i - s_i u_i||"]


def _perturbed_frame(out, column, k, change):
    got = out.collections["result"].compute().sort_index()
    bad = got.copy()
    j = bad.columns.get_loc(column)
    bad.iloc[k, j] = change(bad.iloc[k, j])
    return Output({"result": dd.from_pandas(bad, npartitions=1, sort=False)}, out.info)


@pytest.mark.parametrize(
    "column, change, failing",
    [
        (("float64", "mean"), lambda v: v * (1 + 1e-6), "float64 mean"),
        (("int64", "count"), lambda v: v + 1, "int64 count exact"),
        (("int64", "max"), lambda v: v - 1, "int64 max exact"),
    ],
)
def test_groupby_validation_catches_one_wrong_group(cpu_session, column, change, failing):
    wl, p, ctx, data, out = produce(cpu_session, "groupby", **GROUPBY)
    assert wl.validate(out, data, p, ctx).valid
    v = wl.validate(_perturbed_frame(out, column, 123, change), data, p, ctx)
    assert v.valid is False
    assert failed_checks(v) == [failing]


def test_groupby_sampled_validation_catches_a_wrong_count(cpu_session, monkeypatch):
    import gpuscale.workloads.groupby as gb

    monkeypatch.setattr(gb, "FULL_CHECK_ROWS", 1_000)
    wl, p, ctx, data, out = produce(cpu_session, "groupby", **GROUPBY)
    v = wl.validate(out, data, p, ctx)
    assert v.valid and "sampled" in v.method
    v = wl.validate(_perturbed_frame(out, ("int64", "count"), 321, lambda c: c + 1), data, p, ctx)
    assert v.valid is False
    assert {"counts sum to rows", "every group's count = value_counts(key)"} <= set(failed_checks(v))


def test_groupby_validation_catches_a_missing_group(cpu_session):
    wl, p, ctx, data, out = produce(cpu_session, "groupby", **GROUPBY)
    got = out.collections["result"].compute().sort_index()
    v = wl.validate(
        Output({"result": dd.from_pandas(got.iloc[1:], npartitions=1, sort=False)}, out.info), data, p, ctx
    )
    assert v.valid is False


# ---------------------------------------------------------------------------------------
# The runner: warm-up separate, every repeat recomputed after the previous result is gone
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, params", [("svd", SVD), ("groupby", GROUPBY)])
def test_runner_honesty(cpu_session, name, params):
    r = cpu_session.run(name, **params, repeat=3, warmup=1, write=False)
    assert r.valid
    assert r.info["unsettled_repeats"] == 0
    assert len(r.times_s) == 3 and len(r.warmup_s) == 1
    assert all(t > 0 for t in r.times_s + r.warmup_s)
    assert r.median_s == sorted(r.times_s)[1] and r.min_s == min(r.times_s)
    assert r.generate_s > 0 and r.validate_s > 0 and r.startup_s > 0


def test_every_repeat_recomputes(cpu_session):
    """Repeats rebuild the same graph (same keys); a result still in memory would make a repeat
    time nothing. The scheduler's task stream shows each run doing the whole work again."""
    from collections import Counter

    from dask.utils import key_split
    from distributed import get_task_stream

    runs = 4
    with get_task_stream(client=cpu_session.client) as ts:
        r = cpu_session.run("svd", **SVD, repeat=3, warmup=1, write=False)
    counts = Counter(key_split(t["key"]) for t in ts.data)
    blocks = -(-SVD["rows"] // r.choices["chunk_rows"]["value"])
    assert r.info["route"]["name"] == "gram"
    assert (
        counts["singular_values_of_gram"] == runs
    )  # one Gram eigendecomposition per run, in the sum's last task
    assert counts["gram_block-sum"] % runs == 0 and counts["gram_block-sum"] >= runs * blocks
    assert counts["random"] == blocks  # the data is generated once, outside the timed runs

    with get_task_stream(client=cpu_session.client) as ts:
        r = cpu_session.run("groupby", **GROUPBY, repeat=3, warmup=1, write=False)
    counts = Counter(key_split(t["key"]) for t in ts.data)
    parts = r.choices["partitions"]["value"]
    assert counts["make_partition"] == parts
    # two one-thread workers: the per-worker plan (each worker aggregates its partitions in one task)
    assert r.choices["groupby_strategy"]["value"] == "per-worker"
    workers = len(cpu_session.client.scheduler_info(n_workers=-1)["workers"])
    names = [t["key"][0] if isinstance(t["key"], tuple) else str(t["key"]) for t in ts.data]
    ours = [n for n in names if n.startswith("gpuscale-groupby")]
    partials = sum(n.endswith("-partial") for n in ours)
    assert partials >= runs * min(workers, parts), ours  # every worker's share, every run
    assert len(ours) - partials >= runs, ours  # and its combine, every run

    with get_task_stream(client=cpu_session.client) as ts:  # the tree, asked for: every partition every run
        r = cpu_session.run("groupby", **GROUPBY, split_out=1, repeat=3, warmup=1, write=False)
    counts = Counter(key_split(t["key"]) for t in ts.data)
    assert r.choices["groupby_strategy"]["value"] == "tree"
    assert counts["groupby_apply_funcs"] == runs * parts  # every partition aggregated every run


def test_session_defaults_for_repeat_and_warmup(cpu_session):
    r = cpu_session.run("svd", rows=2_000, cols=10, write=False)
    assert (len(r.times_s), len(r.warmup_s)) == (3, 1)  # gpuscale.yaml run.repeat / run.warmup


# ---------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------
def test_builtin_workloads_registered():
    assert {"svd", "groupby"} <= set(workloads.names())
    with pytest.raises(UserError, match="unknown workload 'nosuch'.*svd"):
        workloads.get("nosuch")
    # the name -> module map that lets `get` import one module is what the modules register
    for name, module in workloads.BUILTINS.items():
        cls = workloads.get(name)
        assert cls.name == name and cls.__module__ == f"gpuscale.workloads.{module}"
    assert set(workloads.BUILTINS) <= set(workloads.names())


def test_run_imports_only_the_workload_it_runs(tmp_path):
    """`gpuscale run groupby` resolves its command without importing the other workloads
    (dask.array and every kernel module: a second of a run against a running cluster)."""
    code = (
        "import sys; from gpuscale import workloads; workloads.get('groupby'); "
        "print(sorted(m for m in sys.modules if m.startswith('gpuscale.workloads.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307 - our own print of a list of module names
    assert "gpuscale.workloads.groupby" in loaded
    assert not {"gpuscale.workloads.svd", "gpuscale.workloads.stencil", "gpuscale.workloads.fft"} & set(
        loaded
    ), loaded


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("svd", {"bogus": 1}, "has no parameter --bogus.*--rows"),
        ("svd", {"rows": 0}, "--rows"),
        ("svd", {"rows": 10, "cols": 50}, "tall matrix"),
        ("svd", {"route": "qr"}, "--route"),
        ("svd", {"dtype": "int8"}, "--dtype"),
        ("svd", {"condition": 0.5}, "--condition"),
        ("svd", {"rows": 1000, "cols": 100, "chunk_rows": 50, "route": "tsqr"}, "TSQR"),
        ("groupby", {"keys": 2000, "rows": 1000}, "--keys 2000 > --rows 1000"),
        ("groupby", {"rows": 10, "keys": 5, "partitions": 11}, "--partitions 11 > --rows 10"),
        ("groupby", {"split_out": "many"}, "--split-out"),
    ],
)
def test_parameter_errors(cpu_session, name, params, match):
    with pytest.raises(UserError, match=match):
        cpu_session.run(name, **params, write=False)


def test_parameters_from_strings_like_the_cli():
    p = workloads.get("svd").parse({"rows": "1000", "cols": "10", "condition": "1e3", "compute-uv": True})
    assert (p.rows, p.cols, p.condition, p.compute_uv) == (1000, 10, 1e3, True)
    p = workloads.get("groupby").parse({"split-out": "3"})
    assert p.split_out == 3
